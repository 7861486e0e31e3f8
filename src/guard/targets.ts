// The guard's target: the processes it looks at each tick (docs/guard.md, "The target"). A cgroup
// v2 subtree — `--cgroup PATH`, or by default the guard's own cgroup — read from every
// `cgroup.procs` in it and below it; without a usable cgroup v2, every process of the guard's
// PID namespace (the process table of its procfs).
import { statSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import { TetherError } from '../errors.js';
import { cgroupPids, findCgroup2Mount, ownCgroup } from '../proc/cgroup.js';
import type { Snapshot } from '../proc/snapshot.js';

/**
 * Where the target's processes come from: `cgroup` (the directory whose subtree was read) or
 * `pid-namespace` (every process of the guard's PID namespace), with why no cgroup was used.
 */
export type TargetSource = { kind: 'cgroup'; path: string } | { kind: 'pid-namespace'; note: string };

/**
 * The target as one tick saw it. `pids`: the members this namespace can name, each in the tick's
 * snapshot, sorted; `hidden`: how many `cgroup.procs` lines read as 0 (processes of another PID
 * namespace, never signalled); `absent`: listed members gone from the snapshot (exited, or
 * started after the walk: the next tick sees them).
 */
export interface Target {
  source: TargetSource;
  pids: number[];
  hidden: number;
  absent: number;
}

/**
 * Resolves the target cgroup once: `cgroup` (an absolute directory, or a path relative to the v2
 * mount, e.g. `/system.slice/x`), or the guard's own v2 cgroup (`/proc/self/cgroup`'s `0::`
 * line under the mount found in `/proc/self/mountinfo`). Without a v2 mount or an own cgroup, the
 * PID namespace, with the reason as `note`. Throws `TetherError` `INVALID_OPTION` when an explicit `cgroup` is not a
 * cgroup v2 directory (a mistyped path must not widen the target to the whole namespace).
 */
export function resolveTarget(cgroup: string | undefined, procRoot = '/proc'): TargetSource {
  const found = findCgroup2Mount(procRoot);
  if (cgroup !== undefined) {
    const candidates = isAbsolute(cgroup) ? [cgroup] : [];
    if ('mount' in found) candidates.push(join(found.mount, cgroup));
    for (const dir of candidates) if (isCgroupDir(dir)) return { kind: 'cgroup', path: dir };
    throw new TetherError(
      'INVALID_OPTION',
      `invalid cgroup ${JSON.stringify(cgroup)}: not a cgroup v2 directory (no cgroup.procs there${'mount' in found ? ` nor under ${found.mount}` : ''})`,
    );
  }
  if (!('mount' in found)) return { kind: 'pid-namespace', note: found.note };
  const own = ownCgroup(procRoot);
  if (own === undefined) {
    return {
      kind: 'pid-namespace',
      note: `cgroup: ${procRoot}/self/cgroup has no cgroup v2 line (0::): the guard watches its PID namespace`,
    };
  }
  const dir = join(found.mount, own);
  if (!isCgroupDir(dir)) {
    return {
      kind: 'pid-namespace',
      note: `cgroup: the guard's own cgroup ${dir} cannot be read: the guard watches its PID namespace`,
    };
  }
  return { kind: 'cgroup', path: dir };
}

/**
 * The target's members now, on `snapshot` (kernel threads are not in it, so never targets). A
 * cgroup member that reads as pid 0 belongs to another PID namespace: counted in `hidden`,
 * never returned.
 */
export function listTargets(source: TargetSource, snapshot: Snapshot): Target {
  if (source.kind === 'pid-namespace') {
    return { source, pids: sorted(snapshot.processes.keys()), hidden: 0, absent: 0 };
  }
  let hidden = 0;
  let absent = 0;
  const pids = new Set<number>();
  for (const pid of cgroupPids(source.path)) {
    if (!(pid > 0)) hidden += 1;
    else if (!snapshot.processes.has(pid)) absent += 1;
    else pids.add(pid);
  }
  return { source, pids: sorted(pids), hidden, absent };
}

// Pids in ascending order (a typed array's sort is numeric, and faster than a compare callback).
const sorted = (pids: Iterable<number>): number[] => Array.from(Int32Array.from(pids).sort());

function isCgroupDir(dir: string): boolean {
  try {
    return statSync(join(dir, 'cgroup.procs')).isFile();
  } catch {
    return false;
  }
}
