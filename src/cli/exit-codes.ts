// Exit statuses of the tether CLI besides the payload's own: timeout(1)'s conventions
// (124 timed out, 125 tether itself failed, 126 cannot execute, 127 not found, 128+N signal N),
// and the sandbox's own 120–123 and 141. docs/cli.md#exit-status lists every command's.

/**
 * tether itself failed, so the status is not the payload's: invalid usage (unknown flag, bad
 * duration or signal, missing command, bad tag), an events or report file that cannot be
 * opened, a containment layer that cannot be had, an internal error. 125, as `timeout`, `env`
 * and `nice` use for their own failure.
 */
export const EXIT_TETHER_FAILED = 125;
/** Invalid usage: tether's own failure (125), before anything ran. */
export const EXIT_USAGE = EXIT_TETHER_FAILED;
/**
 * `tether run --timeout`: the timeout fired (its signal reached the payload), as timeout(1)'s
 * 124 — unless `--preserve-status`, or the payload had to be ended by SIGKILL (128 + 9).
 */
export const EXIT_TIMED_OUT = 124;
/** A sweep that could not finish or left a survivor (`tether sweep`). */
export const EXIT_SWEEP_FAILED = 1;
/** The command was found but could not be executed (EACCES…), as in POSIX shells. */
export const EXIT_CANNOT_EXECUTE = 126;
/** The command was not found, as in POSIX shells. */
export const EXIT_NOT_FOUND = 127;
/** Added to a signal number when the payload was killed by a signal. */
export const EXIT_SIGNAL_OFFSET = 128;
/**
 * The payload's exit status is unknown: its helper was killed before it reported the end
 * (report warning `HELPER_LOST`), or, for `tether sandbox exec`, the completion line never
 * arrived and the sweep settled the session (EXEC_STATUS_UNKNOWN). The same 125 as tether's own
 * failure: tether could not learn the status, so it does not pass one off as the payload's
 * (stderr, `--json` and `--events` say which failure it was).
 */
export const EXIT_STATUS_UNKNOWN = EXIT_TETHER_FAILED;
/**
 * `tether run`: its ledger could not be opened or written before the payload (docs/ledger.md):
 * nothing was started. 125, tether's own failure, as `timeout` and `env` use it.
 */
export const EXIT_LEDGER_FAILED = EXIT_TETHER_FAILED;
/** `tether recover`: a session it found is not settled (parked, ambiguous, a refused write). */
export const EXIT_UNSETTLED = 1;
/**
 * `tether show`: no session of the ledger matches the reference, or several do (their tags are
 * listed on stderr). Not 125: tether did not fail, the ledger holds no such session.
 */
export const EXIT_NO_SUCH_SESSION = 1;
/** `tether sandbox exec`: an unknown end the sweep could not settle (AMBIGUOUS_EFFECT). */
export const EXIT_AMBIGUOUS_EFFECT = 121;
/**
 * `tether sandbox exec`: the command proved it exited 0, but the exec client did not exit 0
 * (a status, or a signal). A distinct status, not 1: the command's own `exit 1` is 1.
 */
export const EXIT_CLIENT_FAILED = 120;
/**
 * `tether sandbox exec|sweep`: the exec client given by `--via` could not be started (ENOENT,
 * EACCES…): nothing left this machine, nothing ran, nothing was swept.
 */
export const EXIT_CLIENT_NOT_STARTED = 122;
/** `tether sandbox exec`: a large script arrived cut in the container (INPUT_CUT): nothing ran. */
export const EXIT_INPUT_CUT = 123;
/**
 * `tether sandbox exec`: tether's stdout was closed by its reader (EPIPE, `… | head -1`): the call
 * was stopped and its session swept. 128 + SIGPIPE, what a shell shows for such a writer.
 */
export const EXIT_OUTPUT_CLOSED = 141;
