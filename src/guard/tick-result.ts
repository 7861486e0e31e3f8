// What a guard's tick reports (one JSON document of `tether guard --json`) and what a guard
// counts over its ticks.
import type { RemovedCgroup } from '../containment/stale-cgroups.js';
import type { ProcessRecord, SweepWarning } from '../sweep/report.js';
import { RULES, type RuleName } from './allowlist.js';
import type { InitService } from './init-service.js';
import type { Problem } from './patterns.js';
import type { TargetSource } from './targets.js';

/**
 * A warning of a tick: the sweep's (NO_PIDFD, SCAN_FAILED…: docs/report.md), `INPUT_REFUSED`
 * (the allow file or the registrations file could not be read this tick: a FIFO, a device, over
 * 1 MiB, late; the message says what applied instead), or `INIT_SERVICE_AMBIGUOUS` (PID 1 is an
 * init whose service its argv cannot tell: every child of PID 1 is spared; the message names
 * why and their pids, as `init.ambiguity` does), or `LIVE_SESSION_WEAK_BOUND` (a live session
 * was judged on its oldest member's start alone: its tag carries no begin, an older tether drew
 * it; docs/containment.md, "Live sessions"). The last two are logged when their message changes,
 * and are in every tick's result while they hold.
 */
export interface GuardWarning {
  code: SweepWarning['code'] | 'INPUT_REFUSED' | 'INIT_SERVICE_AMBIGUOUS' | 'LIVE_SESSION_WEAK_BOUND';
  message: string;
}

/** A process the guard stopped, would stop, or could not stop. `startTime` in clock ticks since boot. */
export interface GuardProcess {
  pid: number;
  startTime: number;
  ppid: number;
  comm: string;
  /** At most 200 bytes of the cmdline, URL credentials (`scheme://user:pass@`) redacted. */
  cmdline: string;
  /** Why it was not allowed. */
  reason: string;
  /** Signals sent, in order. */
  signals: string[];
  /** The signal that ended it (`exited`: gone before any signal); null while alive. */
  endedBy: ProcessRecord['endedBy'];
}

/** One tick's result (one JSON document of `tether guard --json`). */
export interface TickResult {
  /** 1 for the first tick. */
  tick: number;
  /** ISO-8601 wall-clock time the tick began. */
  startedAt: string;
  durationMs: number;
  dryRun: boolean;
  target: {
    kind: TargetSource['kind'];
    /** The cgroup directory, for a cgroup target. */
    cgroup?: string;
    /** Why the PID namespace was watched instead of a cgroup. */
    note?: string;
    /** Members seen in the walk. */
    processes: number;
    /** `cgroup.procs` lines that read 0 (another PID namespace's): never signalled. */
    hidden: number;
  };
  /** Target processes spared, by the rule that spared them (or their ancestor). */
  spared: Record<RuleName, number>;
  /**
   * PID 1 when it is an init that runs a service (tini, dumb-init…: rule `init-service`), with
   * the evidence and the services spared; null when it is none the rule knows.
   */
  init: InitService | null;
  /** Stopped: gone by the end of the tick (`endedBy` says by which signal). */
  stopped: GuardProcess[];
  /** Still alive after the KILL phase (`denied`, or in uninterruptible sleep), as in a sweep's report. */
  survivors: GuardProcess[];
  /**
   * The same array as `survivors`.
   * @deprecated Read `survivors`, as a sweep's report says it; still set, and written in JSON,
   * until the next minor release.
   */
  survived: GuardProcess[];
  /** With `dryRun`: what would have been stopped. */
  wouldStop: GuardProcess[];
  /**
   * Empty session cgroups (`tether-<hex>`) under a cgroup target that no session claims, older
   * than `cgroupMinAgeMs`: removed (`would-remove` in a dry run). Empty for a PID-namespace target.
   */
  cgroups: RemovedCgroup[];
  /** Allow-file lines, allow patterns and registration lines that could not be used. */
  problems: Problem[];
  /** The sweep's warnings (NO_PIDFD, SCAN_FAILED…: docs/report.md) and INPUT_REFUSED. */
  warnings: GuardWarning[];
  /** False when the tick could not finish (the sweep's `complete`, or no process table). */
  complete: boolean;
}

/** What a guard has done since it was made. */
export interface GuardCounters {
  ticks: number;
  stopped: number;
  wouldStop: number;
  /** Processes still alive after the KILL phase, summed over the ticks. */
  survivors: number;
  /**
   * The same count as `survivors`.
   * @deprecated Read `survivors`, as a sweep's report says it; still counted, and written in
   * JSON, until the next minor release.
   */
  survived: number;
  /** Empty session cgroups removed (or, in a dry run, that would be), summed over the ticks. */
  cgroups: number;
  /** Target processes spared, by rule, summed over the ticks. */
  spared: Record<RuleName, number>;
  /** Duration of the last tick and of every tick together, ms. */
  lastTickMs: number;
  totalTickMs: number;
  /** Problems reported, summed over the ticks. */
  problems: number;
}

// No process spared yet, by rule.
export const zeroSpared = (): Record<RuleName, number> =>
  Object.fromEntries(RULES.map((r) => [r, 0])) as Record<RuleName, number>;

/** A tick's result before it runs: tick number `tick`, nothing spared or stopped, `problems` first. */
export function emptyTickResult(
  tick: number,
  dryRun: boolean,
  target: TargetSource,
  problems: readonly Problem[],
): TickResult {
  // One array under both names: what the tick adds to `survivors` is in `survived` too.
  const survivors: GuardProcess[] = [];
  return {
    tick,
    startedAt: new Date().toISOString(),
    durationMs: 0,
    dryRun,
    target: {
      kind: target.kind,
      ...(target.kind === 'cgroup' ? { cgroup: target.path } : { note: target.note }),
      processes: 0,
      hidden: 0,
    },
    spared: zeroSpared(),
    init: null,
    stopped: [],
    survivors,
    survived: survivors,
    wouldStop: [],
    cgroups: [],
    problems: [...problems],
    warnings: [],
    complete: true,
  };
}

/** Counters of a guard that has run no tick. */
export function zeroCounters(): GuardCounters {
  return {
    ticks: 0,
    stopped: 0,
    wouldStop: 0,
    survivors: 0,
    survived: 0,
    cgroups: 0,
    spared: zeroSpared(),
    lastTickMs: 0,
    totalTickMs: 0,
    problems: 0,
  };
}

/** Adds the tick `result` to `counters`. */
export function countTick(counters: GuardCounters, result: TickResult): void {
  counters.ticks += 1;
  counters.stopped += result.stopped.length;
  counters.wouldStop += result.wouldStop.length;
  counters.survivors += result.survivors.length;
  counters.survived = counters.survivors;
  counters.cgroups += result.cgroups.length;
  counters.problems += result.problems.length;
  for (const r of RULES) counters.spared[r] += result.spared[r];
  counters.lastTickMs = result.durationMs;
  counters.totalTickMs += result.durationMs;
}
