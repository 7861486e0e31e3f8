// The guard (docs/guard.md): every tick, list the target's processes, spare those the allowlist
// spares (src/guard/allowlist.ts) with their descendants, and stop the rest with the sweep's own
// loop (src/sweep/loop.ts: TERM → grace → KILL, each signal through a pidfd held since the
// process was found, SIGCONT for a stopped one). `createGuard` makes the tick; `startGuard` runs
// it after a startup delay and then every interval, until stopped.

import { registrationsPath } from '../containment/guard-registrations.js';
import { TetherError } from '../errors.js';
import { checkMs } from '../options.js';
import {
  DEFAULT_GUARD_INTERVAL_MS,
  DEFAULT_STARTUP_DELAY_MS,
  type GuardOptions,
  guardSettings,
} from './options.js';
import type { TargetSource } from './targets.js';
import { createTick } from './tick.js';
import { type GuardCounters, type TickResult, zeroCounters } from './tick-result.js';

// The guard's options and its tick's result have homes of their own; the package's entry point
// and the CLI take them from here.
export {
  checkGuard,
  DEFAULT_GUARD_INTERVAL_MS,
  DEFAULT_MIN_AGE_MS,
  DEFAULT_STARTUP_DELAY_MS,
  type GuardOptions,
} from './options.js';
export type { GuardCounters, GuardProcess, GuardWarning, TickResult } from './tick-result.js';

/** A guard: its tick, its counters, and `stop()` (no tick starts after it). */
export interface Guard {
  /** The registrations file this guard reads (`tether guard allow` writes the same one). */
  readonly registrations: string;
  /** Runs one tick now (after any tick under way). Rejects `TetherError` `GUARD_STOPPED` once stopped. */
  tick(): Promise<TickResult>;
  readonly counters: GuardCounters;
  /** The target, resolved when the guard was made. */
  readonly target: TargetSource;
  /** Stops the guard: resolves when the tick under way, if any, has ended. */
  stop(): Promise<void>;
}

/**
 * Makes a guard. Checks the options at once: throws `TetherError` `INVALID_OPTION` for a bad
 * duration, a `cgroup` that is not a cgroup v2 directory, a target that is this whole machine
 * without `host`, or an input file that is not a regular file of at most 1 MiB (`checkGuard`).
 * A bad `allowPatterns` entry is not thrown: it is a problem in every tick's result.
 */
export function createGuard(options: GuardOptions = {}): Guard {
  const settings = guardSettings(options);
  const counters = zeroCounters();
  const runTick = createTick(settings, counters);
  let stopped = false;
  let last: Promise<unknown> = Promise.resolve();
  return {
    counters,
    target: settings.target,
    registrations: registrationsPath(settings.stateDir),
    tick() {
      if (stopped) return Promise.reject(new TetherError('GUARD_STOPPED', 'the guard was stopped'));
      const next = last.then(runTick, runTick);
      last = next.catch(() => undefined);
      return next;
    },
    async stop() {
      stopped = true;
      await last;
    },
  };
}

/** A running guard (`startGuard`): its counters and target; `stop()` and `await using` end the loop. */
export interface RunningGuard extends AsyncDisposable {
  readonly counters: GuardCounters;
  readonly target: TargetSource;
  /** The registrations file the guard reads. */
  readonly registrations: string;
  /** Resolves when the loop has ended (stopped, or its signal aborted), after its last tick. */
  readonly done: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts a guard: its first tick after `startupDelayMs` (default 90000), then one every
 * `intervalMs` (default 30000) counted from each tick's start (a tick longer than the interval
 * is followed at once by the next). Stops on `stop()`, on `signal`, or at the end of an
 * `await using` block; a tick under way finishes first (its stops are not cut short). Throws as
 * `createGuard` does.
 */
export function startGuard(options: GuardOptions = {}): RunningGuard {
  const intervalMs = checkMs('intervalMs', options.intervalMs ?? DEFAULT_GUARD_INTERVAL_MS, 1);
  const startupDelayMs = checkMs('startupDelayMs', options.startupDelayMs ?? DEFAULT_STARTUP_DELAY_MS);
  const guard = createGuard(options);
  const ended = new AbortController();
  const onAbort = () => ended.abort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  if (options.signal?.aborted) ended.abort();
  const done = (async () => {
    let due = performance.now() + startupDelayMs;
    while (!ended.signal.aborted) {
      await pause(due - performance.now(), ended.signal);
      if (ended.signal.aborted) break;
      due = performance.now() + intervalMs;
      await guard.tick().catch(() => undefined);
    }
    options.signal?.removeEventListener('abort', onAbort);
    await guard.stop();
  })();
  const stop = async () => {
    ended.abort();
    await done;
  };
  return {
    counters: guard.counters,
    target: guard.target,
    registrations: guard.registrations,
    done,
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

// Waits `ms` (at least 0) or until `signal` aborts, whichever comes first.
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, Math.max(0, ms));
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
