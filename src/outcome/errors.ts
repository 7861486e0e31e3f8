// Errors tether throws. Each carries a stable `code` a caller can switch on.

/**
 * Codes carried by `TetherError.code`:
 * - `INVALID_OPTION`: an option has a value outside what it accepts (the message names both);
 * - `INVALID_TAG`: a session tag is not `TETHER_SESSION_<32 hex digits>`;
 * - `SPAWN_FAILED`: the payload could not be started (ENOENT, EACCES…; `cause` is the errno error);
 * - `SESSION_ENDED`: `spawn` on a session whose `end()` has begun;
 * - `CONTAINMENT_UNAVAILABLE`: a containment layer asked for explicitly cannot be had here (no
 *   helper built, a cgroup v2 not writable, a PID namespace without the privilege; the message
 *   says which and why).
 */
export type TetherErrorCode =
  | 'INVALID_OPTION'
  | 'INVALID_TAG'
  | 'SPAWN_FAILED'
  | 'SESSION_ENDED'
  | 'CONTAINMENT_UNAVAILABLE';

// The one error class of the library; `code` says which failure it is.
export class TetherError extends Error {
  readonly code: TetherErrorCode;
  constructor(code: TetherErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TetherError';
    this.code = code;
  }
}
