// One scan (decisions.md D2, D9): the session's processes are the carriers of the tag,
// the earlier finds still alive with the same identity, and every descendant of either, by
// parent; with the helper, every descendant of the helper; with a cgroup, every process in it.

import { cgroupPids, cgroupPopulated } from '../proc/cgroup.js';
import { readUid } from '../proc/details.js';
import { type EnvironRead, readEnviron, readEnvirons } from '../proc/environ.js';
import { type Identity, identityKey, isAliveStat } from '../proc/identity.js';
import { type Snapshot, takeSnapshot, type WalkEnviron } from '../proc/snapshot.js';
import type { ProcStat } from '../proc/stat.js';
import type { FoundBy, UnreadableReason } from './report.js';
import {
  type Evidence,
  type HeldCandidate,
  type Hold,
  type HoldRequest,
  hasExited,
  haveExited,
  releaseHold,
} from './signal.js';

/** A live session process, as this scan saw it. */
export interface Member {
  identity: Identity;
  stat: ProcStat;
  foundBy: FoundBy;
  /** For a descendant: the pid of the parent through which it was found. */
  via?: number;
  /**
   * Its pidfd, held since it became known (src/sweep/signal.ts): signals go through it, and once
   * it reports the exit the member is dropped from `known`. A `gone` hold: it was in the walk
   * but had exited (or its pid named another process) by the time it was held.
   */
  hold?: Hold;
}

/** A helper or a PID-namespace init, held by its pidfd when it could be (`hold`). */
export interface Root {
  identity: Identity;
  hold?: Hold;
}

/** What a scan needs to know about the session. */
export interface ScanContext {
  procRoot: string;
  /** The exact environ record `NAME=1`. */
  entry: string;
  /**
   * Clock ticks since boot at which the session began. A carrier must have started at or after
   * it (a process running before the session cannot have inherited its variable), so earlier
   * processes' environs are not read. Undefined for a sweep by tag alone: every process is read.
   */
  notBefore?: number;
  /** Never members: the supervisor and its ancestors. */
  excluded: Set<number>;
  /**
   * Earlier finds by identity key, kept across scans and across sweeps of one session. An entry
   * whose hold reports the exit is deleted: a pid + start time is never trusted across a reap.
   */
  known: Map<string, Member>;
  /**
   * Holds the processes that became known in a scan, all at once at the end of the walk
   * (pidfd_open(2), the start time and `evidence` re-read, no exit since, the report details
   * read: `Signaller.holdAll`), one hold per request in order; the caller owns the holds and
   * releases them. Without it, nothing is held and earlier finds are trusted by start time alone.
   */
  hold?: (requests: readonly HoldRequest[]) => Hold[];
  /**
   * Reads the candidate carriers' environs through their pidfds and holds those that carry the
   * entry (`Signaller.holdCandidates`: the read that decides membership is the held process's,
   * made once); null when it cannot (the JS path). Asked only when `notBefore` is set: a sweep
   * by tag alone has every process for candidate. The caller owns the holds it returns, and
   * may have signalled a carrier through its hold as it took it (`Hold.sent`, src/sweep/run.ts)
   * — only one the walk shows `childless` (`childless[i]`): a parent signalled before its
   * children are held could exit first, and a child whose only evidence is its parent would then
   * be held as `gone` and missed.
   */
  holdCandidates?: (candidates: readonly ProcStat[], childless: readonly boolean[]) => HeldCandidate[] | null;
  /** Our uid: a denied environ of another uid is not ours to name (docs/sweep.md). */
  uid: number;
  /**
   * The helpers (and PID-namespace inits): never members themselves, their descendants are. A
   * root whose hold reports its exit is no root any more (its pid may name another process).
   */
  roots: Root[];
  /** The session's cgroup directory, when that layer is active. */
  cgroup?: string;
  /** The members were given (`SweepOptions.members`): no carrier is looked for, no environ read. */
  tagless?: boolean;
}

/** One scan's result. */
export interface ScanResult {
  snapshot: Snapshot;
  members: Member[];
  /**
   * Processes started since the session began whose environ could not be decided: `denied`
   * (of our uid), or `oversized` (any uid: we could read it, so we could have signalled it).
   */
  unreadable: { stat: ProcStat; reason: UnreadableReason }[];
  /** `cgroup.events` `populated`, read after the walk (cgroup layer only; undefined if unread). */
  populated?: boolean;
}

// The session entries of each process, read once per snapshot: sweeps of many sessions that
// share a round's snapshot share its environ reads too.
const entriesBySnapshot = new WeakMap<Snapshot, Map<number, EnvironRead>>();

function entriesOf(snapshot: Snapshot, stat: ProcStat): EnvironRead {
  let cache = entriesBySnapshot.get(snapshot);
  if (!cache) {
    cache = new Map();
    entriesBySnapshot.set(snapshot, cache);
  }
  let entries = cache.get(stat.pid) ?? walkEnviron(snapshot, stat);
  if (entries === undefined) {
    // A zombie leader with live threads: its environ is read through a thread.
    entries = readEnviron(snapshot.procRoot, stat.pid, stat.state === 'Z');
    cache.set(stat.pid, entries);
  }
  return entries;
}

// What `stat`'s environ says of `entry`: it carries it, it is oversized (an entry past the
// budget is unknown), denied, or none of these. (The walk's own check when it read it: no
// strings made for a carrier.)
function environVerdict(
  snapshot: Snapshot,
  stat: ProcStat,
  entry: string,
): 'carrier' | 'oversized' | 'denied' | undefined {
  const cached = entriesBySnapshot.get(snapshot)?.get(stat.pid);
  const table = snapshot.table;
  if (cached === undefined && table?.environ && table.carries(table.indexOf(stat.pid), entry))
    return 'carrier';
  const r = cached ?? entriesOf(snapshot, stat);
  if (r.kind === 'ok' && r.entries.includes(entry)) return 'carrier';
  if (r.kind === 'ok' && r.oversized) return 'oversized';
  return r.kind === 'denied' ? 'denied' : undefined;
}

// The environ the walk itself read for `stat` (`takeSnapshot` with `environ`), if it did.
function walkEnviron(snapshot: Snapshot, stat: ProcStat): EnvironRead | undefined {
  const table = snapshot.table;
  return table?.environ ? table.environAt(table.indexOf(stat.pid)) : undefined;
}

/**
 * What the walk should read besides the stats for this scan: the environs of its candidate
 * carriers, in the same pass (native/scan.c `tp_walk`) — but when they are to be read through
 * their pidfds (`holdCandidates`, with `notBefore`), and for a scan of given members. Its earlier
 * finds, the supervisor and its ancestors and the roots are skipped (their environ decides
 * nothing unless they are gone since: then it is read apart).
 */
export function walkEnvironFor(ctx: ScanContext): WalkEnviron | undefined {
  if (ctx.tagless || (ctx.notBefore !== undefined && ctx.holdCandidates)) return undefined;
  const skip: { pid: number; startTime: number }[] = [];
  for (const pid of ctx.excluded) skip.push({ pid, startTime: -1 });
  for (const r of ctx.roots) skip.push(r.identity);
  for (const m of ctx.known.values()) skip.push(m.identity);
  return { from: ctx.notBefore ?? 0, entry: ctx.entry, skip };
}

/**
 * The processes the carrier loop looks at: every eligible one started at or after `notBefore`
 * (`wanted`) — or, when the walk read their environs (`walkEnvironFor`, for this session or an
 * earlier `notBefore`), only those it listed as notable: the others carry no session entry and
 * their environ was read whole, so they are neither carriers nor unreadable.
 */
function candidatesOf(ctx: ScanContext, snapshot: Snapshot, wanted: (stat: ProcStat) => boolean): ProcStat[] {
  const candidates: ProcStat[] = [];
  const from = ctx.notBefore ?? 0;
  const table = snapshot.table;
  if (table?.environ && table.environ.from <= from) {
    for (const i of table.notable) {
      if (table.startTimeAt(i) < from) continue;
      const stat = table.statAt(i);
      if (wanted(stat)) candidates.push(stat);
    }
    return candidates;
  }
  for (const stat of snapshot.processes.values()) {
    if (stat.startTime >= from && wanted(stat)) candidates.push(stat);
  }
  return candidates;
}

/**
 * Reads, in one batch (one native call when the native path is there), the environs the carrier
 * loop may ask `entriesOf` for and this snapshot has not read yet. Processes outside `wanted`
 * are still read lazily, one at a time.
 */
function prefetchEntries(snapshot: Snapshot, wanted: ProcStat[]): void {
  let cache = entriesBySnapshot.get(snapshot);
  if (!cache) {
    cache = new Map();
    entriesBySnapshot.set(snapshot, cache);
  }
  const table = snapshot.table?.environ ? snapshot.table : undefined;
  const todo = wanted.filter(
    (stat) => !cache.has(stat.pid) && !table?.readEnvironAt(table.indexOf(stat.pid)),
  );
  if (todo.length < 2) return;
  const reads = readEnvirons(
    snapshot.procRoot,
    todo.map((stat) => stat.pid),
    todo.map((stat) => stat.state === 'Z'),
  );
  for (let i = 0; i < todo.length; i++) cache.set((todo[i] as ProcStat).pid, reads[i] as EnvironRead);
}

/**
 * Reads the candidates' environs for the carrier loop. When the sweep can hold them as they are
 * read (`holdCandidates`, with `notBefore`), those this snapshot has not read yet are read
 * through their pidfds: each read goes to the snapshot's cache (it is the process the walk saw,
 * so it serves every sweep sharing the walk), and the holds of this session's carriers are
 * returned by pid — this sweep's own, never shared. Else `prefetchEntries`.
 */
function readCandidates(
  ctx: ScanContext,
  snapshot: Snapshot,
  candidates: ProcStat[],
): Map<number, HeldCandidate> {
  const held = new Map<number, HeldCandidate>();
  let cache = entriesBySnapshot.get(snapshot);
  if (!cache) {
    cache = new Map();
    entriesBySnapshot.set(snapshot, cache);
  }
  const todo = cache.size === 0 ? candidates : candidates.filter((stat) => !cache.has(stat.pid));
  const asked = ctx.notBefore !== undefined && todo.length > 0 && ctx.holdCandidates;
  const read = asked
    ? asked(
        todo,
        todo.map((stat) => !snapshot.children.get(stat.pid)?.length),
      )
    : undefined;
  if (!read) {
    prefetchEntries(snapshot, candidates);
    return held;
  }
  for (let i = 0; i < todo.length; i++) {
    const pid = (todo[i] as ProcStat).pid;
    const c = read[i] as HeldCandidate;
    cache.set(pid, c.read);
    if (c.hold) held.set(pid, c);
  }
  return held;
}

/**
 * The evidence a new member is held on: a carrier's environ still holds the entry; a
 * descendant's parent is still the one it was found through (a cgroup find: its start time
 * alone). Re-read once its pidfd is open (`Signaller.holdAll`), then the pidfd checked for an
 * exit since: the evidence was read from the held process, not from one that took its pid
 * between the walk and the hold — else the hold is `gone`.
 */
function evidenceOf(ctx: ScanContext, m: Member): Evidence {
  return m.foundBy === 'carrier'
    ? { kind: 'carrier', entry: ctx.entry, leaderExited: m.stat.state === 'Z' }
    : m.via !== undefined
      ? { kind: 'parent', ppid: m.via }
      : { kind: 'identity' };
}

/**
 * Scans once, on `snapshot` (default: a fresh one; sweeps ending together share one per round).
 * Throws `NoProcError` when the process table cannot be read. In order: the earlier finds that
 * are still the same process, the carriers of the tag (their environ read only where it can
 * matter), the layers' finds (a helper's descendants, the cgroup's pids), and the new members
 * held together.
 */
export function scanSession(
  ctx: ScanContext,
  snapshot: Snapshot = takeSnapshot(ctx.procRoot, walkEnvironFor(ctx)),
): ScanResult {
  const scan = new SessionScan(ctx, snapshot);
  scan.addEarlierFinds();
  scan.addCarriers();
  const populated = scan.addLayerFinds();
  scan.holdFresh();
  return scan.result(populated);
}

/** One scan's state: the members found so far, the unreadable, and what is still to hold. */
class SessionScan {
  private readonly members = new Map<number, Member>();
  private readonly unreadable: ScanResult['unreadable'] = [];
  /**
   * Checked after the walk, as earlier finds are: a held root whose pidfd has not reported its
   * exit now was alive, at that pid, when the walk read it. Without a hold: start time alone.
   */
  private readonly liveRoots: Identity[];
  private readonly rootPids: Set<number>;
  /**
   * The members found for the first time: held together once the walk is done — but for the
   * carriers already held as their environ was read (`readCandidates`).
   */
  private readonly fresh: Member[] = [];
  private preHeld = new Map<number, HeldCandidate>();

  constructor(
    private readonly ctx: ScanContext,
    private readonly snapshot: Snapshot,
  ) {
    this.liveRoots = ctx.roots
      .filter((r) => !(r.hold && hasExited(r.hold)))
      .map((r) => r.identity)
      .filter((r) => snapshot.processes.get(r.pid)?.startTime === r.startTime);
    this.rootPids = new Set(this.liveRoots.map((r) => r.pid));
  }

  private eligible(stat: ProcStat): boolean {
    const { ctx } = this;
    return (
      stat.pid > 1 &&
      !ctx.excluded.has(stat.pid) &&
      !this.rootPids.has(stat.pid) &&
      isAliveStat(ctx.procRoot, stat)
    );
  }

  /**
   * A pre-held carrier met first as a descendant of `parent` keeps its hold when the stat read
   * through it showed that parent: the evidence a descendant is held on, read from it — or when
   * it was signalled through it as it was held (its own environ made it a member: a new hold
   * would signal it twice).
   */
  private preHold(pid: number, parent?: number): Hold | undefined {
    const c = this.preHeld.get(pid);
    if (!c) return undefined;
    if (parent !== undefined && !c.hold?.sent && (c.ppid !== parent || c.hold?.fd === -1)) return undefined;
    this.preHeld.delete(pid);
    return c.hold;
  }

  /** Adds a find and, by parent, everything under it; those are labelled `below` (the layer). */
  private addWithDescendants(first: Member, below: FoundBy = 'descendant'): void {
    const { ctx, members, snapshot } = this;
    const queue = [first];
    for (let m = queue.pop(); m !== undefined; m = queue.pop()) {
      if (members.has(m.identity.pid)) continue;
      members.set(m.identity.pid, m);
      if (ctx.hold && m.hold === undefined) this.fresh.push(m);
      else if (m.hold?.why !== 'gone') ctx.known.set(identityKey(m.identity), m);
      for (const child of snapshot.children.get(m.identity.pid) ?? []) {
        const stat = snapshot.processes.get(child);
        if (stat === undefined || members.has(child) || !this.eligible(stat)) continue;
        const identity = { pid: child, startTime: stat.startTime };
        const earlier = ctx.known.get(identityKey(identity));
        const found: Member = earlier
          ? { ...earlier, stat }
          : { identity, stat, foundBy: below, via: m.identity.pid };
        if (!earlier) {
          const hold = this.preHold(child, m.identity.pid);
          if (hold) found.hold = hold;
        }
        queue.push(found);
      }
    }
  }

  /**
   * Earlier finds that are still the same process. Checked after the walk: a held process whose
   * pidfd has not reported its exit now was alive, at that pid, when the walk read it. One that
   * has exited is dropped for good — its pid may already name another process, even one started
   * in the same clock tick (the same start time). Without a pidfd: start time. (Their pidfds
   * polled together: one poll(2) call.)
   */
  addEarlierFinds(): void {
    const { ctx, snapshot } = this;
    const earlierFinds = [...ctx.known];
    const exited = haveExited(earlierFinds.flatMap(([, m]) => (m.hold ? [m.hold] : [])));
    let polled = 0;
    for (const [key, earlier] of earlierFinds) {
      if (earlier.hold && exited[polled++]) {
        ctx.known.delete(key);
        continue;
      }
      const stat = snapshot.processes.get(earlier.identity.pid);
      if (stat && stat.startTime === earlier.identity.startTime && this.eligible(stat)) {
        this.addWithDescendants({ ...earlier, stat });
      }
    }
  }

  /** Carriers: environ read only where it can matter. */
  addCarriers(): void {
    const { ctx, snapshot, members, unreadable } = this;
    const candidates = ctx.tagless
      ? []
      : candidatesOf(ctx, snapshot, (s) => !members.has(s.pid) && this.eligible(s));
    this.preHeld = readCandidates(ctx, snapshot, candidates);
    for (const stat of candidates) {
      // A candidate may have been added since as a carrier's descendant.
      if (members.has(stat.pid)) continue;
      const verdict = environVerdict(snapshot, stat, ctx.entry);
      if (verdict === 'carrier') {
        const carrier: Member = {
          identity: { pid: stat.pid, startTime: stat.startTime },
          stat,
          foundBy: 'carrier',
        };
        const hold = this.preHold(stat.pid);
        if (hold) carrier.hold = hold;
        this.addWithDescendants(carrier);
      } else if (verdict === 'oversized') {
        unreadable.push({ stat, reason: 'oversized' });
      } else if (verdict === 'denied' && readUid(ctx.procRoot, stat.pid) === ctx.uid) {
        unreadable.push({ stat, reason: 'denied' });
      }
    }
    // A pre-held carrier met as a descendant through another parent than its stat showed is held
    // on that parent like any new descendant (its pidfd here closed).
    for (const c of this.preHeld.values()) if (c.hold) releaseHold(c.hold);
    this.preHeld.clear();
  }

  /**
   * The layers' finds: under a helper (subreaper), whatever the env tag missed (a cleared or
   * overwritten environ, an `env -i` orphan) is still its descendant; the cgroup's pids, read
   * after the walk — a pid listed now but absent from the snapshot is found next round, one whose
   * pid was reused since the walk fails the identity check at its signal. Returns the cgroup's
   * `populated` (undefined without a cgroup).
   */
  addLayerFinds(): boolean | undefined {
    const { ctx, snapshot } = this;
    for (const root of this.liveRoots) {
      for (const child of snapshot.children.get(root.pid) ?? []) this.layerFind(child, 'subreaper', root.pid);
    }
    if (ctx.cgroup === undefined) return undefined;
    for (const pid of cgroupPids(ctx.cgroup)) this.layerFind(pid, 'cgroup');
    return cgroupPopulated(ctx.cgroup);
  }

  private layerFind(pid: number, foundBy: FoundBy, via?: number): void {
    const stat = this.snapshot.processes.get(pid);
    if (stat === undefined || this.members.has(pid) || !this.eligible(stat)) return;
    // (An earlier find still alive was added above: this one is new.)
    const member: Member = { identity: { pid, startTime: stat.startTime }, stat, foundBy };
    if (via !== undefined) member.via = via;
    this.addWithDescendants(member, foundBy);
  }

  /**
   * The new members held, in the order they were found (one native call for all of them). One
   * gone before it could be held is still a member — counted as seen: the session still runs —
   * but never known: its pid may already name another process.
   */
  holdFresh(): void {
    const { ctx, fresh } = this;
    if (!ctx.hold || fresh.length === 0) return;
    const holds = ctx.hold(fresh.map((m) => ({ id: m.identity, evidence: evidenceOf(ctx, m) })));
    for (let i = 0; i < fresh.length; i++) {
      const m = fresh[i] as Member;
      m.hold = holds[i] as Hold;
      if (m.hold.why !== 'gone') ctx.known.set(identityKey(m.identity), m);
    }
  }

  /** An unreadable process later found as a descendant is a member, not unreadable. */
  result(populated: boolean | undefined): ScanResult {
    const { members } = this;
    return {
      snapshot: this.snapshot,
      members: [...members.values()],
      unreadable: this.unreadable.filter((u) => !members.has(u.stat.pid)),
      populated,
    };
  }
}
