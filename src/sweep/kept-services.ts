// The declared services of one sweep (docs/sweep.md, "Kept processes"): which members a `keep`
// rule sets aside, the processes under them, and their move out of the session cgroup. A part of
// the sweep's state (src/sweep/run.ts), kept apart so that the rest reads without it.
import { dirname } from 'node:path';
import { cgroupPids, cgroupPopulated, moveToCgroup } from '../proc/cgroup.js';
import { readDetails } from '../proc/details.js';
import { type Identity, identityKey } from '../proc/identity.js';
import { type CompiledKeep, compileKeep, keepRuleFor } from './keep.js';
import type { KeptRecord, ProcessRecord, SweepWarning } from './report.js';
import type { Member, ScanResult } from './scan.js';
import { type Hold, hasExited } from './signal.js';

/** A process kept as a declared service: its record, and whether the last scan saw it. */
export interface KeptTrack {
  record: KeptRecord;
  hold?: Hold;
  alive: boolean;
}

/** A member's uid and cmdline, as read. */
export type MemberDetails = { uid?: number; cmdline?: string };

/** What setting aside reads of the sweep: the record of a member, the session's own keys. */
export interface KeptContext {
  procRoot: string;
  /** Whether `key` (an identity key) is already tracked (signalled) or one of the session's own spawns. */
  unkeepable: (key: string) => boolean;
  /** A member's report record: with `details`, or those taken from its hold (src/sweep/run.ts). */
  recordOf: (m: Member, details?: MemberDetails) => ProcessRecord;
  warn: (code: SweepWarning['code'], message: string) => void;
}

/** The kept processes of one sweep, by identity key. */
export class KeptServices {
  /** The `keep` rules, checked (`INVALID_OPTION` from the constructor). */
  readonly rules: CompiledKeep[];
  /** Members set aside as declared services, by identity key: never signalled (`setAside`). */
  readonly byKey = new Map<string, KeptTrack>();
  /** A kept process could not be moved out of the session cgroup: no cgroup.kill, no `populated` proof. */
  inCgroup = false;

  constructor(
    keep: unknown,
    private readonly c: KeptContext,
  ) {
    this.rules = compileKeep(keep);
  }

  /** True when the last scan saw a kept process. */
  alive(): boolean {
    for (const k of this.byKey.values()) if (k.alive) return true;
    return false;
  }

  /** The records of the kept processes the last scan saw. */
  records(): KeptRecord[] {
    return [...this.byKey.values()].filter((k) => k.alive).map((k) => k.record);
  }

  /** The kept processes the last scan saw, by identity: not counted in a helper's answer. */
  identities(): Identity[] {
    const ids: Identity[] = [];
    for (const k of this.byKey.values())
      if (k.alive) ids.push({ pid: k.record.pid, startTime: k.record.startTime });
    return ids;
  }

  /**
   * Takes the declared services out of a scan's members: a member whose cmdline matches a `keep`
   * rule when it is first seen, and every descendant of a kept process (by parent, in this
   * snapshot), is kept — never signalled, not counted as seen — and leaves the session cgroup
   * (`moveOut`). A member first seen unkept stays unkept (it may have had its signal); a
   * session's own spawn is never kept.
   */
  setAside(scan: ScanResult, cgroup: string | undefined): void {
    if (this.rules.length === 0) return;
    for (const k of this.byKey.values()) k.alive = false;
    const members = new Map(scan.members.map((m) => [m.identity.pid, m]));
    const decided = new Map<number, KeptTrack | null>();
    const now = Date.now();
    const decide = (m: Member): KeptTrack | null => {
      const pid = m.identity.pid;
      const done = decided.get(pid);
      if (done !== undefined) return done;
      decided.set(pid, null); // (a ppid loop cannot happen; this ends one anyway)
      const key = identityKey(m.identity);
      let k: KeptTrack | null = this.byKey.get(key) ?? null;
      if (!k && !this.c.unkeepable(key)) {
        const parent = members.get(m.stat.ppid);
        const above = parent ? decide(parent) : null;
        k = above ? this.keepWith(m, above) : this.keepIfMatching(m, now);
      }
      decided.set(pid, k);
      return k;
    };
    const rest: Member[] = [];
    for (const m of scan.members) {
      const k = decide(m);
      if (k) k.alive = true;
      else rest.push(m);
    }
    scan.members = rest;
    if (cgroup !== undefined) this.moveOut(scan, cgroup);
  }

  // A new member whose cmdline matches a rule: kept, with the details read from its hold.
  private keepIfMatching(m: Member, now: number): KeptTrack | null {
    const details = m.hold?.details ?? readDetails(this.c.procRoot, m.identity.pid);
    const rule = keepRuleFor(this.rules, details.cmdline ?? '');
    // None: left for the sweep's `track`, which takes the details from the hold.
    if (!rule) return null;
    if (m.hold) m.hold.details = undefined;
    return this.add(m, { match: rule.match, owner: rule.owner, expiresAt: now + rule.ttlMs }, details);
  }

  // A new member under a kept process: part of the service, kept on its ancestor's rule and expiry.
  private keepWith(m: Member, above: KeptTrack): KeptTrack {
    const { match, owner, expiresAt } = above.record;
    return this.add(m, { match, owner, expiresAt, keptWith: above.record.keptWith ?? above.record.pid });
  }

  private add(
    m: Member,
    rule: Pick<KeptRecord, 'match' | 'owner' | 'expiresAt' | 'keptWith'>,
    details?: MemberDetails,
  ): KeptTrack {
    const record: KeptRecord = { ...this.c.recordOf(m, details), ...rule };
    const k: KeptTrack = { record, alive: true };
    if (m.hold) k.hold = m.hold;
    this.byKey.set(identityKey(m.identity), k);
    return k;
  }

  /**
   * Moves each kept process still in the session cgroup (or below it) to the cgroup's parent:
   * there `cgroup.kill` cannot reach it, `populated 0` can prove the rest gone, and the session
   * cgroup can be removed. One whose pidfd reports its exit is not moved (its pid may name another
   * process). A move that fails leaves it there: `KEPT_IN_CGROUP`, and no cgroup.kill or
   * `populated` proof for this sweep.
   */
  private moveOut(scan: ScanResult, cgroup: string): void {
    if (!this.alive()) return;
    const inside = new Set(cgroupPids(cgroup));
    let moved = false;
    for (const k of this.byKey.values()) {
      if (!k.alive || !inside.has(k.record.pid)) continue;
      if (k.hold && k.hold.fd >= 0 && hasExited(k.hold)) continue;
      const done = moveToCgroup(dirname(cgroup), k.record.pid);
      if (done === true) moved = true;
      else if (done !== 'ESRCH' && !this.inCgroup) {
        this.inCgroup = true;
        this.c.warn(
          'KEPT_IN_CGROUP',
          `kept process ${k.record.pid} could not be moved out of ${cgroup} (${done}): no cgroup.kill and no populated proof for this sweep, and the cgroup stays while it runs`,
        );
      }
    }
    // The walk read `populated` before the moves.
    if (moved) scan.populated = cgroupPopulated(cgroup);
  }
}
