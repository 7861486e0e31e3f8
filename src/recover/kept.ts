// Kept processes whose TTL has passed, ended — whatever their session's state: each by its
// identity (pid + start time), with what it started (the sweep's `members`, as the guard gives them).
import type { Ledger } from '../ledger/ledger.js';
import type { KeptProcess, SessionRecord } from '../ledger/types.js';
import { identityKey, isAlive } from '../proc/identity.js';
import { type Snapshot, takeSnapshot } from '../proc/snapshot.js';
import { sweep } from '../sweep/loop.js';
import type { SweepReport } from '../sweep/report.js';

/**
 * One expired kept process. `outcome`: `ended` (the sweep saw it gone), `gone` (it had ended
 * before recover looked), `survived` (still alive after the KILL phase), `elsewhere` (its
 * session runs in a sandbox or on another machine: not reachable by pid from here),
 * `would-end` (dry run).
 */
export interface KeptEnd extends KeptProcess {
  tag: string;
  outcome: 'ended' | 'gone' | 'survived' | 'elsewhere' | 'would-end';
  report: SweepReport | null;
}

interface KeptSettings {
  /** Where each sweep is recorded, and the ended processes taken off the record's `kept`. */
  ledger: Ledger;
  dryRun?: boolean;
  graceMs?: number;
  killAfterMs?: number;
  procRoot?: string;
  now: number;
  /** This machine's id (as `Supervisor.machineId`), to tell which sessions' pids are ours. */
  machineId: string;
}

/** Ends every kept process of `records` whose `expiresAt` ≤ `now`; one sweep per session. */
export async function endExpiredKept(records: SessionRecord[], settings: KeptSettings): Promise<KeptEnd[]> {
  const out: KeptEnd[] = [];
  for (const record of records) {
    const expired = record.kept.filter((k) => k.expiresAt <= settings.now);
    if (expired.length === 0) continue;
    const local =
      record.location.kind === 'local' &&
      (record.supervisor.machineId === '' ||
        settings.machineId === '' ||
        record.supervisor.machineId === settings.machineId);
    const alive = expired.filter((k) => isAlive(k, settings.procRoot));
    const entry = (
      k: KeptProcess,
      outcome: KeptEnd['outcome'],
      report: SweepReport | null = null,
    ): KeptEnd => ({
      ...k,
      tag: record.tag,
      outcome,
      report,
    });
    if (!local) {
      out.push(...expired.map((k) => entry(k, 'elsewhere')));
      continue;
    }
    out.push(...expired.filter((k) => !alive.includes(k)).map((k) => entry(k, 'gone')));
    if (settings.dryRun) {
      out.push(...alive.map((k) => entry(k, 'would-end')));
      continue;
    }
    if (alive.length === 0) {
      await forget(settings.ledger, record, expired);
      continue;
    }
    const report = await sweep({
      tag: record.tag,
      procRoot: settings.procRoot,
      graceMs: settings.graceMs,
      killAfterMs: settings.killAfterMs,
      members: alive.map((k) => ({ pid: k.pid, startTime: k.startTime })),
      // Kept processes whose TTL has not passed, and what they started, are not reached
      // through an expired one's descendants.
      spare: keptSubtrees(
        record.kept.filter((k) => k.expiresAt > settings.now),
        settings.procRoot,
      ),
      layers: ['kept'],
    });
    const survivors = new Set(report.survivors.map((p) => identityKey(p)));
    out.push(...alive.map((k) => entry(k, survivors.has(identityKey(k)) ? 'survived' : 'ended', report)));
    try {
      await settings.ledger.recordSweep(record.tag, report);
    } catch {
      // The sweep ran and is in the result; the record keeps the process listed (next run).
    }
    await forget(
      settings.ledger,
      record,
      expired.filter((k) => !survivors.has(identityKey(k))),
    );
  }
  return out;
}

// Takes the ended kept processes off the record (best effort: a refused write lists them again
// next time, as `gone`).
async function forget(ledger: Ledger, record: SessionRecord, ended: KeptProcess[]): Promise<void> {
  if (ended.length === 0) return;
  const endedKeys = new Set(ended.map((k) => identityKey(k)));
  try {
    await ledger.recordKept(
      record.tag,
      record.kept.filter((k) => !endedKeys.has(identityKey(k))),
    );
  } catch {
    // Named in the result already; a later run finds them `gone` and tries again.
  }
}

/**
 * The pids of `kept` (those still alive with their start time) and of every descendant of one,
 * from one walk of the process table: what a sweep must spare to leave them running.
 */
export function keptSubtrees(kept: KeptProcess[], procRoot = '/proc'): number[] {
  if (kept.length === 0) return [];
  let snapshot: Snapshot;
  try {
    snapshot = takeSnapshot(procRoot);
  } catch {
    return kept.map((k) => k.pid); // no process table: the sweep itself will say so
  }
  const out: number[] = [];
  const queue = kept
    .filter((k) => snapshot.processes.get(k.pid)?.startTime === k.startTime)
    .map((k) => k.pid);
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
    out.push(pid);
    queue.push(...(snapshot.children.get(pid) ?? []));
  }
  return out;
}
