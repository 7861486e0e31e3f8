// Kept processes whose TTL has passed, ended — whatever their session's state: each by its
// identity (pid + start time), with what it started (the sweep's `members`, as the guard gives them).

import type { LiveSign } from '../containment/live-session.js';
import type { Ledger } from '../ledger/ledger.js';
import { samePidSpace, type Vantage } from '../ledger/supervisor.js';
import type { KeptProcess, SessionRecord } from '../ledger/types.js';
import { readEnviron } from '../proc/environ.js';
import { identityKey, isAlive, readStat } from '../proc/identity.js';
import { type Snapshot, takeSnapshot } from '../proc/snapshot.js';
import { expiredAt, keptAt } from '../sweep/keep.js';
import { sweep } from '../sweep/loop.js';
import type { SweepReport } from '../sweep/report.js';
import { type LiveTags, liveSign, sessionBound } from './supervised.js';

/**
 * One expired kept process. `outcome`: `ended` (the sweep saw it gone), `gone` (it had ended
 * before recover looked), `survived` (still alive after the KILL phase), `elsewhere` (its
 * session runs in a sandbox, on another machine or boot, in another PID namespace, or recorded
 * none of these: its pid is not checkable from here), `left-alone` (alive, but its environ no
 * longer carries the session's tag entry, or cannot be read: no evidence it is the session's),
 * `would-end` (dry run). `reason`: why, for `elsewhere` and `left-alone`; `evidence`: the sign of
 * a live supervisor of its session that left it alone (supervised.ts).
 */
export interface KeptEnd extends KeptProcess {
  tag: string;
  outcome: 'ended' | 'gone' | 'survived' | 'elsewhere' | 'left-alone' | 'would-end';
  report: SweepReport | null;
  reason?: string;
  evidence?: LiveSign;
}

interface KeptSettings {
  /** Where each sweep is recorded, and the ended processes taken off the record's `kept`. */
  ledger: Ledger;
  dryRun?: boolean;
  graceMs?: number;
  killAfterMs?: number;
  procRoot?: string;
  now: number;
  /** This machine, boot and PID namespace, to tell which sessions' pids are ours. */
  here: Vantage;
  /** The live tagged processes, read once (supervised.ts): a session alive now keeps its kept. */
  live: LiveTags;
}

/**
 * Ends every kept process of `records` whose `expiresAt` ≤ `now`; one sweep per session. A
 * kept process is signalled only on evidence: its session's supervisor ran here (machine id
 * known and equal, same boot, same PID namespace: `samePidSpace`), its pid + start time are
 * alive, and its environ still carries the session's tag entry. What it started follows by
 * parentage (the sweep's `members`).
 */
export async function endExpiredKept(records: SessionRecord[], settings: KeptSettings): Promise<KeptEnd[]> {
  const out: KeptEnd[] = [];
  for (const record of records) {
    const expired = expiredAt(record.kept, settings.now);
    if (expired.length === 0) continue;
    const entry = (
      k: KeptProcess,
      outcome: KeptEnd['outcome'],
      report: SweepReport | null = null,
      reason?: string,
    ): KeptEnd => ({
      ...k,
      tag: record.tag,
      outcome,
      report,
      ...(reason ? { reason } : {}),
    });
    const elsewhere = elsewhereReason(record, settings.here);
    if (elsewhere) {
      for (const k of expired) out.push(entry(k, 'elsewhere', null, elsewhere));
      continue;
    }
    const living = expired.filter((k) => isAlive(k, settings.procRoot));
    const livingKeys = new Set(living.map((k) => identityKey(k)));
    const gone = expired.filter((k) => !livingKeys.has(identityKey(k)));
    for (const k of gone) out.push(entry(k, 'gone'));
    // A session alive now (a live supervisor of its tag, older than the row's begin, is seen:
    // supervised.ts; a forged or stale row's kept entry may name one of its processes) keeps its
    // processes, expired or not.
    const sign =
      living.length > 0
        ? liveSign(record.tag, settings.live, { bound: sessionBound(record, settings.live) })
        : undefined;
    if (sign) {
      for (const k of living)
        out.push({
          ...entry(k, 'left-alone', null, sign.reason),
          ...(sign.sign ? { evidence: sign.sign } : {}),
        });
      continue;
    }
    // Alive with the recorded identity, and still carrying the session's tag: only these are ended.
    const alive: KeptProcess[] = [];
    for (const k of living) {
      const untagged = tagMissing(k, record.tag, settings.procRoot);
      if (untagged) out.push(entry(k, 'left-alone', null, untagged));
      else alive.push(k);
    }
    if (settings.dryRun) {
      for (const k of alive) out.push(entry(k, 'would-end'));
      continue;
    }
    if (alive.length === 0) {
      await forget(settings.ledger, record, gone);
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
      spare: keptSubtrees(keptAt(record.kept, settings.now), settings.procRoot),
      layers: ['kept'],
    });
    const survivors = new Set(report.survivors.map((p) => identityKey(p)));
    for (const k of alive) out.push(entry(k, survivors.has(identityKey(k)) ? 'survived' : 'ended', report));
    try {
      await settings.ledger.recordSweep(record.tag, report);
    } catch {
      // The sweep ran and is in the result; the record keeps the process listed (next run).
    }
    const aliveKeys = new Set(alive.map((k) => identityKey(k)));
    const left = new Set(living.filter((k) => !aliveKeys.has(identityKey(k))).map((k) => identityKey(k)));
    await forget(
      settings.ledger,
      record,
      expired.filter((k) => !survivors.has(identityKey(k)) && !left.has(identityKey(k))),
    );
  }
  return out;
}

// Why a session's kept pids are not checkable from here, or undefined when they are.
function elsewhereReason(record: SessionRecord, here: Vantage): string | undefined {
  if (record.location.kind !== 'local')
    return "its session runs in a sandbox: its pids are not this machine's";
  const s = record.supervisor;
  if (samePidSpace(s, here)) return undefined;
  if (s.machineId === '' || here.machineId === '') return 'the machine it ran on is unknown (no machine id)';
  if (s.machineId !== here.machineId) return `it ran on machine ${s.machineId}: run tether recover there`;
  if (s.bootId !== here.bootId) return 'it ran in another boot of this machine, which ended it';
  if (s.pidNamespace === undefined) return 'its session recorded no PID namespace (an older tether)';
  return `its session ran in another PID namespace (${s.pidNamespace}; this one is ${here.pidNamespace ?? 'unknown'})`;
}

// Undefined when `k`'s environ holds `tag`'s entry; else why it is left alone.
function tagMissing(k: KeptProcess, tag: string, procRoot = '/proc'): string | undefined {
  const stat = readStat(procRoot, k.pid);
  if (!stat || stat.startTime !== k.startTime) return undefined; // gone since: the sweep says so
  let read: ReturnType<typeof readEnviron>;
  try {
    read = readEnviron(procRoot, k.pid, stat.state === 'Z' && stat.threads > 0);
  } catch (error) {
    return `its environ cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}): no evidence it is the session's`;
  }
  if (read.kind === 'gone') return undefined;
  if (read.kind === 'denied') return "its environ cannot be read (denied): no evidence it is the session's";
  if (read.entries.includes(`${tag}=1`)) return undefined;
  return read.oversized
    ? `its environ is too large to read whole and ${tag} was not in what was read: no evidence it is the session's`
    : `its environ no longer carries ${tag}: no evidence it is the session's process`;
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
 * from one walk of the process table (`taken`, or one it takes): what a sweep must spare to
 * leave them running.
 */
export function keptSubtrees(kept: KeptProcess[], procRoot = '/proc', taken?: Snapshot): number[] {
  if (kept.length === 0) return [];
  let snapshot: Snapshot;
  try {
    snapshot = taken ?? takeSnapshot(procRoot);
  } catch {
    return kept.map((k) => k.pid); // no process table: the sweep itself will say so
  }
  const out: number[] = [];
  const queue = kept
    .filter((k) => snapshot.processes.get(k.pid)?.startTime === k.startTime)
    .map((k) => k.pid);
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
    out.push(pid);
    for (const child of snapshot.children.get(pid) ?? []) queue.push(child);
  }
  return out;
}
