// The sandbox sweep (decisions.md D12): the sweep program, run through
// one exec; tried again, backing off, only when that exec never reached the target.
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS, DEFAULT_SCAN_INTERVAL_MS } from '../options.js';
import { parseTag, type SessionTag } from '../proc/tag.js';
import type { SweepReport } from '../sweep/report.js';
import type { ExecChannel } from './channel.js';
import { createNonce } from './completion.js';
import { ClientNotStartedError, nameProcesses, SandboxError } from './errors.js';
import type { TargetIdentity } from './helper-use.js';
import { checkSandboxKeys, SANDBOX_SWEEP_KEYS } from './known-options.js';
import { program } from './programs.js';
import { pause, type RunOutcome, runOnce } from './run.js';
import { type ParsedSweep, parseSweepOutput } from './sweep-output.js';

/** The whole sweep's budget, retries included, ms (decisions.md D12). */
export const SWEEP_BUDGET_MS = 180_000;
/**
 * The budget left once a cancel arrives, ms (decisions.md D12): at least the sweep's grace and
 * kill-after and CANCEL_SLACK_MS, when those are longer.
 */
export const CANCEL_BUDGET_MS = 10_000;
/** What a cancel's budget leaves past the program's phases: its exec, its last scan, its output. */
const CANCEL_SLACK_MS = 3_000;
/** First pause before a retry, ms; doubled each time up to RETRY_MAX_MS. */
export const RETRY_FIRST_MS = 250;
/** Longest pause between two retries of a sweep whose exec never reached the target, ms. */
export const RETRY_MAX_MS = 15_000;

/** Options of `sandbox.sweep`. Durations in milliseconds. */
export interface SandboxSweepOptions {
  /** TERM phase in the target. Default 5000. */
  graceMs?: number;
  /** KILL phase in the target. Default 3000. */
  killAfterMs?: number;
  /** Pause between scans in the target. Default 50. */
  intervalMs?: number;
  /** Whole sweep, retries included. Default 180 000. */
  budgetMs?: number;
  /** The target's shell, as argv. Default `['sh']`. */
  shell?: string[];
  /**
   * A cancel: the budget left becomes at most this, ms (default 10 s, or the grace and kill-after
   * and 3 s when those are longer).
   */
  signal?: AbortSignal;
  cancelBudgetMs?: number;
  /**
   * The status the exec client of the command this sweep follows exited with before its wrapper
   * announced itself: a first attempt whose client exits the same way (that status, no signal,
   * no header of the program) is not retried — `ClientNotStartedError`, at once.
   */
  clientFailedWith?: number;
  /** Called before each retry with the attempt number (1 = first retry) and why. */
  onRetry?: (attempt: number, reason: string) => void;
}

/**
 * The session's helpers as one sweep takes them, each as its start line gave it (docs/sandbox.md,
 * "The helper's proof"). `members`: found by that identity (pid and start time), with every
 * descendant, whether or not their environ can be read. `proof`: those whose word may end a phase
 * at once (`helper-childless`); each is a member too. An identity that is not a safe integer pid
 * above 1 with a start time above 0 is left out.
 */
export interface SweepHelpers {
  members?: readonly TargetIdentity[];
  proof?: readonly TargetIdentity[];
  /**
   * Helpers whose end line said `childless` (docs/sandbox.md, "A childless end"): members while
   * they run; gone, with nothing else found, they end a phase as `helper-childless`.
   */
  ended?: readonly TargetIdentity[];
  /**
   * The path of the helper pushHelper checked in the target (`helper-<sha256>`): the helper
   * answers the sweep itself, non-dumpable, checked at exec (docs/sandbox.md, "The helper answers
   * the sweep"); where it cannot, the sweep program does, and the answer says which.
   */
  path?: string;
}

/**
 * The program's argv: `SHELL -c PROGRAM tether-sweep [--helper PATH] TAG GRACE KILL INTERVAL
 * [WORD…]`, each WORD a helper of `helpers`: `PID:START` one that proves (and is a member),
 * `member:PID:START` one that is a member only, `ended:PID:START` one whose end line said
 * `childless`. With `helpers.path`, the program is `sweep-helper`: the helper at PATH answers. Its stdin must begin with the nonce line (`NONCE\n`, 32 hex digits): never in
 * argv, which any process of the target can read.
 */
export function sweepArgv(
  tag: SessionTag,
  o: Required<Pick<SandboxSweepOptions, 'graceMs' | 'killAfterMs' | 'intervalMs' | 'shell'>>,
  helpers: SweepHelpers = {},
): string[] {
  const id = (h: TargetIdentity) => `${h.pid}:${h.startTime}`;
  const proof = new Set((helpers.proof ?? []).filter(wellFormed).map(id));
  const members = new Set((helpers.members ?? []).filter(wellFormed).map(id));
  const ended = new Set((helpers.ended ?? []).filter(wellFormed).map(id));
  for (const h of proof) ended.delete(h);
  for (const h of [...proof, ...ended]) members.delete(h);
  return [
    ...o.shell,
    '-c',
    program(helpers.path === undefined ? 'sweep' : 'sweep-helper'),
    'tether-sweep',
    ...(helpers.path === undefined ? [] : ['--helper', helpers.path]),
    tag.name,
    String(Math.round(o.graceMs)),
    String(Math.round(o.killAfterMs)),
    String(Math.round(o.intervalMs)),
    ...[...members].map((h) => `member:${h}`),
    ...[...ended].map((h) => `ended:${h}`),
    ...proof,
  ];
}

// What the program takes as an identity (sweep.sh, `identity`): a pid above 1, a start above 0.
function wellFormed(h: TargetIdentity): boolean {
  return Number.isSafeInteger(h.pid) && h.pid > 1 && Number.isSafeInteger(h.startTime) && h.startTime > 0;
}

/**
 * Sweeps the session `tag` inside the target of `channel` (decisions.md D12): resolves to the same
 * `SweepReport` as a local sweep (`layers: ['env-tag', 'sandbox']`, `environReader`). Throws
 * `SandboxError` `CHANNEL_UNREACHABLE` when no attempt reached the target within the budget
 * (retried, backing off, while the client ran and exited without the program's header), or at
 * once when the client could not be started at all (`cause`: the spawn error, ENOENT…);
 * `SWEEP_CUT` when the program started but its output ended before its `done` line (`report`
 * partial, `unsettled` what it signalled) — also when its `done` line came but the client was
 * killed by a signal or exited ≠ 0 (the answer is then unproven: `stopped` empty, its claims in
 * `unsettled`); `CHANNEL_UNREACHABLE`, not retried, when the program found no nonce on its stdin
 * (a channel without stdin); `INVALID_TAG` / `INVALID_OPTION` on bad input (an unknown key too). The nonce (a fresh
 * one per attempt) goes as the first line of the program's stdin; only a `done` line holding it
 * and counting the lines before it proves the run (docs/sandbox.md#sweep-output).
 */
export function sweep(
  channel: ExecChannel,
  tag: SessionTag | string,
  options: SandboxSweepOptions = {},
): Promise<SweepReport> {
  try {
    checkSandboxKeys(options, SANDBOX_SWEEP_KEYS);
  } catch (error) {
    return Promise.reject(error);
  }
  return sweepUnder(channel, tag, options, {});
}

// `sweep` for a session whose commands ran under helpers that gave their identity (session.ts,
// exec.ts; not exported from the package): `helpers.members` are members by identity, and with
// `helpers.proof` the program may end a phase at once on the kernel's word that those helpers
// have no child left (`helper-childless`, docs/sandbox.md "The helper's proof").
export async function sweepUnder(
  channel: ExecChannel,
  tag: SessionTag | string,
  options: SandboxSweepOptions,
  helpers: SweepHelpers,
): Promise<SweepReport> {
  const t = typeof tag === 'string' ? parseTag(tag) : tag;
  const graceMs = checkMs('graceMs', options.graceMs ?? DEFAULT_GRACE_MS);
  const killAfterMs = checkMs('killAfterMs', options.killAfterMs ?? DEFAULT_KILL_AFTER_MS);
  const argv = sweepArgv(
    t,
    {
      graceMs,
      killAfterMs,
      intervalMs: checkMs('intervalMs', options.intervalMs ?? DEFAULT_SCAN_INTERVAL_MS, 1),
      shell: checkShell(options.shell),
    },
    helpers,
  );
  const start = performance.now();
  let deadline = start + checkMs('budgetMs', options.budgetMs ?? SWEEP_BUDGET_MS);
  // Never shorter than the program's own phases: a grace and kill-after above 10 s cut by the
  // cancel's budget read as a sweep that could not finish (SWEEP_CUT: "may still run") while
  // the program was still ending what it found (found by a new user's trial, `-k 12s`).
  const cancelBudget = checkMs(
    'cancelBudgetMs',
    options.cancelBudgetMs ?? Math.max(CANCEL_BUDGET_MS, graceMs + killAfterMs + CANCEL_SLACK_MS),
  );
  const onAbort = () => {
    deadline = Math.min(deadline, performance.now() + cancelBudget);
  };
  if (options.signal?.aborted) onAbort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    let wait = RETRY_FIRST_MS;
    for (let attempt = 0; ; attempt++) {
      const startedAt = new Date();
      // A fresh nonce per attempt, as the wrapper's (decisions.md D13): the first line of stdin.
      const nonce = createNonce();
      const input = Buffer.from(`${nonce}\n`);
      const run = await runOnce(channel, argv, { input, deadline: () => deadline });
      const parsed = parseSweepOutput(run.stdout.toString('utf8'), t.name, nonce, startedAt);
      const said = describeExit(run.exit, run.stderr);
      if (parsed.finished) {
        if (clientSucceeded(run)) return parsed.report;
        throw unproven(channel, run, parsed, said);
      }
      const final = finalFailure(channel, run, parsed, said);
      if (final) throw final;
      if (attempt === 0 && failedTheSameWay(run, options.clientFailedWith)) {
        throw new ClientNotStartedError(
          `the sweep's client failed as the command's did (${said}), before the sweep program started: not retried`,
          run.exit.status as number,
          { cause: new Error(said) },
        );
      }
      if (deadline - performance.now() <= wait) {
        throw new SandboxError(
          'CHANNEL_UNREACHABLE',
          `the sweep could not reach ${channel.describe} in ${attempt + 1} attempt${attempt ? 's' : ''} over ${Math.round(performance.now() - start)} ms (last: ${said})`,
        );
      }
      options.onRetry?.(attempt + 1, said);
      await pause(wait, options.signal);
      wait = Math.min(wait * 2, RETRY_MAX_MS);
    }
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
  }
}

// The client exited 0 by itself: neither killed (by a signal, by our deadline) nor failed.
function clientSucceeded(run: RunOutcome): boolean {
  return run.exit.status === 0 && run.exit.signal === null && !run.exit.error && !run.timedOut;
}

// A client that exited by itself with the status the command's client failed with, past no
// deadline: with no header (finalFailure's cases are gone), the same failure of the client.
function failedTheSameWay(run: RunOutcome, status: number | undefined): boolean {
  return status !== undefined && !run.timedOut && run.exit.signal === null && run.exit.status === status;
}

// A `done` line that the client's own end contradicts (killed by a signal, a status ≠ 0): what
// came through that client proves nothing, whatever it said (a process of the target can kill
// the program and write into its stdout). Its claims of ends are unsettled, not stopped.
function unproven(channel: ExecChannel, run: RunOutcome, parsed: ParsedSweep, said: string): SandboxError {
  const { report } = parsed;
  const claimed = [...report.stopped, ...parsed.unsettled];
  const cut: SweepReport = {
    ...report,
    complete: false,
    ok: false,
    proof: 'none',
    stopped: [],
    warnings: [
      ...report.warnings,
      {
        code: 'UNSETTLED',
        message: `the exec client did not exit 0 (${said.split(':')[0]}): the sweep's answer is unproven, whatever it said`,
      },
    ],
  };
  return new SandboxError(
    'SWEEP_CUT',
    `the sweep program in ${channel.describe} printed its last line, but ${run.timedOut ? 'its budget ran out' : said}: its answer is unproven${claimed.length ? `; said stopped and not proven gone: ${nameProcesses(claimed)}` : ''}`,
    { report: cut, unsettled: claimed },
  );
}

// An unfinished attempt that no retry may follow, or undefined for one that never reached the
// target (no header) through a client that did start: only that one is tried again.
function finalFailure(
  channel: ExecChannel,
  run: RunOutcome,
  parsed: ParsedSweep,
  said: string,
): SandboxError | undefined {
  if (parsed.noNonce) {
    // Nothing was looked at or signalled, and no retry will attach a stdin.
    return new SandboxError(
      'CHANNEL_UNREACHABLE',
      `the sweep program in ${channel.describe} found no nonce on its stdin (is the channel's stdin attached? docker exec needs -i): nothing was signalled; not retried`,
    );
  }
  if (parsed.reached) {
    // It may have signalled processes no later scan can find again: final (decisions.md D12).
    return new SandboxError(
      'SWEEP_CUT',
      `the sweep program in ${channel.describe} stopped before its last line (${run.timedOut ? 'its budget ran out' : said})${parsed.problems.length ? `; malformed output ${parsed.problems.slice(0, 3).join(', ')}` : ''}: ${parsed.unsettled.length ? `found and not seen gone (signalled or not yet: each record's \`signals\` says): ${nameProcesses(parsed.unsettled)}` : 'what it found is not known'}`,
      { report: parsed.report, unsettled: parsed.unsettled },
    );
  }
  if (run.exit.error) {
    // The client itself could not be started here (ENOENT, EACCES…): nothing left this
    // machine, and no retry will change that — not a channel that may come back.
    return new SandboxError(
      'CHANNEL_UNREACHABLE',
      `the sweep could not reach ${channel.describe}: ${said}; not retried`,
      {
        cause: run.exit.error,
      },
    );
  }
  return undefined;
}

/** Checks a shell argv option: a non-empty array of non-empty strings. Default `['sh']`. */
export function checkShell(shell: string[] | undefined): string[] {
  if (shell === undefined) return ['sh'];
  if (!Array.isArray(shell) || shell.length === 0 || shell.some((s) => typeof s !== 'string' || !s)) {
    throw new SandboxError(
      'INVALID_OPTION',
      `invalid shell ${JSON.stringify(shell)}: expected the target's POSIX shell as argv, such as ["sh"] or ["bash", "--posix"]`,
    );
  }
  return shell;
}

// "exit status 1: <stderr>" for messages.
export function describeExit(
  exit: { status: number | null; signal: string | null; error?: Error },
  stderr: Buffer,
): string {
  const how = exit.error
    ? `the client could not start: ${exit.error.message}`
    : exit.signal
      ? `the client was ended by ${exit.signal}`
      : `the client exited with status ${exit.status}`;
  // Its last 4 KiB only: a collected stderr past the largest string (`encoding: 'buffer'`) would
  // throw here, before an unknown end's sweep.
  const tail = stderr.subarray(Math.max(0, stderr.length - 4096)).toString('utf8');
  const text = tail.trim().split('\n').slice(-2).join(' / ').slice(0, 300);
  return text ? `${how}: ${text}` : how;
}
