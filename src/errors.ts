// Errors tether throws. Each carries a stable `code` a caller can switch on.

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
 * - `GUARD_STOPPED`: `tick()` on a guard whose `stop()` was called (docs/guard.md).
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
  | 'GUARD_STOPPED';

// The one error class of the library; `code` says which failure it is.
export class TetherError extends Error {
  readonly code: TetherErrorCode;
  constructor(code: TetherErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TetherError';
    this.code = code;
  }
}
