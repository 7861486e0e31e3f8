// Errors tether throws. Each carries a stable `code` a caller can switch on, and the brand
// `Symbol.for('tether.code')` so that the code survives a wrapper, another realm or a copy.

/**
 * Codes carried by `TetherError.code`:
 * - `INVALID_OPTION`: an option has a value outside what it accepts (the message names both);
 * - `INVALID_TAG`: a session tag is not `TETHER_SESSION_<32 hex digits>`;
 * - `SPAWN_FAILED`: the payload could not be started (ENOENT, EACCES…; `cause` is the errno error);
 * - `SESSION_ENDED`: `spawn` on a session whose `end()` has begun;
 * - `CONTAINMENT_UNAVAILABLE`: a containment layer asked for explicitly cannot be had here (no
 *   helper built, a cgroup v2 not writable, a PID namespace without the privilege; the message
 *   says which and why);
 * - `EXEC_STATUS_UNKNOWN`: a sandbox command's completion line never arrived; its session was
 *   swept in the container (`ExecStatusUnknownError.report`) — decisions.md D13;
 * - `AMBIGUOUS_EFFECT`: an unknown end the sweep could not settle: the command may still run
 *   (never retry it) — decisions.md D15;
 * - `CHANNEL_UNREACHABLE`: an exec channel never reached its target, retried until its budget ran out;
 * - `SWEEP_CUT`: the sandbox sweep program started but its output ended before its `done` line;
 * - `INPUT_CUT`: a script or file arrived in the container smaller than sent: nothing ran or landed;
 * - `WRITE_REFUSED`: `sandbox.writeFile` did not put the file in place (a directory, chmod, rename);
 * - `GUARD_STOPPED`: `tick()` on a guard whose `stop()` was called (docs/guard.md);
 * - `CANCELLED`: the caller aborted (an AbortSignal, `stop()`, a signal to the CLI) and the end was proven;
 * - `TIMED_OUT`: a deadline (`timeout`, `timeoutMs`) fired and the end was proven;
 * - `COMMAND_FAILED`: the command exited non-zero or was killed by a signal (`exitCode`, `signal`);
 * - `MAX_BUFFER`: a buffered stdout/stderr passed `maxBuffer` bytes (the command was ended);
 * - `SURVIVORS`: a sweep ended with processes still alive (`report.survivors`);
 * - `SWEEP_INCOMPLETE`: a sweep could not run or finish (`report.complete` false);
 * - `BRANCH_UNDECIDED`: a fan-out branch was still pending when its cancel grace ended;
 * - `LEDGER_CORRUPT`: the ledger's file or schema is not one tether wrote (never reset);
 * - `LEDGER_LOCKED`: another writer held the ledger past its busy timeout;
 * - `LEDGER_UNAVAILABLE`: the ledger cannot be opened or written (read-only, full, unreachable).
 */
export type TetherErrorCode =
  | 'INVALID_OPTION'
  | 'INVALID_TAG'
  | 'SPAWN_FAILED'
  | 'SESSION_ENDED'
  | 'CONTAINMENT_UNAVAILABLE'
  | 'EXEC_STATUS_UNKNOWN'
  | 'AMBIGUOUS_EFFECT'
  | 'CHANNEL_UNREACHABLE'
  | 'SWEEP_CUT'
  | 'INPUT_CUT'
  | 'WRITE_REFUSED'
  | 'GUARD_STOPPED'
  | 'CANCELLED'
  | 'TIMED_OUT'
  | 'COMMAND_FAILED'
  | 'MAX_BUFFER'
  | 'SURVIVORS'
  | 'SWEEP_INCOMPLETE'
  | 'BRANCH_UNDECIDED'
  | 'LEDGER_CORRUPT'
  | 'LEDGER_LOCKED'
  | 'LEDGER_UNAVAILABLE';

/** Every code, in the order above (for parsers of persisted records and for tests). */
export const TETHER_ERROR_CODES: readonly TetherErrorCode[] = [
  'INVALID_OPTION',
  'INVALID_TAG',
  'SPAWN_FAILED',
  'SESSION_ENDED',
  'CONTAINMENT_UNAVAILABLE',
  'EXEC_STATUS_UNKNOWN',
  'AMBIGUOUS_EFFECT',
  'CHANNEL_UNREACHABLE',
  'SWEEP_CUT',
  'INPUT_CUT',
  'WRITE_REFUSED',
  'GUARD_STOPPED',
  'CANCELLED',
  'TIMED_OUT',
  'COMMAND_FAILED',
  'MAX_BUFFER',
  'SURVIVORS',
  'SWEEP_INCOMPLETE',
  'BRANCH_UNDECIDED',
  'LEDGER_CORRUPT',
  'LEDGER_LOCKED',
  'LEDGER_UNAVAILABLE',
];

/**
 * The brand every TetherError carries under `Symbol.for('tether.code')` (a registered symbol:
 * the same in every realm): its code, readable on an error whose class or `cause` was lost.
 */
export const TETHER_CODE: unique symbol = Symbol.for('tether.code') as never;

/** The flat fields a TetherError may carry besides `code`, `message` and `cause`. */
export interface TetherErrorFields {
  cause?: unknown;
  /** The session tag (`TETHER_SESSION_<hex>`) the failure belongs to. */
  tag?: string;
  // `report?: SweepReport`, the session's sweep report when one ran, is added to this interface
  // and to TetherError by src/sweep/report.ts (a layer above this file, which cannot name it).
  /** The command's exit code, when it exited. */
  exitCode?: number | null;
  /** The signal that ended the command (`'SIGTERM'`…), when one did. */
  signal?: string | null;
}

// The one error class of the library; `code` says which failure it is.
export class TetherError extends Error {
  readonly code: TetherErrorCode;
  readonly tag?: string;
  readonly exitCode?: number | null;
  readonly signal?: string | null;
  declare readonly [TETHER_CODE]: TetherErrorCode;
  constructor(code: TetherErrorCode, message: string, options: TetherErrorFields = {}) {
    super(message, 'cause' in options ? { cause: options.cause } : undefined);
    // The code in the stack's first line, as Node writes its own (`TypeError [ERR_X]: …`): a
    // structured clone (a worker's `postMessage`) keeps an error's `message`, `stack` and
    // `cause` and drops every other field, brand included. V8 formats the stack on first read.
    this.name = `${new.target.name || 'TetherError'} [${code}]`;
    void this.stack;
    this.name = 'TetherError';
    this.code = code;
    Object.defineProperty(this, TETHER_CODE, { value: code, enumerable: false });
    if (options.tag !== undefined) this.tag = options.tag;
    const { report } = options as { report?: unknown };
    if (report !== undefined) (this as { report?: unknown }).report = report;
    if (options.exitCode !== undefined) this.exitCode = options.exitCode;
    if (options.signal !== undefined) this.signal = options.signal;
  }
}
