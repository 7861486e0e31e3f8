// When `spawn()` ends its session before the command exits: a `timeout`, an aborted signal, a
// buffer past `maxBuffer`. The first reason wins (as execa's `reason ??=`); each stop asks the
// session to end once, and the timer and listeners go when the command's end is known.
import type { EndReason } from './result.js';

/** The stops of one command: what ended it, if tether did, and the stop itself. */
export interface Stops {
  /** The first reason tether ended the command for, if it did. */
  readonly reason: () => EndReason | undefined;
  /** Ends the session for `why`, unless another reason came first (then it ends all the same). */
  stop(why: EndReason): void;
  /** Clears the timer and the abort listeners. */
  clear(): void;
}

/**
 * Arms `timeoutMs` (undefined or 0: no deadline, as execa, Node and timeout(1) read 0) and
 * listens on `signals` (each aborting ends the session as an abort; one already aborted ends it
 * now). `end(why)` runs once per stop. What arming throws (a signal whose `addEventListener`
 * throws) is thrown after the timer and listeners set so far are cleared.
 */
export function armStops(
  timeoutMs: number | undefined,
  signals: readonly (AbortSignal | undefined)[],
  end: (why: EndReason) => void,
): Stops {
  let reason: EndReason | undefined;
  let timer: NodeJS.Timeout | undefined;
  const stop = (why: EndReason) => {
    reason ??= why;
    end(why);
  };
  const onAbort = () => stop('cancel');
  const armed: AbortSignal[] = [];
  const clear = () => {
    clearTimeout(timer);
    for (const s of armed) s.removeEventListener('abort', onAbort);
  };
  try {
    for (const signal of signals) {
      if (signal === undefined) continue;
      if (signal.aborted) onAbort();
      else {
        signal.addEventListener('abort', onAbort, { once: true });
        armed.push(signal);
      }
    }
    if (timeoutMs !== undefined && timeoutMs > 0) timer = setTimeout(() => stop('timeout'), timeoutMs);
  } catch (error) {
    clear();
    throw error;
  }
  return { reason: () => reason, stop, clear };
}
