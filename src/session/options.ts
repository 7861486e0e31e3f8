// A session's options and a command's, checked before anything starts: each refusal is
// `INVALID_OPTION` naming the option, what it got and what is accepted (the durations are
// `checkMs`'s, src/options.ts; `containment` is `planContainment`'s).
import type { StdioOptions } from 'node:child_process';
import type { Containment } from '../containment/select.js';
import { TetherError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import { checkMs } from '../options.js';
import type { EventListener } from '../sweep/events.js';
import { compileKeep, type KeepRule } from '../sweep/keep.js';
import type { SweepProgress } from '../sweep/sweep-options.js';
import { checkOutputOptions, type OutputOptions } from './collect.js';
import { checkKnownKeys } from './known-options.js';

/** Options of a session. Durations in milliseconds. */
export interface SessionOptions {
  /** TERM phase budget of the sweep. Default 5000 (decisions.md D3). */
  graceMs?: number;
  /** KILL phase budget. Default 3000. */
  killAfterMs?: number;
  /** How long a payload's output is awaited past its exit. Default 2000 (decisions.md D8). */
  outputCapMs?: number;
  /** Where procfs is mounted. Default `/proc`; a path without one makes the sweep warn `NO_PROC`. */
  procRoot?: string;
  /**
   * Containment layers (docs/containment.md): `auto` (default: env tag + subreaper helper +
   * a cgroup v2 when writable) or an explicit list of `env-tag`, `subreaper`, `cgroup`,
   * `pid-namespace`. Throws `INVALID_OPTION` for another value; a layer of an explicit list
   * that cannot be had makes `spawn` throw `CONTAINMENT_UNAVAILABLE`.
   */
  containment?: Containment;
  /**
   * Declared long-lived services (docs/sessions.md, "Keeping a service"): each `{ match, ttlMs,
   * owner }` — a glob over the whole cmdline (arguments joined by one space), how long it may run
   * past its first keep (ms, 1 to 2³¹−1), who answers for it. A process of the session that
   * matches is left running by the sweep with its descendants and reported in `report.kept`
   * (with `expiresAt`, ms since the epoch). The session's own commands are never kept. Default:
   * none — nothing is kept without an entry. Throws `INVALID_OPTION` naming the field
   * (`keep[0].match`), and for `keep` with a `pid-namespace` containment (its end kills them).
   */
  keep?: readonly KeepRule[];
  /** Receives `delegate_background` and `warning` events. */
  onEvent?: EventListener;
  /** Receives the sweep's progress after each round. */
  onProgress?: (progress: SweepProgress) => void;
  /**
   * Records in each stopped process's report entry the TCP ports it listened on, read when the
   * sweep first finds it, before its signal (`ProcessRecord.listening`). Default false.
   */
  collectPorts?: boolean;
  /**
   * Records the session in this ledger (docs/ledger.md, "Recording"): `running` before its
   * first command starts (`begin`), then its sweep's report and its end — `succeeded`,
   * `failed`, `cancelled` or `ambiguous`. A write that fails once a command runs is a
   * `LEDGER_WRITE_FAILED` warning of the report, never a lost sweep.
   */
  ledger?: Ledger;
  /**
   * With `ledger`: the first command starts only once its begin is written, and a begin that
   * fails stops it before it starts — `spawn` throws the ledger's error (`LEDGER_CORRUPT`,
   * `LEDGER_UNAVAILABLE`…). The begin is written while the helper starts, before the payload's
   * go (`tether run` uses this). Needs a store that writes synchronously (SQLite, the spool), or
   * `await session.begin(argv)` before the first `spawn`. Default false: a failed begin is a
   * warning of the report and the command runs.
   */
  ledgerRequired?: boolean;
}

/**
 * Options of one command run in a session. With piped stdout/stderr (the default), tether reads
 * them into the result (`buffer`, default true) — at most `maxBuffer` bytes each (default
 * 100 MiB; past it the command is ended: `MAX_BUFFER`) — decoded as `encoding` (`'utf8'`,
 * default, or `'buffer'`). `buffer: false` leaves the streams to the caller, who must read
 * them (docs/sessions.md, "Who reads what").
 */
export interface CommandOptions extends OutputOptions {
  cwd?: string;
  /** Environment of the command. Default `process.env`; the session's variable is always added. */
  env?: NodeJS.ProcessEnv;
  /**
   * As `child_process.spawn`'s `stdio`. Default `'pipe'`. Through the helper only fds 0–2
   * pass (`auto` then runs a command with more without the helper, and warns `NO_HELPER`).
   */
  stdio?: StdioOptions;
}

const STDIO_NAMES = ['pipe', 'ignore', 'inherit', 'overlapped'];

/**
 * Checks a command's arguments before anything starts; throws `TetherError` `INVALID_OPTION`
 * naming the option, what it got and what is accepted. (A string for `args` would otherwise be
 * spread into one argument per character.)
 */
export function checkCommand(command: unknown, args: unknown, options: unknown): void {
  if (typeof command !== 'string' || command === '')
    throw invalid('command', command, 'a program name or path');
  if (!Array.isArray(args)) throw invalid('args', args, 'an array of strings');
  // Every index, holes too: `forEach` skips a sparse array's holes (`[, 'a']`).
  for (let i = 0; i < args.length; i++) {
    if (typeof args[i] !== 'string') throw invalid(`args[${i}]`, args[i], 'a string');
  }
  if (options === undefined) return;
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw invalid('options', options, 'an object');
  const { cwd, env, stdio } = options as Record<string, unknown>;
  if (cwd !== undefined && (typeof cwd !== 'string' || cwd === ''))
    throw invalid('cwd', cwd, 'a directory path (a non-empty string)');
  if (env !== undefined && (typeof env !== 'object' || env === null || Array.isArray(env)))
    throw invalid('env', env, 'an object of NAME: value strings');
  if (env !== undefined) {
    try {
      Object.entries(env); // runs its getters: one that throws is refused here, before any start
    } catch (error) {
      throw invalid(
        'env',
        env,
        `an object whose entries can be read (reading it threw: ${clip(String(error))})`,
      );
    }
  }
  if (stdio !== undefined && !Array.isArray(stdio) && !STDIO_NAMES.includes(stdio as string))
    throw invalid('stdio', stdio, `${STDIO_NAMES.map((n) => `'${n}'`).join(', ')} or an array`);
  checkOutputOptions(options as OutputOptions);
}

/**
 * Checks a session's options that are not durations (those are `checkMs`'s) before anything
 * starts; throws `TetherError` `INVALID_OPTION` naming the option, what it got and what is
 * accepted. (`containment` is `planContainment`'s.)
 */
export function checkSessionOptions(options: unknown): void {
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw invalid('options', options, 'an object');
  const { procRoot, onEvent, onProgress, collectPorts, ledger } = options as Record<string, unknown>;
  if (procRoot !== undefined && (typeof procRoot !== 'string' || procRoot === ''))
    throw invalid('procRoot', procRoot, "a directory path (a non-empty string, default '/proc')");
  if (onEvent !== undefined && typeof onEvent !== 'function')
    throw invalid('onEvent', onEvent, 'a function (event) => void');
  if (onProgress !== undefined && typeof onProgress !== 'function')
    throw invalid('onProgress', onProgress, 'a function (progress) => void');
  if (collectPorts !== undefined && typeof collectPorts !== 'boolean')
    throw invalid('collectPorts', collectPorts, 'true or false');
  if (ledger !== undefined && typeof (ledger as { begin?: unknown } | null)?.begin !== 'function')
    throw invalid('ledger', ledger, 'a Ledger (await Ledger.open(path or URL))');
  const { ledgerRequired } = options as Record<string, unknown>;
  if (ledgerRequired !== undefined && typeof ledgerRequired !== 'boolean')
    throw invalid('ledgerRequired', ledgerRequired, 'true or false');
}

/**
 * Checks `spawn()`'s own options (`timeout`, `reject`, `signal`) and refuses a key it does not
 * take (src/session/known-options.ts); throws `TetherError` `INVALID_OPTION` before anything
 * starts. `timeout: 0` is no timeout.
 */
export function checkSpawnOptions(options: unknown): void {
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw invalid('options', options, 'an object');
  checkKnownKeys(options);
  const { timeout, reject, signal } = options as Record<string, unknown>;
  if (timeout !== undefined) checkMs('timeout', timeout);
  if (reject !== undefined && typeof reject !== 'boolean') throw invalid('reject', reject, 'true or false');
  checkAbortSignal('signal', signal);
}

// An AbortSignal, or something that behaves as one (another realm's, a polyfill's): `aborted`
// and the two listener methods. Throws `INVALID_OPTION` naming `option` otherwise.
export function checkAbortSignal(option: string, signal: unknown): void {
  if (signal === undefined || signal instanceof AbortSignal) return;
  const s = signal as Partial<AbortSignal> | null;
  if (
    typeof s === 'object' &&
    s !== null &&
    'aborted' in s &&
    typeof s.addEventListener === 'function' &&
    typeof s.removeEventListener === 'function'
  )
    return;
  const got = typeof s === 'object' && s !== null ? 'an object that is not an AbortSignal' : describe(s);
  throw new TetherError(
    'INVALID_OPTION',
    `invalid ${option}: ${got} (expected an AbortSignal, e.g. AbortController's signal or AbortSignal.timeout(ms))`,
  );
}

export function invalid(option: string, value: unknown, expected: string): TetherError {
  return new TetherError('INVALID_OPTION', `invalid ${option}: ${describe(value)} (expected ${expected})`);
}

// A value for an error message: its type, and a short rendering.
function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === 'string') return `the string ${JSON.stringify(clip(value))}`;
  if (typeof value === 'object') return 'an object';
  return `${typeof value} ${clip(String(value))}`;
}

export function clip(text: string, max = 60): string {
  return text.length > max ? `${text.slice(0, max)}… (${text.length} characters)` : text;
}

// Where a NUL byte is (`args[2]`, `env.NAME`…), or undefined.
export function nulByteIn(
  command: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): string | undefined {
  if (command.includes('\0')) return 'the command';
  const i = args.findIndex((a) => a.includes('\0'));
  if (i >= 0) return `args[${i}]`;
  for (const [name, value] of Object.entries(env)) {
    if (name.includes('\0') || (typeof value === 'string' && value.includes('\0')))
      return `env.${clip(name.replace(/\0/g, '\\0'))}`;
  }
  return undefined;
}

/**
 * Refuses `keep` with a `pid-namespace` containment (`pidns`): the kernel kills every process of
 * a PID namespace when its init ends, so nothing could be kept. Throws `INVALID_OPTION`; also
 * what `compileKeep` throws for a bad rule.
 */
export function checkKeepFits(options: SessionOptions, pidns: boolean): void {
  if (compileKeep(options.keep).length > 0 && pidns)
    throw new TetherError(
      'INVALID_OPTION',
      "invalid keep with containment 'pid-namespace': the kernel kills every process of a PID namespace when its init ends, so nothing could be kept (drop one of them)",
    );
}
