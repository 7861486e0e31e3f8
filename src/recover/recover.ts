// `recover()`: the sessions whose supervisor died, swept and recorded (docs/ledger.md, "Recover").
// Read it top to bottom: list what the ledger holds → pick the sessions whose supervisor is
// gone → sweep each where it runs (locally by tag and its leftover cgroup; a sandbox session
// through its recorded channel) → record `recovered` (or `parked`, or `ambiguous`) with the
// report → end the kept processes whose TTL has passed, whatever their session's state →
// remove the empty session cgroups no session claims.

import type { LiveSign } from '../containment/live-session.js';
import type { RemovedCgroup } from '../containment/stale-cgroups.js';
import type { Ledger } from '../ledger/ledger.js';
import { currentVantage, judgeSupervisor } from '../ledger/supervisor.js';
import type { CorruptRow, SessionRecord, SessionState } from '../ledger/types.js';
import { toRecord } from '../outcome/record.js';
import type { SweepReport } from '../sweep/report.js';
import { removeStaleCgroups } from './cgroups.js';
import { channelTrust } from './channel-trust.js';
import { endExpiredKept, type KeptEnd } from './kept.js';
import { type Plan, planOf } from './plan.js';
import { type LiveEvidence, liveSign, readLiveTags, refusedSigns, sessionBound } from './supervised.js';
import { type SweepOutcome, sweepSession } from './sweep-session.js';
import { type WouldStop, wouldStop } from './would-stop.js';

/** Options of `recover()`. Durations in milliseconds. */
export interface RecoverOptions {
  ledger: Ledger;
  /** Signal nothing and write nothing: say what would be swept (`outcome: 'would-sweep'`…). */
  dryRun?: boolean;
  /** TERM phase of each sweep. Default 5000. */
  graceMs?: number;
  /** KILL phase of each sweep. Default 3000. */
  killAfterMs?: number;
  /** The whole sandbox sweep of one session, retries of an unreachable channel included. Default 30 000. */
  channelBudgetMs?: number;
  /** At most this many sessions are swept at once. Default 16. */
  concurrency?: number;
  /** Milliseconds since the epoch taken as now for kept processes' TTLs. Default `Date.now()`. */
  now?: number;
  procRoot?: string;
  /**
   * Sandbox channels recover may run although their MAC does not verify, each an argv that a
   * recorded channel must equal word for word (`[['docker', 'exec', '-i', 'ctr-1']]`). A
   * channel is otherwise run only when the MAC `Ledger.begin` wrote verifies with this user's
   * channel key and this machine's id; any other is parked, not run: a row's text is no proof
   * of what it runs (docs/ledger.md, "Trust"). `INVALID_OPTION` for anything else.
   */
  allowChannels?: readonly (readonly string[])[];
  /**
   * A file of allowed channel prefixes, one per line (`tether recover` passes
   * `~/.config/tether/recover-channels`: `defaultChannelsFile()`); none by default.
   */
  channelsFile?: string;
  /**
   * How old an empty session cgroup no session claims must be before it is removed (step 5 of
   * docs/ledger.md "Recover"): CGROUP_MIN_AGE_MS (60 000) by default.
   */
  cgroupMinAgeMs?: number;
}

/**
 * What recover did with one session. `outcome`:
 * - `recovered`: swept, every process found is gone (the record is now `recovered`);
 * - `parked`: its processes cannot be reached from here — a sandbox channel that cannot reach
 *   its target, or a local session of another machine (`reason` names which; the record is `parked`);
 * - `ambiguous`: swept, but the end is not proven (survivors, an incomplete or cut sweep): the
 *   record is `ambiguous`, never to be retried;
 * - `lost-race`: another writer settled it first (`state` is what it holds);
 * - `would-sweep` (dry run): what a run would sweep, nothing signalled or written;
 * - `write-failed`: swept, but the ledger refused the write (`reason` names the error);
 * - `left-alone`: its supervisor cannot be judged from here — it ran in another PID namespace
 *   (or recorded none: an older tether), or on a machine whose id is unknown — and it holds no
 *   lease; or, whatever the record says, its session is alive now (a live supervisor of its tag,
 *   older than the row's begin, runs here, nested or not: supervised.ts): nothing is signalled
 *   or written (`reason` says which; `evidence`, the sign that spared it).
 */
export interface RecoveredSession {
  tag: string;
  /** The record's state after recover (or as found, in a dry run). */
  state: SessionState;
  outcome: 'recovered' | 'parked' | 'ambiguous' | 'lost-race' | 'would-sweep' | 'write-failed' | 'left-alone';
  /** Where it ran: `local`, or the channel's argv joined. */
  where: string;
  report: SweepReport | null;
  /** Why it was parked, ambiguous or not written; what a dry run would do. */
  reason?: string;
  /**
   * A dry run of a local session: each process its sweep would stop now (src/recover/would-stop.ts),
   * or, when /proc cannot be read, nothing and `reason` says so.
   */
  wouldStop?: WouldStop[];
  /**
   * `left-alone` by a live supervisor: the sign that spared it (its kind, the supervisor's pid,
   * the start times it rests on, in clock ticks since boot).
   */
  evidence?: LiveSign;
}

/** The whole run: each session handled, each kept process ended, and whether all is settled. */
export interface RecoverResult {
  sessions: RecoveredSession[];
  kept: KeptEnd[];
  /**
   * The rows the ledger holds that are no valid record (docs/ledger.md, "A row that cannot be
   * read"): not recovered, left as they are, each named by its tag, field and problem.
   */
  corrupt: CorruptRow[];
  /**
   * Empty session cgroups removed (or, in a dry run, that would be): no live session, no running
   * or parked row, older than `cgroupMinAgeMs` (src/recover/cgroups.ts). They never unsettle a run.
   */
  cgroups: RemovedCgroup[];
  /**
   * True when every session handled was recovered (or left alone: not judged gone), every
   * expired kept process ended, and no row was corrupt.
   */
  settled: boolean;
}

/**
 * Recovers every `running` (or `parked`) session of `ledger` whose supervisor is gone
 * (`supervisorGone`: on this machine its pid + start time no longer exist; a shared store's
 * lease expired), then ends every kept process whose `expiresAt` has passed (identity-checked,
 * with what it started). Sessions whose supervisor is alive are left alone and not listed.
 * A row that is no valid record is named in `corrupt` (not settled) and the others recovered.
 * Rejects with the ledger's TetherError (`LEDGER_CORRUPT`, `LEDGER_UNAVAILABLE`…) when it
 * cannot be read at all; a write refused after a sweep does not lose the sweep (`write-failed`).
 */
export async function recover(options: RecoverOptions): Promise<RecoverResult> {
  const { ledger } = options;
  const now = options.now ?? Date.now();
  const trust = channelTrust(ledger, options); // a bad allow-list fails before anything runs
  const corrupt: CorruptRow[] = [];
  const records = await ledger.list({ onCorrupt: (row) => corrupt.push(row) });
  const here = currentVantage(Date.now());
  // Running (or parked) and its supervisor gone: where its pid can be checked (this machine,
  // boot and PID namespace) its pid + start time no longer exist, elsewhere its lease expired.
  const open = records.filter((r) => r.state === 'running' || r.state === 'parked');
  const judged = open.map((record) => ({ record, ...judgeSupervisor(record, here) }));
  // A session with a sign of life now is left alone, whatever its record says of its
  // supervisor (a forged or stale row, a retry under the same tag: supervised.ts) — a sandbox
  // session too, by its supervisor here. /proc is read once for every record.
  // A sign counts only when it started before the row's session began: a leftover forges only
  // younger ones (docs/containment.md, "Live sessions"). An earlier boot's row has no bound here:
  // nothing of this boot was started by its members.
  const live = readLiveTags(options.procRoot);
  const supervised = new Map<string, LiveEvidence>();
  const refused = new Map<string, string[]>(); // signs too young to count, said in the report
  for (const j of judged) {
    if (!j.gone) continue;
    const otherBoot = j.record.location.kind === 'local' && j.by === 'boot';
    const bound = otherBoot ? undefined : sessionBound(j.record, live);
    const sign = liveSign(j.record.tag, live, { otherBoot, ...(bound === undefined ? {} : { bound }) });
    if (sign) supervised.set(j.record.tag, sign);
    else if (bound !== undefined) refused.set(j.record.tag, refusedSigns(j.record.tag, live, bound));
  }
  const orphaned = judged.filter((j) => j.gone && !supervised.has(j.record.tag)).map((j) => j.record);
  const leftAlone = (record: SessionRecord, reason: string, evidence?: LiveSign): RecoveredSession => ({
    tag: record.tag,
    state: record.state,
    outcome: 'left-alone',
    where: record.location.kind === 'local' ? 'local' : record.location.channel.join(' '),
    report: null,
    reason,
    ...(evidence ? { evidence } : {}),
  });
  const unjudged: RecoveredSession[] = [
    ...judged.filter((j) => !j.gone && j.by === 'none').map((j) => leftAlone(j.record, j.why)),
    ...judged.flatMap((j) => {
      const e = supervised.get(j.record.tag);
      return e ? [leftAlone(j.record, e.reason, e.sign)] : [];
    }),
  ];
  const plans = orphaned.map((record) => planOf(record, { procRoot: options.procRoot, trust }));
  const swept = await inBatches(plans, options.concurrency ?? 16, (plan) =>
    options.dryRun
      ? describeDry(plan, now, options.procRoot, refused.get(plan.record.tag))
      : recoverOne(ledger, plan, options, now, refused.get(plan.record.tag)),
  );
  const sessions = [...swept, ...unjudged];
  const kept = await endExpiredKept(records, { ...options, now, here, live });
  // Empty session cgroups no session claims: not those of a row still running or parked after
  // the sweeps (a dry run's would-sweep included), nor a live session's (read before the sweeps:
  // one begun since has a cgroup younger than the age bound).
  const stillOpen = new Map(open.map((r) => [r.tag, r.state] as const));
  for (const s of sessions) stillOpen.set(s.tag, s.state);
  const cgroups = removeStaleCgroups({
    open: new Set(
      [...stillOpen].filter(([, state]) => state === 'running' || state === 'parked').map(([tag]) => tag),
    ),
    live,
    dryRun: options.dryRun === true,
    ...(options.cgroupMinAgeMs === undefined ? {} : { minAgeMs: options.cgroupMinAgeMs }),
    ...(options.procRoot === undefined ? {} : { procRoot: options.procRoot }),
  });
  const settled =
    sessions.every(
      (s) =>
        s.outcome === 'recovered' ||
        s.outcome === 'lost-race' ||
        s.outcome === 'would-sweep' ||
        s.outcome === 'left-alone',
    ) &&
    kept.every((k) => k.outcome !== 'survived' && k.outcome !== 'left-alone') &&
    corrupt.length === 0;
  return { sessions, kept, corrupt, cgroups, settled };
}

// One session: swept where it runs, then its end written (compare-and-set: a lost race is no error).
async function recoverOne(
  ledger: Ledger,
  plan: Plan,
  options: RecoverOptions,
  now: number,
  refused: string[] = [],
): Promise<RecoveredSession> {
  const done: SweepOutcome = await sweepSession(plan, { ...options, now });
  // What the plan refused from the record (a recorded cgroup not the session's) is said too, and
  // the signs of life too young to count.
  const notes = [...(plan.kind === 'local' ? plan.notes : []), ...refused];
  const why = [done.reason, ...notes].filter((r) => r !== undefined).join('; ');
  const swept = { ...done, ...(why ? { reason: why } : {}) };
  const base = { tag: plan.record.tag, where: plan.where, report: swept.report };
  // A parked session found parked again is not written again.
  if (swept.state === 'parked' && plan.record.state === 'parked')
    return { ...base, state: 'parked', outcome: 'parked', reason: swept.reason };
  try {
    const { tag } = plan.record;
    const outcome = { exitCode: null, signal: null, error: swept.error && toRecord(swept.error) };
    const report = swept.report ?? undefined;
    const settled = await ledger.settle(tag, swept.state, { outcome, ...(report ? { report } : {}) });
    if (!settled.applied) {
      // Another writer settled it first (a second recover, its supervisor's late end): its
      // state stands; this sweep is kept as evidence.
      if (report) await ledger.recordSweep(tag, report);
      return { ...base, state: settled.record.state, outcome: 'lost-race', reason: swept.reason };
    }
    return { ...base, state: settled.record.state, outcome: swept.state, reason: swept.reason };
  } catch (error) {
    return {
      ...base,
      state: plan.record.state,
      outcome: 'write-failed',
      reason: `swept, but the ledger ${ledger.location} refused the write: ${(error as Error).message}`,
    };
  }
}

// A dry run: what would be swept, from what the ledger recorded. Nothing is signalled or written.
function describeDry(plan: Plan, now: number, procRoot?: string, refused: string[] = []): RecoveredSession {
  const reasons = [plan.dryRun, ...refused];
  let processes: WouldStop[] | undefined;
  if (plan.kind === 'local')
    try {
      processes = wouldStop(plan, now, procRoot);
    } catch (error) {
      reasons.push(`which processes cannot be told: ${(error as Error).message}`);
    }
  return {
    tag: plan.record.tag,
    state: plan.record.state,
    outcome: 'would-sweep',
    where: plan.where,
    report: null,
    reason: reasons.join('; '),
    ...(processes ? { wouldStop: processes } : {}),
  };
}

// `work` over `items`, at most `limit` at once, results in the items' order.
async function inBatches<T, R>(items: T[], limit: number, work: (item: T) => Promise<R> | R): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) results[i] = await work(items[i] as T);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  return results;
}
