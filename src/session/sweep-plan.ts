// What a session's end sweep is given, read off the session's parts: its tag and options, the
// commands it holds (holds.ts), the layers its starts gave it (start.ts), and its notes and
// warnings; and what the end releases after it (end.ts).
import { DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS } from '../options.js';
import { type Identity, ticksNow } from '../proc/identity.js';
import type { SessionTag } from '../proc/tag.js';
import { privilegedBlindSpots } from '../sweep/privilege.js';
import type { SweepWarning } from '../sweep/report.js';
import type { SweepOptions } from '../sweep/sweep-options.js';
import type { EndState } from './end.js';
import type { SpawnHolds } from './holds.js';
import type { SessionOptions } from './options.js';
import type { Starter } from './start.js';

/**
 * What a caller tells the session's end (`SweepOptions`): when its own stop signal went out, and
 * a signal that, aborted, spends the rest of the grace (a second Ctrl-C).
 */
export type EndOptions = Pick<SweepOptions, 'graceStartedAt' | 'hurry'>;

/** The parts of a session its end reads. */
export interface SessionParts {
  readonly tag: SessionTag;
  readonly options: Readonly<SessionOptions>;
  /** Clock ticks since boot when the session began (`sessionStartTicks`). */
  readonly startTicks: number;
  readonly holds: SpawnHolds;
  readonly starter: Starter;
  readonly notes: string[];
  readonly warnings: SweepWarning[];
}

/**
 * Clock ticks since boot now, less one: a process started in this very tick is not missed; 0
 * without a /proc (the sweep will say so).
 */
export function sessionStartTicks(procRoot = '/proc'): number {
  try {
    return ticksNow(procRoot) - 1;
  } catch {
    return 0;
  }
}

/** The session's end sweep: everything its commands started, by every layer it has. */
export function sweepOptionsOf(p: SessionParts): SweepOptions {
  const procRoot = p.options.procRoot ?? '/proc';
  return {
    tag: p.tag,
    procRoot: p.options.procRoot,
    graceMs: p.options.graceMs,
    killAfterMs: p.options.killAfterMs,
    notBefore: p.startTicks,
    known: p.holds.known,
    spawns: p.holds.spawned,
    layers: [...p.starter.layers],
    notes: p.notes,
    // Its commands start with this process's credentials: privileged when it is.
    blindSpots: p.holds.spawned.length > 0 ? privilegedBlindSpots(procRoot) : [],
    warnings: p.warnings,
    roots: p.starter.helpers.roots,
    cgroup: p.starter.layers.has('cgroup') ? p.starter.cgroup : undefined,
    // This process made the cgroup and never joined it: cgroup.kill cannot reach it.
    outsideCgroup: true,
    kernelProof: !p.starter.direct,
    helpersChildless: (kept: readonly Identity[]) => p.starter.helpers.ask(kept),
    keep: p.options.keep,
    onEvent: p.options.onEvent,
    onProgress: p.options.onProgress,
    collectPorts: p.options.collectPorts,
  };
}

/** What the end releases, or hands over when the sweep could not run (src/session/end.ts). */
export function endStateOf(p: SessionParts): EndState {
  return {
    helpers: p.starter.helpers,
    cgroup: p.starter.cgroup,
    spawnHolds: p.holds.holds,
    known: p.holds.known,
    graceMs: p.options.graceMs ?? DEFAULT_GRACE_MS,
    killAfterMs: p.options.killAfterMs ?? DEFAULT_KILL_AFTER_MS,
  };
}
