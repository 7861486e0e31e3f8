// The descriptors a session's end needs, taken before its first command runs and given back
// just before the sweep: a command that fills this process's fd table (or a caller that holds
// many) cannot leave the end without the fds its scan and holds need (docs/report.md,
// "Descriptors").
import { closeSync, openSync } from 'node:fs';
import { errnoHint } from './start.js';

/**
 * Descriptors set aside for the end's sweep: the /proc listing and one stat read at a time (2),
 * and a pidfd per member held — this many members are held by pidfd; more fall back to the
 * start-time re-check (`NO_PIDFD`).
 */
export const END_RESERVE_FDS = 16;

/** Descriptors held for the end: opened on /dev/null, closed by `release`. */
export class FdReserve {
  private fds: number[] = [];

  /** How many are held now. */
  get held(): number {
    return this.fds.length;
  }

  /**
   * Opens `count` fds (read-only on /dev/null), all or none: on a failure the ones opened are
   * closed and the error (EMFILE, ENFILE…: an Error with `code`) is thrown.
   */
  take(count = END_RESERVE_FDS): void {
    const taken: number[] = [];
    try {
      for (let i = 0; i < count; i++) taken.push(openSync('/dev/null', 'r'));
    } catch (error) {
      for (const fd of taken) closeSync(fd);
      throw error;
    }
    this.fds.push(...taken);
  }

  /**
   * The end's reserve, taken once, at the first spawn: undefined when held (or taken now), else
   * the error that refuses the command (EMFILE…, its message saying what the fds are for).
   */
  takeForEnd(): Error | undefined {
    if (this.held > 0) return undefined;
    try {
      this.take(END_RESERVE_FDS);
      return undefined;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? 'unknown';
      return Object.assign(
        new Error(
          `${code}${errnoHint(code)}: the ${END_RESERVE_FDS} file descriptors the session's end needs to sweep what it starts cannot be set aside, so nothing was started (raise the limit: ulimit -n)`,
        ),
        { code },
      );
    }
  }

  /** Closes every fd held (idempotent): the end's sweep may use them. */
  release(): void {
    for (const fd of this.fds.splice(0)) {
      try {
        closeSync(fd);
      } catch {
        // EBADF: closed elsewhere; nothing is held either way
      }
    }
  }
}
