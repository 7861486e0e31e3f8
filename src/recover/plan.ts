// How one orphaned session is reached: locally (its tag, its leftover cgroup, its unexpired
// kept processes spared), through its recorded exec channel, or not at all from here (parked).
import { existsSync } from 'node:fs';
import { findSessionCgroup } from '../containment/cgroup.js';
import { machineId } from '../ledger/supervisor.js';
import type { SessionRecord } from '../ledger/types.js';
import type { SessionCgroup } from '../proc/cgroup.js';
import { pathExists } from '../proc/cgroup.js';

/** One session's way in. */
export type Plan =
  | { kind: 'local'; record: SessionRecord; where: string; cgroup?: SessionCgroup; dryRun: string }
  | { kind: 'sandbox'; record: SessionRecord; where: string; channel: string[]; dryRun: string }
  | { kind: 'unreachable'; record: SessionRecord; where: string; reason: string; dryRun: string };

/**
 * The plan for `record`. A local session of another machine or boot cannot be swept from here:
 * another machine's processes are not in this /proc (unreachable: parked, named); after a
 * reboot of this one, nothing it started can still run, and a sweep by tag proves it.
 */
export function planOf(record: SessionRecord, procRoot = '/proc'): Plan {
  const { location } = record;
  if (location.kind === 'sandbox') {
    const where = location.channel.join(' ');
    if (location.channel.length === 0)
      return {
        kind: 'unreachable',
        record,
        where: '(no channel recorded)',
        reason: 'its exec channel was not recorded as argv: recover cannot rebuild it',
        dryRun: 'would park it: no channel recorded',
      };
    return {
      kind: 'sandbox',
      record,
      where,
      channel: location.channel,
      dryRun: `would sweep through ${where}`,
    };
  }
  const machine = machineId();
  const { supervisor } = record;
  if (supervisor.machineId !== '' && machine !== '' && supervisor.machineId !== machine)
    return {
      kind: 'unreachable',
      record,
      where: `local to machine ${supervisor.machineId}`,
      reason: `it ran on machine ${supervisor.machineId}, not this one (${machine}): run tether recover there`,
      dryRun: `would park it: it ran on machine ${supervisor.machineId}`,
    };
  const cgroup = leftoverCgroup(record, procRoot);
  return {
    kind: 'local',
    record,
    where: 'local',
    ...(cgroup ? { cgroup } : {}),
    dryRun: `would sweep ${record.tag} here${cgroup ? ` and its cgroup ${cgroup.path}` : ''}`,
  };
}

// The session's cgroup if one is left: the path its reports recorded, else one found by name.
function leftoverCgroup(record: SessionRecord, procRoot: string): SessionCgroup | undefined {
  for (const report of record.reports) {
    const path = report.cgroup;
    if (path && existsSync(path)) return { path, canKill: pathExists(`${path}/cgroup.kill`) };
  }
  return findSessionCgroup(record.tag, procRoot);
}
