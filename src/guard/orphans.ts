// The init's own tick: stops the orphans reparented to it once they are older than the minimum
// age, and everything they started, with the sweep's TERM → grace → KILL (pidfd holds, SIGCONT
// for a stopped process). The main command is never one: it is the init's child, but the one it
// spawned, so it and its descendants — reached by parent from the command, never from an orphan —
// are out of reach. A plain replacement for the guard's full tick (allowlist, patterns) where
// that one is not used (docs/guard-init.md, "Orphans").
import {
  CLOCK_TICKS_PER_SECOND,
  type Identity,
  identityKey,
  isAliveStat,
  ticksNow,
} from '../proc/identity.js';
import { takeSnapshot } from '../proc/snapshot.js';
import { createTag } from '../proc/tag.js';
import { sweep } from '../sweep/loop.js';
import type { SweepReport } from '../sweep/report.js';
import type { Member } from '../sweep/scan.js';

/** What a tick of the init is told: the init itself, and the main command while it runs. */
export interface InitTickContext {
  /** The init (this process). */
  init: Identity;
  /** The main command: spared with its descendants. Undefined once it has exited. */
  main: Identity | undefined;
}

/** Options of `stopOrphans`. Durations in milliseconds. */
export interface StopOrphansOptions {
  /** An orphan younger than this is left for a later tick (with everything it started). */
  minAgeMs: number;
  /** TERM phase budget (the sweep's `graceMs`). */
  graceMs?: number;
  /** KILL phase budget (the sweep's `killAfterMs`). */
  killAfterMs?: number;
  /** Pause between the sweep's scans. Default 50. */
  intervalMs?: number;
  procRoot?: string;
}

/**
 * One tick's result: `spared` (orphans younger than the minimum age, left running) and the
 * sweep's report of the rest (`report.stopped`, `report.survivors`), or null when no orphan
 * was old enough (nothing was swept).
 */
export interface OrphansTick {
  spared: Identity[];
  report: SweepReport | null;
}

/**
 * Stops the init's orphans older than `minAgeMs`: each child of this process that is not
 * `ctx.main`, alive (not a zombie) and started at least `minAgeMs` ago is swept with its
 * descendants. Never signals the init, its ancestors, pid ≤ 1, the main command or anything
 * below it. Throws `NoProcError` (code `NO_PROC`) when `/proc` cannot be read.
 */
export async function stopOrphans(ctx: InitTickContext, opts: StopOrphansOptions): Promise<OrphansTick> {
  const procRoot = opts.procRoot ?? '/proc';
  const snapshot = takeSnapshot(procRoot);
  const now = ticksNow(procRoot);
  const minAgeTicks = (opts.minAgeMs / 1000) * CLOCK_TICKS_PER_SECOND;
  const spared: Identity[] = [];
  const known = new Map<string, Member>();
  for (const pid of snapshot.children.get(ctx.init.pid) ?? []) {
    const stat = snapshot.processes.get(pid);
    // The main command's pid cannot name another process while it runs: it is our unreaped child.
    if (stat === undefined || pid <= 1 || pid === ctx.main?.pid || !isAliveStat(procRoot, stat)) continue;
    const identity = { pid, startTime: stat.startTime };
    if (now - stat.startTime < minAgeTicks) {
      spared.push(identity);
      continue;
    }
    // Found through the init (`via`): when the sweep holds it, it re-checks that its parent is
    // still the init, so a pid reused since this walk is never taken for the orphan.
    known.set(identityKey(identity), { identity, stat, foundBy: 'subreaper', via: ctx.init.pid });
  }
  if (known.size === 0) return { spared, report: null };
  const report = await sweep({
    // A fresh tag nobody carries: the orphans come in as earlier finds, their descendants by parent.
    tag: createTag(),
    known,
    notBefore: now,
    procRoot,
    graceMs: opts.graceMs,
    killAfterMs: opts.killAfterMs,
    intervalMs: opts.intervalMs,
    layers: ['subreaper'],
  });
  return { spared, report };
}
