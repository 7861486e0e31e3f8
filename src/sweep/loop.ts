// The sweep, read like tini's main loop. Each phase — TERM up to the grace, then KILL — repeats
// one round until the session is proved gone or the phase's budget runs out:
//   1. scan:                walk the process table, find the session's members;
//   2. signal what is new:  the phase's signal to each member that has not had it (a childless
//                           carrier may have had it in step 1, as it was held: run.ts earlySignal);
//   3. decide:              proved gone (the kernel's word, or two empty scans)? out of time?
//   4. wait:                the scan interval (50 ms), then the next round.
// The KILL phase runs only when TERM did not end the session, and looks once more before it
// names a survivor. The run's state is src/sweep/run.ts; a round's walk, src/sweep/scan.ts.
import { TetherError } from '../errors.js';
import {
  checkMs,
  DEFAULT_GRACE_MS,
  DEFAULT_KILL_AFTER_MS,
  DEFAULT_SCAN_INTERVAL_MS,
  refuseUnknownKeys,
} from '../options.js';
import { parseTag } from '../proc/tag.js';
import type { PhaseEnd, SweepReport } from './report.js';
import { type Phase, SweepRun } from './run.js';
import { gridDelay } from './shared-walk.js';
import { type PhaseSignal, SWEEP_KEYS, type SweepOptions } from './sweep-options.js';

const PHASES: readonly PhaseSignal[] = ['SIGTERM', 'SIGKILL'];

/** A round whose scan or signals failed (the run has said why: `SCAN_FAILED`, `NO_PROC`). */
const FAILED = -1;

// The algorithm, once: yields each pause (ms), and is given back when it ended, so that the
// async and the sync driver below share it.
function* steps(
  opts: SweepOptions,
  shareSnapshots: boolean,
): Generator<number, SweepReport, number | undefined> {
  const { tag, budgets, intervalMs } = readOptions(opts);
  const run = new SweepRun(tag, opts, shareSnapshots);
  if (!run.begin()) return run.report(); // no process table (or another namespace's): nothing to scan
  for (const signal of PHASES) {
    const phase = run.startPhase(signal, budgets[signal]);
    for (;;) {
      const scan = run.scan(phase); // 1. scan
      const alive = scan ? run.signalNew(scan, signal) : FAILED; // 2. signal what is new
      const verdict = decide(run, phase, alive); // 3. decide
      if (verdict === 'out-of-time') break;
      if (verdict !== 'again') return run.end(phase, verdict);
      run.dueAt = yield intervalMs; // 4. wait
    }
    if (signal === 'SIGKILL') {
      // A process first found in the last round got its KILL a moment ago: look once more
      // before naming anything a survivor — and what that look KILLs is watched die too.
      run.dueAt = yield intervalMs;
      const scan = run.scan(phase);
      const left = scan ? run.signalNew(scan, signal) : FAILED;
      if (left === 0 && run.seen > 0) run.unsettled();
      else if (left === 0) return run.end(phase, 'verified-empty');
      else if (left > 0) run.settleLastLook();
    }
    run.phaseDone(phase, 'budget');
  }
  return run.report();
}

/**
 * Sweeps a session: finds its processes (carriers of the tag, earlier finds by identity, their
 * descendants), sends TERM once to each, rescans every `intervalMs`, then KILL the same way
 * unless the TERM phase ended on two empty scans (decisions.md D2–D7). Never signals pid ≤ 1, the
 * calling process or its ancestors. Resolves to a `SweepReport`; it does not reject for what it
 * could not do (that is in `warnings`, `complete` and `survivors`). Throws `TetherError`
 * `INVALID_OPTION` / `INVALID_TAG` synchronously on bad options.
 */
export function sweep(options: SweepOptions): Promise<SweepReport> {
  const it = steps(options, true);
  const first = it.next(); // validates options and runs the first round now
  return (async () => {
    let s = first;
    while (!s.done) s = it.next(await gridDelay(s.value));
    return s.value;
  })();
}

/**
 * The same sweep, blocking the thread between scans (Atomics.wait). For exit paths where the
 * event loop no longer runs: `process.on('exit')`, after an uncaught exception.
 */
export function sweepSync(options: SweepOptions): SweepReport {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const it = steps(options, false);
  for (let s = it.next(); ; s = it.next()) {
    if (s.done) return s.value;
    Atomics.wait(cell, 0, 0, s.value);
  }
}

/**
 * Step 3: what this round says. A failed round ends the sweep (`scan-failed`); else its progress
 * is handed on, and the phase ends on a proof (the kernel's word after one empty scan, or two
 * empty scans), runs out of time, or goes on (`again`).
 */
function decide(run: SweepRun, phase: Phase, alive: number): PhaseEnd | 'out-of-time' | 'again' {
  if (alive === FAILED && run.retry) {
    // It freed fds (run.ts failRound): the round again — not counted as empty — within the
    // phase's budget.
    run.retry = false;
    return outOfTime(run, phase) ? 'out-of-time' : 'again';
  }
  if (alive === FAILED) return 'scan-failed';
  run.notices.progress({
    signal: phase.signal,
    waiting: alive,
    spawns: run.aliveSpawns(),
    sinceSignalMs: performance.now() - phase.startedAt,
    budgetMs: phase.budgetMs,
  });
  // A scan is empty only if it saw no member at all: one that was there and gone by its
  // signal (a fork-and-exit loop) is evidence the session still runs.
  phase.empty = run.seen === 0 ? phase.empty + 1 : 0;
  // With a helper or a cgroup, one empty scan and the kernel's word suffice: a process
  // mid-exec (no readable environ) is still a descendant of the helper and in the cgroup.
  if (run.seen === 0 && run.kernelProof) return run.kernelProof;
  if (phase.empty >= 2) return 'two-empty-scans';
  if (outOfTime(run, phase)) return 'out-of-time';
  return 'again';
}

// The phase's budget is spent, or (TERM only) the caller hurried the sweep (`SweepOptions.hurry`).
function outOfTime(run: SweepRun, phase: Phase): boolean {
  if (phase.signal === 'SIGTERM' && run.opts.hurry?.aborted) return true;
  return performance.now() - phase.startedAt >= phase.budgetMs;
}

// The options checked, in this order: an unknown key (`INVALID_OPTION`, by name), the tag
// (`INVALID_TAG`), then each duration (`INVALID_OPTION`).
function readOptions(opts: SweepOptions) {
  if (typeof opts !== 'object' || opts === null)
    throw new TetherError('INVALID_OPTION', 'invalid options: expected an object { tag, … } (SweepOptions)');
  refuseUnknownKeys(opts, SWEEP_KEYS);
  const tag = typeof opts.tag === 'string' ? parseTag(opts.tag) : opts.tag;
  const graceMs = checkMs('graceMs', opts.graceMs ?? DEFAULT_GRACE_MS);
  // The part of the grace the caller's own signal already gave (never more than the grace).
  const spentMs =
    opts.graceStartedAt === undefined ? 0 : Math.max(0, performance.now() - opts.graceStartedAt);
  const budgets: Record<PhaseSignal, number> = {
    SIGTERM: Math.max(0, graceMs - spentMs),
    SIGKILL: checkMs('killAfterMs', opts.killAfterMs ?? DEFAULT_KILL_AFTER_MS),
  };
  const intervalMs = checkMs('intervalMs', opts.intervalMs ?? DEFAULT_SCAN_INTERVAL_MS, 1);
  return { tag, budgets, intervalMs };
}
