// tether/claude-agent-sdk: the Claude Agent SDK's `spawnClaudeCodeProcess` option, running the
// Claude Code CLI as a tether session. The SDK signals its CLI alone; whatever the CLI started
// (a dev server under `nohup … &`, a watcher) used to outlive the query. Here the CLI's exit ends
// its session: everything it started is swept, and the report goes to `onReport`.
// The SDK is an optional peer: only its types are imported (erased at build time).

import { EventEmitter } from 'node:events';
import { PassThrough, Readable } from 'node:stream';
import type { SpawnedProcess, SpawnOptions } from '@anthropic-ai/claude-agent-sdk';
import type { SessionOptions } from '../session/options.js';
import { helperLost, Session, type SessionProcess } from '../session/session.js';
import type { SweepReport } from '../sweep/report.js';
import { checkAdapterOptions } from './check.js';

export { agentRule, type ListeningSocket, listeningPorts, lostBackgroundWork } from './background.js';

/** Options of `createClaudeCodeSpawner`: a session's for each CLI process, and where its end goes. */
export interface ClaudeCodeSpawnerOptions extends SessionOptions {
  /**
   * Called once per CLI process, after its session's sweep, with the sweep's report (what was
   * stopped — with `listening` ports, `collectPorts` being on by default here —, what survived)
   * and the process. An exception it throws is caught and ignored.
   */
  onReport?: (report: SweepReport, process: TetheredClaudeProcess) => void;
  /** Receives the CLI's stderr, decoded as UTF-8; without it, stderr is read and dropped. */
  onStderr?: (text: string) => void;
}

/**
 * The CLI process as the SDK sees it (`SpawnedProcess`), plus its session: `tag`, `pid`, and
 * `report`, which resolves after the sweep.
 *
 * - `exitCode` / `signalCode` are the CLI's own (reported by the subreaper helper, never the
 *   helper's status), set as soon as the CLI has exited.
 * - `'exit'` is emitted after the session's sweep: when the SDK sees the CLI end, what it
 *   started has ended too (or is named in the report).
 * - `kill(signal)` sends `signal` to the CLI itself (identity-checked). SIGKILL also ends the
 *   session at once; after another signal the session ends when the CLI exits. The SDK's
 *   forwarded abort signal (after its own grace) ends the session.
 * - A start failure (ENOENT, EACCES…) is emitted as `'error'` with Node's errno error, as a
 *   `ChildProcess` does; the session is still swept and reported.
 */
export interface TetheredClaudeProcess extends SpawnedProcess {
  readonly pid: number | undefined;
  /** The session's variable, `TETHER_SESSION_<hex>`. */
  readonly tag: string;
  readonly signalCode: NodeJS.Signals | null;
  /** Resolves to the session's report once it has been swept; never rejects. */
  readonly report: Promise<SweepReport>;
}

/**
 * Makes a `spawnClaudeCodeProcess` for the SDK's `query({ options })`: each call runs the CLI
 * (`options.command` with `options.args`, `cwd`, `env`) as a new session with `options` (the
 * session's: `graceMs`, `containment`…; `collectPorts` defaults to true). Throws `TetherError`
 * `INVALID_OPTION` for a bad option, at once.
 */
export function createClaudeCodeSpawner(
  options: ClaudeCodeSpawnerOptions = {},
): (spawnOptions: SpawnOptions) => TetheredClaudeProcess {
  checkAdapterOptions(options, ['onReport', 'onStderr']);
  const { onReport, onStderr, ...sessionOptions } = options;
  const session = { collectPorts: true, ...sessionOptions };
  return (spawnOptions) => spawnTethered(spawnOptions, session, onReport, onStderr);
}

/**
 * A `spawnClaudeCodeProcess` with default session options and no `onReport`: the CLI's
 * leftovers end with it. Use `createClaudeCodeSpawner` to get the report.
 */
export const spawnClaudeCodeProcess: (options: SpawnOptions) => TetheredClaudeProcess =
  createClaudeCodeSpawner();

function spawnTethered(
  spawnOptions: SpawnOptions,
  sessionOptions: SessionOptions,
  onReport: ClaudeCodeSpawnerOptions['onReport'],
  onStderr: ClaudeCodeSpawnerOptions['onStderr'],
): TetheredClaudeProcess {
  const { command, args, cwd, env, signal } = spawnOptions;
  const s = new Session(sessionOptions);
  let proc: SessionProcess;
  try {
    // buffer: false: the SDK reads the CLI's stdout for the whole query; tether buffering it too
    // would hold every message in memory and end the CLI at maxBuffer.
    proc = s.spawn(command, args, {
      cwd,
      env: definedOnly(env),
      stdio: ['pipe', 'pipe', 'pipe'],
      buffer: false,
    });
  } catch (error) {
    s.endSync(); // CONTAINMENT_UNAVAILABLE…: nothing is left to the exit hook (as spawn() does)
    throw error;
  }
  const events = new EventEmitter();
  let killed = false;
  let exitCode: number | null = null;
  let signalCode: NodeJS.Signals | null = null;

  const stderr = proc.stderr;
  if (stderr) {
    stderr.setEncoding('utf8');
    stderr.on('data', (text: string) => onStderr?.(text));
  }
  const onAbort = () => void s.end();
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  // A lost helper: the CLI's status can no longer be known, and nothing reaps its subtree.
  void helperLost(proc)?.then(onAbort);

  const report = proc.exited.then(async (exit) => {
    exitCode = exit.exitCode;
    signalCode = exit.signal;
    signal?.removeEventListener('abort', onAbort);
    const swept = await s.end();
    try {
      onReport?.(swept, tethered);
    } catch {
      // a listener's failure is its own: the CLI's end is still told to the SDK
    }
    if (exit.error) events.emit('error', startError(exit.error));
    else events.emit('exit', exit.exitCode, exit.signal);
    return swept;
  });

  const tethered: TetheredClaudeProcess = {
    pid: proc.pid,
    tag: s.tag,
    // A CLI that could not start has no pipes: stand-ins keep the SDK's writes and reads harmless.
    stdin: proc.stdin ?? new PassThrough(),
    stdout: proc.stdout ?? Readable.from([]),
    get killed() {
      return killed;
    },
    get exitCode() {
      return exitCode;
    },
    get signalCode() {
      return signalCode;
    },
    report,
    kill(sig: NodeJS.Signals = 'SIGTERM') {
      const sent = proc.kill(sig);
      if (sent) killed = true;
      if (sig === 'SIGKILL') void s.end(); // the SDK's last word: no grace left to give
      return sent;
    },
    on: (event: string, listener: Listener) => void events.on(event, listener),
    once: (event: string, listener: Listener) => void events.once(event, listener),
    off: (event: string, listener: Listener) => void events.off(event, listener),
  } as TetheredClaudeProcess;
  return tethered;
}

// 'exit' (code, signal) or 'error' (error) listeners, as SpawnedProcess declares them.
type Listener = (...args: unknown[]) => void;

// The SDK's env may hold `undefined` for a variable it unsets: left out.
function definedOnly(env: Record<string, string | undefined>): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined));
}

// As a ChildProcess reports a start failure: the errno error (ENOENT…) when there is one.
function startError(error: Error): Error {
  return error.cause instanceof Error ? error.cause : error;
}
