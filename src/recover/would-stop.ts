// What a dry run says it would stop in a local session (`tether recover --dry-run`): the
// processes the sweep's first round would find, from one walk of the process table — the tag's carriers and their
// descendants, the leftover cgroup's processes — less the kept processes whose TTL has not
// passed and what they started. Nothing is signalled. A later round may find more (a fork made
// meanwhile, a carrier mid-exec): this is what is there now.
import { cgroupPids } from '../proc/cgroup.js';
import { readCmdline } from '../proc/details.js';
import { readEnviron } from '../proc/environ.js';
import { takeSnapshot } from '../proc/snapshot.js';
import { keptAt } from '../sweep/keep.js';
import { keptSubtrees } from './kept.js';
import type { Plan } from './plan.js';

/** A process a dry run would stop: its identity (start time in clock ticks since boot), command, why. */
export interface WouldStop {
  pid: number;
  startTime: number;
  cmdline: string;
  /** `carrier` (its environ holds the tag), `descendant` (of a carrier), `cgroup` (in the session's). */
  why: 'carrier' | 'descendant' | 'cgroup';
}

/**
 * The processes a sweep of the local `plan` would stop now, at `now` (ms since the epoch, for
 * the kept entries' TTLs). Never the caller, its ancestors, or a pid ≤ 1. Throws `NoProcError`
 * without a readable /proc (as the sweep itself would fail).
 */
export function wouldStop(
  plan: Extract<Plan, { kind: 'local' }>,
  now: number,
  procRoot = '/proc',
): WouldStop[] {
  const tag = plan.record.tag;
  const snapshot = takeSnapshot(procRoot);
  const kept = keptSubtrees(keptAt(plan.record.kept, now), procRoot, snapshot);
  const spare = new Set(kept);
  // The caller and its ancestors: a recover run inside the session is not its leftover.
  for (let pid = process.pid; pid > 1 && !spare.has(pid); pid = snapshot.processes.get(pid)?.ppid ?? 0)
    spare.add(pid);
  const found = new Map<number, WouldStop['why']>();
  const take = (pid: number, why: WouldStop['why']) => {
    if (pid > 1 && !spare.has(pid) && !found.has(pid) && snapshot.processes.has(pid)) found.set(pid, why);
  };
  // Carriers from the same walk: the exact entry `TAG=1` in an environ (src/proc/environ.ts).
  const entry = `${tag}=1`;
  const carriers = [...snapshot.processes.values()]
    .filter((stat) => {
      const r = readEnviron(procRoot, stat.pid, stat.state === 'Z');
      return r.kind === 'ok' && r.entries.includes(entry);
    })
    .map((stat) => stat.pid);
  for (const pid of carriers) take(pid, 'carrier');
  const queue = [...carriers];
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift())
    for (const child of snapshot.children.get(pid) ?? []) {
      if (spare.has(child)) continue; // a kept process's subtree stays
      take(child, 'descendant');
      queue.push(child);
    }
  // As the sweep: with a kept process left to run, the cgroup's processes are not taken whole.
  if (plan.cgroup && kept.length === 0) for (const pid of cgroupPids(plan.cgroup.path)) take(pid, 'cgroup');
  return [...found].map(([pid, why]) => ({
    pid,
    startTime: snapshot.processes.get(pid)?.startTime ?? 0,
    cmdline: readCmdline(procRoot, pid) ?? '',
    why,
  }));
}
