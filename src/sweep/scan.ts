// One scan (ADR-127 §2): the session's processes are the carriers of the tag, the earlier finds
// still alive with the same identity, and every descendant of either, by parent.

import { readUid } from '../proc/details.js';
import { matchEnviron } from '../proc/environ.js';
import { type Identity, identityKey, isAliveStat } from '../proc/identity.js';
import { type Snapshot, takeSnapshot } from '../proc/snapshot.js';
import type { ProcStat } from '../proc/stat.js';

/** How a process was first found: its environ holds the tag, or its parent is in the session. */
export type FoundBy = 'carrier' | 'descendant';

/** A live session process, as this scan saw it. */
export interface Member {
  identity: Identity;
  stat: ProcStat;
  foundBy: FoundBy;
  /** For a descendant: the pid of the parent through which it was found. */
  via?: number;
}

/** What a scan needs to know about the session. */
export interface ScanContext {
  procRoot: string;
  /** The exact environ record `NAME=1`, as bytes. */
  entry: Buffer;
  /**
   * Clock ticks since boot at which the session began. A carrier must have started at or after
   * it (a process running before the session cannot have inherited its variable), so earlier
   * processes' environs are not read. Undefined for a sweep by tag alone: every process is read.
   */
  notBefore?: number;
  /** Never members: the supervisor and its ancestors. */
  excluded: Set<number>;
  /** Earlier finds by identity key, kept across scans and across sweeps of one session. */
  known: Map<string, Member>;
  /** Our uid: an unreadable environ of another uid is not ours to name. */
  uid: number;
}

/** One scan's result. */
export interface ScanResult {
  snapshot: Snapshot;
  members: Member[];
  /** Processes of our uid started since the session began whose environ cannot be read. */
  unreadable: ProcStat[];
}

/** Scans once. Throws `NoProcError` when the process table cannot be read. */
export function scanSession(ctx: ScanContext): ScanResult {
  const snapshot = takeSnapshot(ctx.procRoot);
  const members = new Map<number, Member>();
  const unreadable: ProcStat[] = [];
  const eligible = (stat: ProcStat) =>
    stat.pid > 1 && !ctx.excluded.has(stat.pid) && isAliveStat(ctx.procRoot, stat);

  const addWithDescendants = (first: Member) => {
    const queue = [first];
    for (let m = queue.pop(); m !== undefined; m = queue.pop()) {
      if (members.has(m.identity.pid)) continue;
      members.set(m.identity.pid, m);
      ctx.known.set(identityKey(m.identity), m);
      for (const child of snapshot.children.get(m.identity.pid) ?? []) {
        const stat = snapshot.processes.get(child);
        if (stat === undefined || members.has(child) || !eligible(stat)) continue;
        const identity = { pid: child, startTime: stat.startTime };
        const earlier = ctx.known.get(identityKey(identity));
        queue.push(
          earlier ? { ...earlier, stat } : { identity, stat, foundBy: 'descendant', via: m.identity.pid },
        );
      }
    }
  };

  // Earlier finds that are still the same process.
  for (const earlier of ctx.known.values()) {
    const stat = snapshot.processes.get(earlier.identity.pid);
    if (stat && stat.startTime === earlier.identity.startTime && eligible(stat)) {
      addWithDescendants({ ...earlier, stat });
    }
  }

  // Carriers: read environ only where it can matter.
  for (const stat of snapshot.processes.values()) {
    if (ctx.notBefore !== undefined && stat.startTime < ctx.notBefore) continue;
    if (members.has(stat.pid) || !eligible(stat)) continue;
    const leaderExited = stat.state === 'Z';
    const match = matchEnviron(ctx.procRoot, stat.pid, ctx.entry, leaderExited);
    if (match === 'match') {
      addWithDescendants({
        identity: { pid: stat.pid, startTime: stat.startTime },
        stat,
        foundBy: 'carrier',
      });
    } else if (match === 'denied' && readUid(ctx.procRoot, stat.pid) === ctx.uid) {
      unreadable.push(stat);
    }
  }
  // An unreadable process later found as a descendant is a member, not unreadable.
  return {
    snapshot,
    members: [...members.values()],
    unreadable: unreadable.filter((s) => !members.has(s.pid)),
  };
}
