// Live processes carrying any tether tag, for `tether ps` (one walk, every environ read, bounded).
import { readDetails } from './details.js';
import { readEnviron } from './environ.js';
import { takeSnapshot } from './snapshot.js';

/** A live process and the tether tags in its environ. `startTime` in clock ticks since boot. */
export interface TaggedProcess {
  pid: number;
  ppid: number;
  startTime: number;
  uid: number | null;
  comm: string;
  cmdline: string;
  tags: string[];
}

/** Every live process whose environ holds a `TETHER_SESSION_<hex>=1` record. Throws `NoProcError`. */
export function listTaggedProcesses(procRoot = '/proc'): TaggedProcess[] {
  const found: TaggedProcess[] = [];
  for (const stat of takeSnapshot(procRoot).processes.values()) {
    if (stat.pid === process.pid) continue;
    const r = readEnviron(procRoot, stat.pid, stat.state === 'Z');
    // An oversized environ (ENVIRON_BYTE_BUDGET) is listed by the entries within its budget.
    if (r.kind !== 'ok' || r.entries.length === 0) continue;
    const tags = r.entries.map((entry) => entry.slice(0, -2));
    if (tags.length === 0) continue;
    const details = readDetails(procRoot, stat.pid);
    found.push({
      pid: stat.pid,
      ppid: stat.ppid,
      startTime: stat.startTime,
      uid: details.uid ?? null,
      comm: stat.comm,
      cmdline: details.cmdline ?? '',
      tags,
    });
  }
  return found;
}
