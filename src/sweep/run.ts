// One sweep's state, and the two halves of a round the loop drives (src/sweep/loop.ts): `scan`
// (walk the table, find the session's members) and `signalNew` (signal what has not had this
// phase's signal, note what is gone). Its report is built in src/sweep/build-report.ts.
import { readlinkSync } from 'node:fs';
import { cgroupPids, killCgroup } from '../proc/cgroup.js';
import { readDetails } from '../proc/details.js';
import { type Identity, identityKey, readStat } from '../proc/identity.js';
import { isFdExhaustion } from '../proc/read.js';
import { ancestorsOf, NoProcError, takeSnapshot } from '../proc/snapshot.js';
import { SocketTables } from '../proc/sockets.js';
import type { ProcStat } from '../proc/stat.js';
import type { SessionTag } from '../proc/tag.js';
import { buildReport } from './build-report.js';
import { KeptServices } from './kept-services.js';
import { SweepNotices } from './notices.js';
import type {
  PhaseEnd,
  PhaseRecord,
  ProcessRecord,
  SweepReport,
  SweepWarning,
  UnreadableRecord,
} from './report.js';
import { type Member, type ScanContext, type ScanResult, scanSession, walkEnvironFor } from './scan.js';
import { sharedSnapshot } from './shared-walk.js';
import {
  type CandidateSignal,
  CandidatesSignalledError,
  createSignaller,
  type HeldCandidate,
  type Hold,
  type HoldRequest,
  hasExited,
  haveExited,
  releaseHold,
  type Signaller,
} from './signal.js';
import type { PhaseSignal, SweepOptions } from './sweep-options.js';

/**
 * A phase under way: its signal, when it began (performance.now() ms), its budget (ms), its
 * rounds so far, and how many scans in a row saw no member (`empty`).
 */
export interface Phase {
  readonly signal: PhaseSignal;
  readonly startedAt: number;
  readonly budgetMs: number;
  rounds: number;
  empty: number;
}

/** A process the run has found: its record as reported, and whether the last scan saw it. */
export interface Tracked {
  record: ProcessRecord;
  identity: Identity;
  alive: boolean;
  /** A signal to it was refused (EPERM): not sent again; it survives as `denied`. */
  denied: boolean;
}

/**
 * The state of one sweep: what has been found, signalled and seen gone, the warnings and notes
 * it will report, and the holds (pidfds) it keeps. The loop (src/sweep/loop.ts) drives it a
 * round at a time: `scan`, then `signalNew`.
 */
export class SweepRun {
  readonly started = performance.now();
  readonly startedAt = new Date().toISOString();
  readonly tracked = new Map<string, Tracked>();
  readonly unreadable = new Map<string, UnreadableRecord>();
  /** The warnings, events and progress the sweep says (src/sweep/notices.ts). */
  readonly notices: SweepNotices;
  /** The report's warnings (`notices.warnings`). */
  readonly warnings: SweepWarning[];
  readonly phases: PhaseRecord[] = [];
  readonly spawnKeys: Set<string>;
  /** The declared services: the `keep` rules, the processes they set aside (src/sweep/kept-services.ts). */
  readonly kept: KeptServices;
  readonly ctx: ScanContext;
  readonly signaller: Signaller;
  /** The holds (pidfds) this sweep took on the members it found: released as they exit, and at its end. */
  holds: Hold[] = [];
  /** Set when a round failed for want of fds and settling freed some (`failRound`): the loop runs it again. */
  retry = false;
  private fdRetries = 0;
  private warnedHold = false;
  /** The signal of the phase whose round is scanning (`earlySignal`). */
  private phaseSignal: PhaseSignal | undefined;
  /** When the current round's pause ended (performance.now() ms); undefined for the first round. */
  dueAt: number | undefined;
  scans = 0;
  scanMs = 0;
  /** Members the last scan saw alive in its snapshot, even if gone by the time of their signal. */
  seen = 0;
  /** Members the last round signalled that no earlier round had found. */
  foundInRound = 0;
  /** The last scan's kernel proof of emptiness, if any (see `PhaseEnd`). */
  kernelProof: 'populated-0' | 'helper-childless' | undefined;
  /** The last scan found nothing and a helper did not answer: no end it reaches is proven. */
  silence: { why: string; alive: boolean } | undefined;
  readonly notes: string[] = [];
  /**
   * The sweeping process (or an ancestor) is itself in the cgroup — `tether sweep --tag` run
   * from inside the session: the cgroup still finds members, but no cgroup.kill (it would kill
   * the sweeper) and its `populated` proves nothing.
   */
  cgroupShared = false;
  /** `begin()` found this process and its ancestors outside the cgroup. */
  outside = false;
  /** Set once the blind cgroup.kill was tried (true: written). */
  blindKill: boolean | undefined;
  complete = true;

  constructor(
    readonly tag: SessionTag,
    readonly opts: SweepOptions,
    /** Rounds take a shared walk when it is fresh enough (async sweeps: sharedSnapshot) or their own (sync). */
    readonly shareSnapshots: boolean,
  ) {
    this.notices = new SweepNotices(tag.name, opts);
    this.warnings = this.notices.warnings;
    this.signaller = opts.signaller ?? createSignaller();
    this.spawnKeys = new Set((opts.spawns ?? []).map(identityKey));
    const procRoot = opts.procRoot ?? '/proc';
    this.kept = new KeptServices(opts.keep, {
      procRoot,
      unkeepable: (key) => this.tracked.has(key) || this.spawnKeys.has(key),
      recordOf: (m, details) => recordOf(m, details ?? takeDetails(procRoot, m)),
      warn: (code, message) => this.notices.warn(code, message),
    });
    this.ctx = {
      procRoot: opts.procRoot ?? '/proc',
      entry: tag.entry,
      notBefore: opts.notBefore,
      excluded: new Set(),
      known: opts.known ?? new Map(),
      uid: process.getuid?.() ?? -1,
      roots: opts.roots ?? [],
      cgroup: opts.cgroup?.path,
      hold: (requests) => this.holdAll(requests),
      holdCandidates: (candidates, childless) => this.holdCandidates(candidates, childless),
      tagless: opts.members !== undefined,
    };
    this.notices.absorbWarnings();
    if (this.signaller.mechanism !== 'pidfd') {
      this.notices.warn(
        'NO_PIDFD',
        'pidfd_open is unavailable: identities are re-checked by start time before each signal (a narrow pid-reuse race remains)',
      );
    }
  }

  /**
   * Holds the members a scan found for the first time, each on its evidence (scan.ts calls it;
   * each hold carries its report details); warns when no pidfd could be had.
   */
  holdAll(requests: readonly HoldRequest[]): Hold[] {
    const holds = this.signaller.holdAll(this.ctx.procRoot, requests);
    for (const h of holds) {
      if (h.fd >= 0) this.holds.push(h);
      else if (h.why !== 'gone' && h.why !== 'no-pidfd' && !this.warnedHold) {
        this.warnedHold = true;
        this.notices.warn(
          'NO_PIDFD',
          `pidfd_open failed for pid ${h.identity.pid} (${h.why}): such a process is re-checked by start time before each signal (a narrow pid-reuse race remains)`,
        );
      }
    }
    return holds;
  }

  /**
   * Reads the candidate carriers' environs through their pidfds, holding this session's
   * carriers (scan.ts calls it; null on the JS path) — and signalling each as it is held, with
   * the phase's signal, when nothing may stand between its hold and its signal (`earlySignal`):
   * its teardown then starts while the batch goes on, as the floor's does, and `deliver` takes
   * the outcome from the hold. A batch that fails after it signalled: what it signalled is
   * tracked (the report says it), then the failure is thrown.
   */
  holdCandidates(candidates: readonly ProcStat[], childless: readonly boolean[]): HeldCandidate[] | null {
    const phaseSignal = this.phaseSignal;
    const signal = this.earlySignal(candidates, childless);
    let read: HeldCandidate[] | null;
    try {
      read = this.signaller.holdCandidates(this.ctx.procRoot, this.ctx.entry, candidates, signal);
    } catch (error) {
      if (!(error instanceof CandidatesSignalledError) || !phaseSignal) throw error;
      error.held.forEach((c, i) => {
        if (c.hold?.sent) this.trackSignalled(candidates[i] as ProcStat, c.hold, phaseSignal);
        else if (c.hold) releaseHold(c.hold);
      });
      throw error.cause;
    }
    for (const c of read ?? []) if (c.hold && c.hold.fd >= 0) this.holds.push(c.hold);
    return read;
  }

  /**
   * The signal a scan's carriers may be sent as they are held (`holdCandidates`): the phase's,
   * when no rule reads a member before its signal — no `keep` rule (a kept process's cmdline, or
   * its kept parent, decides), no `collectPorts` (its sockets are read before) — for each
   * candidate the walk shows childless (its children are held on their parent: it must outlive
   * their holds), that is not stopped (`deliver` sends a stopped one SIGCONT after its TERM) and
   * has not had that signal as a tracked process (`deliver` sends each signal once).
   */
  private earlySignal(
    candidates: readonly ProcStat[],
    childless: readonly boolean[],
  ): CandidateSignal | undefined {
    const signal = this.phaseSignal;
    if (signal === undefined || this.kept.rules.length > 0 || this.opts.collectPorts) return undefined;
    const may = candidates.map((stat, i) => {
      if (!childless[i] || stat.state === 'T' || stat.state === 't') return false;
      const t = this.tracked.get(identityKey({ pid: stat.pid, startTime: stat.startTime }));
      return !t || (!t.denied && !t.record.signals.includes(signal));
    });
    return { signal, may };
  }

  // A carrier signalled as it was held, in a batch that failed after: tracked as `deliver`
  // would have tracked it, its hold kept (released with the others at the end).
  private trackSignalled(stat: ProcStat, hold: Hold, signal: PhaseSignal): void {
    const identity = { pid: stat.pid, startTime: stat.startTime };
    const member: Member = { identity, stat, foundBy: 'carrier', hold };
    const key = identityKey(identity);
    if (hold.fd >= 0) this.holds.push(hold);
    this.ctx.known.set(key, member);
    this.deliver(this.tracked.get(key) ?? this.track(key, member), member, signal);
  }

  /** Closes the pidfds of members that have exited; all of them with `all` (the sweep's end). */
  releaseHolds(all: boolean): void {
    const exited = all ? undefined : haveExited(this.holds); // one poll(2) for them all
    this.holds = this.holds.filter((h, i) => {
      if (exited && !exited[i]) return true;
      releaseHold(h);
      return false;
    });
    // A known entry whose pidfd is closed can no longer be told from a process that takes its pid.
    if (all) for (const [key, m] of this.ctx.known) if (m.hold?.why === 'closed') this.ctx.known.delete(key);
  }

  /** Excludes the supervisor and its ancestors. False when the process table cannot be read. */
  begin(): boolean {
    try {
      const self = Number(readlinkSync(`${this.ctx.procRoot}/self`));
      if (self !== process.pid) {
        // A procfs of another PID namespace: its pids are not ours to signal, and nothing read
        // there can be checked from here. Saying "nothing found" would be a lie.
        this.complete = false;
        this.notices.warn(
          'PROC_NAMESPACE',
          `${this.ctx.procRoot} belongs to another PID namespace (it names this process ${self}, the kernel ${process.pid}): the sweep did not run; mount a procfs of this namespace`,
        );
        return false;
      }
      for (const pid of ancestorsOf(this.ctx.procRoot, process.pid)) this.ctx.excluded.add(pid);
      for (const pid of this.opts.spare ?? []) this.ctx.excluded.add(pid);
      this.addGiven(this.opts.members ?? []);
      const cgroup = this.opts.cgroup?.path;
      if (cgroup && cgroupPids(cgroup).some((pid) => this.ctx.excluded.has(pid))) {
        this.cgroupShared = true;
        this.notes.push(
          `cgroup: this process (or an ancestor) runs inside ${cgroup}: no cgroup.kill, and its populated flag proves nothing`,
        );
      } else this.outside = true;
      return true;
    } catch (error) {
      // No fd left (EMFILE) is a failed scan, not a missing procfs.
      const noProc =
        error instanceof NoProcError || isFdExhaustion(error)
          ? error
          : new NoProcError(this.ctx.procRoot, error);
      return this.fail(noProc);
    }
  }

  /**
   * The members named by the caller (`SweepOptions.members`): held now, in one batch, each start
   * time re-checked, and known from the first scan on. Never pid ≤ 1 or an excluded pid; one
   * already gone is skipped.
   */
  private addGiven(ids: readonly Identity[]): void {
    const given: { id: Identity; stat: ProcStat }[] = [];
    for (const id of ids) {
      if (id.pid <= 1 || this.ctx.excluded.has(id.pid)) continue;
      const stat = readStat(this.ctx.procRoot, id.pid);
      if (stat?.startTime === id.startTime) given.push({ id, stat });
    }
    if (given.length === 0) return;
    const holds = this.holdAll(given.map(({ id }) => ({ id, evidence: { kind: 'identity' } })));
    given.forEach(({ id, stat }, i) => {
      const hold = holds[i];
      if (hold === undefined || hold.why === 'gone') return;
      this.ctx.known.set(identityKey(id), { identity: id, stat, foundBy: 'given', hold });
    });
  }

  /** Takes the declared services out of a scan's members (`KeptServices.setAside`). */
  setAside(scan: ScanResult): void {
    const cgroup = this.opts.cgroup;
    this.kept.setAside(scan, cgroup && !this.cgroupShared ? cgroup.path : undefined);
  }

  /**
   * The last scan still saw members appear (and vanish before their signal), or a helper's
   * silence left its subtree unknown: not settled.
   */
  unsettled(): void {
    this.complete = false;
    this.notices.warn(
      'UNSETTLED',
      this.silence
        ? `${this.silence.why}: nothing proves the session's processes gone (a helper's silence is never "no child"), and some may still run`
        : 'processes of the session were still appearing when the KILL phase ended (a fork-and-exit loop outruns a scan): some may still run',
    );
  }

  fail(error: unknown): false {
    this.complete = false;
    if (error instanceof NoProcError) {
      this.notices.warn(
        'NO_PROC',
        `the sweep cannot run: ${error.message}; processes of ${this.tag.name} were not looked for`,
      );
    } else {
      const why = (error as Error).message;
      this.notices.warn(
        'SCAN_FAILED',
        isFdExhaustion(error) ? `the sweep stopped: no fd left (${why})` : `the sweep stopped: ${why}`,
      );
    }
    this.killCgroupBlind();
    this.settleTracked();
    return false;
  }

  /**
   * The KILL phase's last look left members alive, each sent its KILL (in that look, or before
   * it): those held by a pidfd are watched die for up to `SETTLE_MS` (`settleTracked`) — one
   * seen exited is stopped, never named a survivor for a KILL sent a moment before the report.
   * When that look found members no round had found before, the session's processes were still
   * appearing: unsettled.
   */
  settleLastLook(): void {
    this.settleTracked();
    if (this.foundInRound > 0) this.unsettled();
  }

  /**
   * After a failed scan (no fd left…), what this sweep already tracks is settled without one:
   * each process last seen alive that it holds by pidfd gets SIGKILL through the pidfd (no new
   * fd) and is watched by poll(2) for up to `SETTLE_MS` — one seen exited is stopped, one still
   * there is a survivor seen alive after its KILL. One without a usable pidfd is taken for gone
   * when its pid names no process (kill(2) signal 0: ESRCH); else it stays as last seen.
   */
  private settleTracked(): void {
    const waiting: { t: Tracked; hold: Hold }[] = [];
    const unheld: Tracked[] = [];
    const until = performance.now() + SETTLE_MS; // one bound for all of them
    for (const [key, t] of this.tracked) {
      if (!t.alive || t.denied) continue;
      const hold = this.ctx.known.get(key)?.hold;
      if (!hold || hold.fd < 0) {
        if (!pidExists(t.identity.pid)) this.markEnded(t);
        else unheld.push(t);
        continue;
      }
      if (!t.record.signals.includes('SIGKILL')) {
        let outcome: string;
        try {
          outcome = this.signaller.sendHeld(this.ctx.procRoot, hold, 'SIGKILL');
        } catch {
          continue; // the fallback's own reads failed: left as last seen
        }
        if (outcome === 'denied') {
          t.denied = true;
          continue;
        }
        if (outcome === 'sent') t.record.signals.push('SIGKILL');
      }
      waiting.push({ t, hold });
    }
    for (const t of unheld) this.killUnheld(t, until); // the held ones die meanwhile
    const cell = new Int32Array(new SharedArrayBuffer(4));
    while (waiting.length > 0) {
      for (let i = waiting.length - 1; i >= 0; i--) {
        const w = waiting[i] as { t: Tracked; hold: Hold };
        if (hasExited(w.hold) !== true) continue;
        this.markEnded(w.t);
        waiting.splice(i, 1);
      }
      if (waiting.length === 0 || performance.now() >= until) break;
      Atomics.wait(cell, 0, 0, SETTLE_POLL_MS);
    }
  }

  // A tracked process held by no pidfd, after a failed scan: SIGKILL by a start-time re-check,
  // then a look at its stat — each needing an fd that may not be there (then it stays as last
  // seen: `alive`, and a survivor only as such).
  private killUnheld(t: Tracked, until: number): void {
    try {
      if (!t.record.signals.includes('SIGKILL')) {
        const outcome = this.signaller.send(this.ctx.procRoot, t.identity, 'SIGKILL');
        if (outcome === 'gone') {
          this.markEnded(t);
          return;
        }
        if (outcome === 'denied') {
          t.denied = true;
          return;
        }
        t.record.signals.push('SIGKILL');
      }
      const cell = new Int32Array(new SharedArrayBuffer(4));
      for (;;) {
        const stat = readStat(this.ctx.procRoot, t.identity.pid);
        if (stat?.startTime !== t.identity.startTime || stat.state === 'Z') {
          this.markEnded(t);
          return;
        }
        if (performance.now() >= until) return;
        Atomics.wait(cell, 0, 0, SETTLE_POLL_MS);
      }
    } catch {
      // no fd for the re-check or the stat: as last seen
    }
  }

  private markEnded(t: Tracked): void {
    t.alive = false;
    t.record.endedBy = lastPhaseSignal(t.record.signals) ?? 'exited';
  }

  /**
   * The next layer when the process table cannot be read: the kernel kills the session's cgroup
   * as a whole (`cgroup.kill`), whatever a scan could not see. Only when this process is known
   * to be outside it (`begin()` checked it, or the caller created it). Its failure is said.
   */
  killCgroupBlind(): void {
    const cgroup = this.opts.cgroup;
    if (!cgroup || this.cgroupShared || this.blindKill !== undefined) return;
    if (!cgroup.canKill) {
      this.notes.push(`cgroup: ${cgroup.path} has no cgroup.kill (Linux < 5.14): not killed as a whole`);
      this.blindKill = false;
      return;
    }
    if (!this.outside && !this.opts.outsideCgroup) {
      this.notes.push(
        `cgroup: ${cgroup.path} not killed as a whole: without the process table this process cannot tell whether it runs inside it`,
      );
      this.blindKill = false;
      return;
    }
    const killed = killCgroup(cgroup.path);
    this.blindKill = killed === true;
    if (killed === true) {
      this.notes.push(`cgroup: the scan failed, so ${cgroup.path} was killed as a whole (cgroup.kill)`);
    } else {
      this.notices.warn(
        'CGROUP_KILL_FAILED',
        `cgroup.kill of ${cgroup.path} failed (${killed}): its processes may still run`,
      );
    }
  }

  /**
   * Step 1 of a round (counted in `phase`): walks the process table — the walk shared with the
   * sweeps ending together, or this run's own — and finds the session's members in it; when none
   * is seen, weighs the kernel's evidence. Undefined when it failed (`fail` said why).
   */
  scan(phase: Phase): ScanResult | undefined {
    phase.rounds += 1;
    this.phaseSignal = phase.signal;
    try {
      const environ = walkEnvironFor(this.ctx);
      const scan = scanSession(
        this.ctx,
        this.shareSnapshots
          ? sharedSnapshot(this.ctx.procRoot, this.dueAt, environ)
          : takeSnapshot(this.ctx.procRoot, environ),
      );
      this.setAside(scan);
      this.seen = scan.members.length;
      this.kernelProof = undefined;
      this.silence = undefined;
      if (this.seen === 0) this.weighKernelEvidence(scan);
      this.scans += 1;
      this.scanMs += scan.snapshot.durationMs;
      return scan;
    } catch (error) {
      this.failRound(error);
      return undefined;
    }
  }

  /**
   * A round that threw: with no fd left (EMFILE, ENFILE), the processes held are settled
   * (`settleTracked`) and the pidfds of those that exited closed; when that freed any, the round
   * is tried again (`retry`, said in a note), at most `FD_RETRIES` times. Else the sweep fails
   * (`fail`).
   */
  private failRound(error: unknown): void {
    if (isFdExhaustion(error) && this.fdRetries < FD_RETRIES) {
      this.settleTracked();
      const before = this.holds.length;
      this.releaseHolds(false);
      const freed = before - this.holds.length;
      if (freed > 0) {
        this.fdRetries++;
        this.retry = true;
        this.notes.push(
          `no fd left (${(error as Error).message}): the ${freed} processes held that had exited (those still alive were sent SIGKILL at once) gave back their pidfds, and the round was tried again`,
        );
        return;
      }
    }
    this.fail(error);
  }

  /**
   * Step 2 of a round: sends `signal` to every member not yet sent it (in the KILL phase, the
   * cgroup as a whole too), then notes who is gone and what could not be read. Returns how many
   * members are alive, or -1 when it failed (`fail` said why).
   */
  signalNew(scan: ScanResult, signal: PhaseSignal): number {
    try {
      const alive = this.signalMembers(scan, signal);
      if (signal === 'SIGKILL') this.killCgroupWhole();
      this.resumeStoppedRoots(scan);
      this.releaseHolds(false);
      this.markGone(alive);
      this.recordUnreadable(scan);
      return alive.size;
    } catch (error) {
      this.failRound(error);
      return -1;
    }
  }

  /** Signals each member, tracked from its first sight; the identity keys of those alive. */
  private signalMembers(scan: ScanResult, signal: PhaseSignal): Set<string> {
    const alive = new Set<string>();
    // This round's socket tables, read once and only if a new member is to be looked at.
    const sockets = this.opts.collectPorts ? new SocketTables(this.ctx.procRoot) : undefined;
    this.foundInRound = 0;
    for (const member of scan.members) {
      const key = identityKey(member.identity);
      let t = this.tracked.get(key);
      if (!t) {
        t = this.track(key, member, sockets);
        this.foundInRound++;
      }
      if (this.deliver(t, member, signal)) alive.add(key);
    }
    return alive;
  }

  /** A fork racing the per-process KILLs is killed by the kernel with the rest (Linux 5.14). */
  private killCgroupWhole(): void {
    const cgroup = this.opts.cgroup;
    if (!cgroup?.canKill || this.cgroupShared) return;
    if (this.kept.inCgroup) {
      const note = `cgroup: ${cgroup.path} not killed as a whole: a kept process is still in it`;
      if (!this.notes.includes(note)) this.notes.push(note);
      return;
    }
    const killed = killCgroup(cgroup.path);
    if (killed !== true && !this.notices.has('CGROUP_KILL_FAILED')) {
      this.notices.warn(
        'CGROUP_KILL_FAILED',
        `cgroup.kill of ${cgroup.path} failed (${killed}): only the per-process signals were sent`,
      );
    }
  }

  /** How many of the session's own spawns the last round saw alive (`SweepProgress.spawns`). */
  aliveSpawns(): number {
    let n = 0;
    for (const key of this.spawnKeys) if (this.tracked.get(key)?.alive) n++;
    return n;
  }

  /** Each tracked process is alive (seen in this scan) or gone, ended by its last signal. */
  private markGone(alive: Set<string>): void {
    for (const [key, t] of this.tracked) {
      if (alive.has(key)) {
        t.alive = true; // seen again (a scan that missed it was wrong, not the process gone)
        t.record.endedBy = null;
      } else if (t.alive) {
        t.alive = false;
        t.record.endedBy = lastPhaseSignal(t.record.signals) ?? 'exited';
      }
    }
  }

  /** Names each process whose environ could not be decided, once. */
  private recordUnreadable(scan: ScanResult): void {
    for (const { stat, reason } of scan.unreadable) {
      const key = identityKey({ pid: stat.pid, startTime: stat.startTime });
      if (this.unreadable.has(key)) continue;
      const details = readDetails(this.ctx.procRoot, stat.pid);
      this.unreadable.set(key, {
        pid: stat.pid,
        startTime: stat.startTime,
        uid: details.uid ?? null,
        comm: stat.comm,
        cmdline: details.cmdline ?? '',
        reason,
      });
    }
  }

  /**
   * A walk that found nothing is checked against the kernel: a cgroup still `populated 1`, or
   * a helper that still has a child other than the kept processes (told to it by identity), means
   * the session still runs (a fork-and-exit loop outruns every walk; one that left the cgroup is
   * still the helper's) — the scan is not empty. Their emptiness proves the end (`PhaseEnd`). A
   * helper that does not answer proves nothing: unless `populated 0` does, the scan is not empty
   * while it runs (stopped or slow: the next round asks again), and an end reached without its
   * word is unsettled (`end`).
   */
  weighKernelEvidence(scan: ScanResult): void {
    const populated = this.cgroupShared || this.kept.inCgroup ? undefined : scan.populated;
    if (populated === true) {
      this.seen = 1;
      return;
    }
    const answer = this.opts.helpersChildless?.(this.kept.identities()) ?? { kind: 'cannot-tell' };
    if (answer.kind === 'child') {
      this.seen = 1;
      return;
    }
    const proves = this.opts.kernelProof !== false;
    if (populated === false && proves) this.kernelProof = 'populated-0';
    else if (answer.kind === 'silent') {
      this.silence = answer;
      if (answer.alive) this.seen = 1;
    } else if (answer.kind === 'childless' && proves) this.kernelProof = 'helper-childless';
  }

  /** A helper (or init) stopped by SIGSTOP reaps and reports nothing: it gets SIGCONT. */
  resumeStoppedRoots(scan: ScanResult): void {
    for (const { identity, hold } of this.ctx.roots) {
      const stat = scan.snapshot.processes.get(identity.pid);
      if (stat?.startTime !== identity.startTime || (stat.state !== 'T' && stat.state !== 't')) continue;
      if (hold) this.signaller.sendHeld(this.ctx.procRoot, hold, 'SIGCONT');
      else this.signaller.send(this.ctx.procRoot, identity, 'SIGCONT');
    }
  }

  /** Starts tracking a member found now; with `sockets`, reads what it listens on (before its signal). */
  track(key: string, member: Member, sockets?: SocketTables): Tracked {
    const record = recordOf(member, takeDetails(this.ctx.procRoot, member));
    if (sockets) record.listening = sockets.listeningOf(member.identity.pid);
    const t = { record, identity: member.identity, alive: true, denied: false };
    this.tracked.set(key, t);
    return t;
  }

  /** Sends `signal` once per process (SIGCONT after a stopped one's TERM). False when gone. */
  deliver(t: Tracked, member: Member, signal: PhaseSignal): boolean {
    if (t.record.signals.includes(signal) || t.denied) return true;
    const outcome = this.sendTo(member, signal);
    if (outcome === 'gone') return false;
    if (outcome === 'denied') {
      t.denied = true;
      return true;
    }
    t.record.signals.push(signal);
    const stopped = member.stat.state === 'T' || member.stat.state === 't';
    if (signal === 'SIGTERM' && stopped && this.sendTo(member, 'SIGCONT') === 'sent') {
      t.record.signals.push('SIGCONT');
    }
    return true;
  }

  /** Through the member's pidfd, held since it became known; a fresh check without one. */
  sendTo(member: Member, signal: NodeJS.Signals) {
    const p = this.ctx.procRoot;
    return member.hold
      ? this.signaller.sendHeld(p, member.hold, signal)
      : this.signaller.send(p, member.identity, signal);
  }

  /** A phase begins: `signal` to each member, for up to `budgetMs`. */
  startPhase(signal: PhaseSignal, budgetMs: number): Phase {
    return { signal, startedAt: performance.now(), budgetMs, rounds: 0, empty: 0 };
  }

  /** A phase ends, by `endedBy`: its record for the report. */
  phaseDone(phase: Phase, endedBy: PhaseEnd): void {
    this.phases.push({
      signal: phase.signal,
      startedMs: phase.startedAt - this.started,
      durationMs: performance.now() - phase.startedAt,
      rounds: phase.rounds,
      endedBy,
    });
  }

  /**
   * The sweep ends with this phase, by `endedBy`: the report. Scans alone (two empty, or the
   * last one after the KILL budget) prove nothing while a helper is silent: unsettled.
   */
  end(phase: Phase, endedBy: PhaseEnd): SweepReport {
    this.phaseDone(phase, endedBy);
    if (this.silence && (endedBy === 'two-empty-scans' || endedBy === 'verified-empty')) this.unsettled();
    return this.report();
  }

  report(): SweepReport {
    this.releaseHolds(true);
    this.notices.absorbWarnings();
    // A helper lost with no cgroup: its orphans went to another reaper, out of every layer's
    // reach but the env tag's — the sweep cannot say it found everything.
    if (this.notices.has('HELPER_LOST') && !this.opts.cgroup) this.complete = false;
    const report = buildReport(this);
    const { stopped, survivors, unreadable, kept } = report;
    if (stopped.length || survivors.length || unreadable.length || kept.length) {
      this.notices.emit({
        type: 'delegate_background',
        phase: 'abandoned',
        tag: this.tag.name,
        stopped,
        survivors,
        unreadable,
        kept,
      });
    }
    return report;
  }
}

/** How long a failed sweep watches its held processes die after their KILL (`settleTracked`), ms. */
const SETTLE_MS = 500;
const SETTLE_POLL_MS = 10;
/** Rounds a sweep tries again after freeing fds (`failRound`). */
const FD_RETRIES = 20;

// True when `pid` names a process (kill(2) with signal 0: no fd, no signal); EPERM counts.
function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

function lastPhaseSignal(signals: string[]): 'SIGTERM' | 'SIGKILL' | undefined {
  for (let i = signals.length - 1; i >= 0; i--) {
    const s = signals[i];
    if (s === 'SIGTERM' || s === 'SIGKILL') return s;
  }
  return undefined;
}

// A member's uid and cmdline: read when it was held, from the held process (signal.ts), and
// taken off the hold; else (no pidfd, or held in an earlier sweep) read now.
function takeDetails(procRoot: string, m: Member): { uid?: number; cmdline?: string } {
  const details = m.hold?.details ?? readDetails(procRoot, m.identity.pid);
  if (m.hold) m.hold.details = undefined;
  return details;
}

// The report's record of a member found now: nothing signalled yet, alive.
function recordOf(m: Member, details: { uid?: number; cmdline?: string }): ProcessRecord {
  const record: ProcessRecord = {
    pid: m.identity.pid,
    startTime: m.identity.startTime,
    ppid: m.stat.ppid,
    uid: details.uid ?? null,
    comm: m.stat.comm,
    cmdline: details.cmdline ?? '',
    foundBy: m.foundBy,
    signals: [],
    endedBy: null,
  };
  if (m.via !== undefined) record.via = m.via;
  return record;
}
