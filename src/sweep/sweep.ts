// The sweep (ADR-127 §2–4; design.md §4). Read it like tini's loop:
//   scan → signal what is new → two empty scans? done → out of time? next phase → wait 50 ms.
// TERM phase up to the grace, then — unless TERM ended on two empty scans — KILL phase.
import { readlinkSync } from 'node:fs';
import { cgroupPids, killCgroup, type SessionCgroup } from '../containment/cgroup.js';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS, DEFAULT_SCAN_INTERVAL_MS } from '../options.js';
import { readDetails } from '../proc/details.js';
import { type Identity, identityKey } from '../proc/identity.js';
import { isFdExhaustion } from '../proc/read.js';
import { ancestorsOf, NoProcError, type Snapshot, takeSnapshot } from '../proc/snapshot.js';
import { parseTag, type SessionTag } from '../session/tag.js';
import type { EventListener, TetherEvent } from './events.js';
import {
  type PhaseEnd,
  type PhaseRecord,
  type ProcessRecord,
  type Proof,
  REPORT_VERSION,
  type SurvivorRecord,
  type SweepReport,
  type SweepWarning,
  type UnreadableRecord,
} from './report.js';
import { type Member, type Root, type ScanContext, type ScanResult, scanSession } from './scan.js';
import { createSignaller, type Hold, hasExited, releaseHold, type Signaller } from './signal.js';

/** Options of `sweep()` / `sweepSync()`. Durations in milliseconds. */
export interface SweepOptions {
  /** The session tag (or its name, validated as `TETHER_SESSION_<32 hex>`). */
  tag: SessionTag | string;
  /** Where procfs is mounted. Default `/proc`. */
  procRoot?: string;
  /** TERM phase budget. Default 5000. */
  graceMs?: number;
  /** KILL phase budget. Default 3000. */
  killAfterMs?: number;
  /** Pause between scans. Default 50. */
  intervalMs?: number;
  /** Session start in clock ticks since boot (see `ScanContext.notBefore`). */
  notBefore?: number;
  /** Earlier finds, shared by the sweeps of one session. */
  known?: Map<string, Member>;
  /** The session's own spawns: swept like the rest, never listed as stopped (ADR-127 §4). */
  spawns?: Identity[];
  /** Containment layers to name in the report. Default `['env-tag']`. */
  layers?: string[];
  /** Why a layer was not active (report `notes`). */
  notes?: string[];
  /** Warnings raised before the sweep (a helper that could not be used), reported with its own. */
  warnings?: SweepWarning[];
  /** Helpers and PID-namespace inits: never signalled, every descendant is the session's. */
  roots?: Root[];
  /** The session's cgroup: its processes are members; `cgroup.kill` in the KILL phase. */
  cgroup?: SessionCgroup;
  /**
   * Whether `roots` and `cgroup` hold every command of the session, so that their emptiness
   * proves the end (`populated-0`, `helper-childless`). False when some command ran without
   * the helper. Default true.
   */
  kernelProof?: boolean;
  /**
   * Asks the helpers whether any of them still has a child (the kernel's answer, waitid(2)):
   * true when none has (every subtree is gone), false when one has, undefined when unknown.
   */
  helpersChildless?: () => boolean | undefined;
  onEvent?: EventListener;
  /** Called after each round: for a progress line. */
  onProgress?: (progress: SweepProgress) => void;
  /** Identity-check mechanism; tests force `start-time-recheck`. Default: the best available. */
  signaller?: Signaller;
  /**
   * The caller knows it is not inside `cgroup` (it created it and never joined it): when the
   * process table cannot be read, `cgroup.kill` still runs. Without it a sweep that cannot
   * read /proc cannot tell whether the kill would reach itself, and does not write it.
   */
  outsideCgroup?: boolean;
}

// Sweeps ending together share each round's process-table walk, but a walk serves a round only
// if it shows the table as it was when that round became due, never earlier:
// - a sweep's first round is due when the sweep starts, on an event read in the current task
//   of the event loop (a command's end; one callback and the promise jobs it sets off): it
//   takes a walk made in this task, or a new one. (A walk from an earlier task showed a
//   daemon's copy still under its parent, which had exited before the command ended.)
// - a later round is due at the end of its pause: the pauses end on a shared 10 ms grid, and a
//   round takes any walk of this loop iteration made since its pause ended.
let turnSnapshot: Snapshot | undefined;
let walkedInThisTask = false;
const SHARED_GRID_MS = 10;
const gridWaiters = new Map<number, Array<(endedAt: number) => void>>();

/** `dueAt`: when a later round's pause ended (performance.now() ms); undefined for a first round. */
function sharedSnapshot(procRoot: string, dueAt: number | undefined): Snapshot {
  const last = turnSnapshot;
  if (last?.procRoot === procRoot && (dueAt === undefined ? walkedInThisTask : last.takenAt >= dueAt)) {
    return last;
  }
  const snapshot = takeSnapshot(procRoot);
  turnSnapshot = snapshot;
  walkedInThisTask = true;
  // A tick queued from a promise job runs once the job queue is drained: the end of the task.
  process.nextTick(() => {
    if (turnSnapshot === snapshot) walkedInThisTask = false;
  });
  setImmediate(() => {
    if (turnSnapshot === snapshot) turnSnapshot = undefined;
  });
  return snapshot;
}

// Waits at least `ms`, ending on the next multiple of SHARED_GRID_MS of the monotonic clock;
// resolves to the moment the pause ended (performance.now() ms).
function gridDelay(ms: number): Promise<number> {
  const slot = Math.ceil((performance.now() + ms) / SHARED_GRID_MS) * SHARED_GRID_MS;
  return new Promise((resolve) => {
    const waiters = gridWaiters.get(slot);
    if (waiters) {
      waiters.push(resolve);
      return;
    }
    gridWaiters.set(slot, [resolve]);
    setTimeout(
      () => {
        // The pause ended at the slot, or now if Node's timer fired a fraction of a
        // millisecond before it (its clock is rounded to milliseconds).
        const endedAt = Math.min(slot, performance.now());
        const all = gridWaiters.get(slot) ?? [];
        gridWaiters.delete(slot);
        for (const wake of all) wake(endedAt);
      },
      Math.max(0, slot - performance.now()),
    );
  });
}

/** Progress after a round: processes still alive, and ms since the phase's first signal. */
export interface SweepProgress {
  signal: 'SIGTERM' | 'SIGKILL';
  waiting: number;
  sinceSignalMs: number;
}

type PhaseSignal = 'SIGTERM' | 'SIGKILL';

interface Tracked {
  record: ProcessRecord;
  identity: Identity;
  alive: boolean;
  denied: boolean;
}

// State of one sweep: what has been found, signalled and seen gone.
class SweepRun {
  readonly started = performance.now();
  readonly startedAt = new Date().toISOString();
  readonly tracked = new Map<string, Tracked>();
  readonly unreadable = new Map<string, UnreadableRecord>();
  readonly warnings: SweepWarning[] = [];
  readonly phases: PhaseRecord[] = [];
  readonly spawnKeys: Set<string>;
  readonly ctx: ScanContext;
  readonly signaller: Signaller;
  /** The holds (pidfds) this sweep took on the members it found: released as they exit, and at its end. */
  holds: Hold[] = [];
  private warnedHold = false;
  /** Rounds take a shared walk when it is fresh enough (async sweeps: sharedSnapshot) or their own (sync). */
  shareSnapshots = false;
  /** When the current round's pause ended (performance.now() ms); undefined for the first round. */
  dueAt: number | undefined;
  scans = 0;
  scanMs = 0;
  /** Members the last scan saw alive in its snapshot, even if gone by the time of their signal. */
  seen = 0;
  /** The last scan's kernel proof of emptiness, if any (see `PhaseEnd`). */
  kernelProof: 'populated-0' | 'helper-childless' | undefined;
  absorbed = 0;
  readonly notes: string[] = [];
  /**
   * The sweeping process (or an ancestor) is itself in the cgroup — `tether sweep --tag` run
   * from inside the session: the cgroup still finds members, but no cgroup.kill (it would kill
   * the sweeper) and its `populated` proves nothing.
   */
  cgroupShared = false;
  complete = true;

  constructor(
    readonly tag: SessionTag,
    readonly opts: SweepOptions,
  ) {
    this.signaller = opts.signaller ?? createSignaller();
    this.spawnKeys = new Set((opts.spawns ?? []).map(identityKey));
    this.ctx = {
      procRoot: opts.procRoot ?? '/proc',
      entry: tag.entry,
      notBefore: opts.notBefore,
      excluded: new Set(),
      known: opts.known ?? new Map(),
      uid: process.getuid?.() ?? -1,
      roots: opts.roots ?? [],
      cgroup: opts.cgroup?.path,
      hold: (id) => this.hold(id),
    };
    this.absorbWarnings();
    if (this.signaller.mechanism !== 'pidfd') {
      this.warn(
        'NO_PIDFD',
        'pidfd_open is unavailable: identities are re-checked by start time before each signal (a narrow pid-reuse race remains)',
      );
    }
  }

  /** Holds a member found for the first time (scan.ts calls it); warns when no pidfd could be had. */
  hold(id: Identity): Hold {
    const h = this.signaller.hold(this.ctx.procRoot, id);
    if (h.fd >= 0) this.holds.push(h);
    else if (h.why !== 'gone' && h.why !== 'no-pidfd' && !this.warnedHold) {
      this.warnedHold = true;
      this.warn(
        'NO_PIDFD',
        `pidfd_open failed for pid ${id.pid} (${h.why}): such a process is re-checked by start time before each signal (a narrow pid-reuse race remains)`,
      );
    }
    return h;
  }

  /** Closes the pidfds of members that have exited; all of them with `all` (the sweep's end). */
  releaseHolds(all: boolean): void {
    this.holds = this.holds.filter((h) => {
      if (!all && !hasExited(h)) return true;
      releaseHold(h);
      return false;
    });
    // A known entry whose pidfd is closed can no longer be told from a process that takes its pid.
    if (all) for (const [key, m] of this.ctx.known) if (m.hold?.why === 'closed') this.ctx.known.delete(key);
  }

  /** Takes the caller's warnings not yet taken (a helper lost while the sweep ran, too). */
  absorbWarnings(): void {
    const given = this.opts.warnings ?? [];
    for (; this.absorbed < given.length; this.absorbed++) {
      // The caller's own object: a message it completes later (an errno Node reports on the
      // next tick) shows in the report.
      const w = given[this.absorbed] as SweepWarning;
      this.warnings.push(w);
      this.emit({ type: 'warning', tag: this.tag.name, code: w.code, message: w.message });
    }
  }

  warn(code: SweepWarning['code'], message: string): void {
    this.warnings.push({ code, message });
    this.emit({ type: 'warning', tag: this.tag.name, code, message });
  }

  /** Hands an event to `onEvent`; a listener that throws gets a `LISTENER_FAILED` warning. */
  emit(event: TetherEvent): void {
    const error = callListener(this.opts.onEvent, event);
    if (error !== undefined) this.listenerFailed('onEvent', error);
  }

  /** Hands a round's progress to `onProgress`; one that throws gets a `LISTENER_FAILED` warning. */
  progress(progress: SweepProgress): void {
    const error = callListener(this.opts.onProgress, progress);
    if (error !== undefined) this.listenerFailed('onProgress', error);
  }

  private readonly failedListeners = new Set<string>();

  // Once per listener: its later throws are as caught, not repeated in the report. Pushed, not
  // emitted: the event listener may be the one that throws.
  private listenerFailed(name: 'onEvent' | 'onProgress', error: unknown): void {
    if (this.failedListeners.has(name)) return;
    this.failedListeners.add(name);
    const why = error instanceof Error ? error.message : String(error);
    this.warnings.push({
      code: 'LISTENER_FAILED',
      message: `the ${name} listener threw (${why}): the sweep went on without it`,
    });
  }

  /** Excludes the supervisor and its ancestors. False when the process table cannot be read. */
  begin(): boolean {
    try {
      const self = Number(readlinkSync(`${this.ctx.procRoot}/self`));
      if (self !== process.pid) {
        // A procfs of another PID namespace: its pids are not ours to signal, and nothing read
        // there can be checked from here. Saying "nothing found" would be a lie.
        this.complete = false;
        this.warn(
          'PROC_NAMESPACE',
          `${this.ctx.procRoot} belongs to another PID namespace (it names this process ${self}, the kernel ${process.pid}): the sweep did not run; mount a procfs of this namespace`,
        );
        return false;
      }
      for (const pid of ancestorsOf(this.ctx.procRoot, process.pid)) this.ctx.excluded.add(pid);
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

  /** The last scan still saw members appear (and vanish before their signal): not settled. */
  unsettled(): void {
    this.complete = false;
    this.warn(
      'UNSETTLED',
      'processes of the session were still appearing when the KILL phase ended (a fork-and-exit loop outruns a scan): some may still run',
    );
  }

  fail(error: unknown): false {
    this.complete = false;
    if (error instanceof NoProcError) {
      this.warn(
        'NO_PROC',
        `the sweep cannot run: ${error.message}; processes of ${this.tag.name} were not looked for`,
      );
    } else {
      const why = (error as Error).message;
      this.warn(
        'SCAN_FAILED',
        isFdExhaustion(error) ? `the sweep stopped: no fd left (${why})` : `the sweep stopped: ${why}`,
      );
    }
    this.killCgroupBlind();
    return false;
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
      this.warn(
        'CGROUP_KILL_FAILED',
        `cgroup.kill of ${cgroup.path} failed (${killed}): its processes may still run`,
      );
    }
  }

  /** Set once the blind cgroup.kill was tried (true: written). */
  blindKill: boolean | undefined;
  /** `begin()` found this process and its ancestors outside the cgroup. */
  outside = false;

  /** One round: scan, signal every process not yet sent `signal`. Returns how many are alive, or -1. */
  round(signal: PhaseSignal): number {
    let scan: ScanResult;
    try {
      scan = scanSession(
        this.ctx,
        this.shareSnapshots ? sharedSnapshot(this.ctx.procRoot, this.dueAt) : takeSnapshot(this.ctx.procRoot),
      );
      this.seen = scan.members.length;
      this.kernelProof = undefined;
      if (this.seen === 0) this.weighKernelEvidence(scan);
      this.scans += 1;
      this.scanMs += scan.snapshot.durationMs;
      const alive = new Set<string>();
      for (const member of scan.members) {
        const key = identityKey(member.identity);
        const t = this.tracked.get(key) ?? this.track(key, member);
        if (this.deliver(t, member, signal)) alive.add(key);
      }
      // A fork racing the per-process KILLs is killed by the kernel with the rest (Linux 5.14).
      if (signal === 'SIGKILL' && this.opts.cgroup?.canKill && !this.cgroupShared) {
        const killed = killCgroup(this.opts.cgroup.path);
        if (killed !== true && !this.warnings.some((w) => w.code === 'CGROUP_KILL_FAILED')) {
          this.warn(
            'CGROUP_KILL_FAILED',
            `cgroup.kill of ${this.opts.cgroup.path} failed (${killed}): only the per-process signals were sent`,
          );
        }
      }
      this.resumeStoppedRoots(scan);
      this.releaseHolds(false);
      for (const [key, t] of this.tracked) {
        if (alive.has(key)) {
          t.alive = true; // seen again (a scan that missed it was wrong, not the process gone)
          t.record.endedBy = null;
        } else if (t.alive) {
          t.alive = false;
          t.record.endedBy = lastPhaseSignal(t.record.signals) ?? 'exited';
        }
      }
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
      return alive.size;
    } catch (error) {
      this.fail(error);
      return -1;
    }
  }

  /**
   * A walk that found nothing is checked against the kernel: a cgroup still `populated 1`, or
   * a helper that still has a child, means the session still runs (a fork-and-exit loop
   * outruns every walk) — the scan is not empty. Their emptiness proves the end (`PhaseEnd`).
   */
  weighKernelEvidence(scan: ScanResult): void {
    const populated = this.cgroupShared ? undefined : scan.populated;
    if (populated === true) {
      this.seen = 1;
      return;
    }
    const childless = this.opts.helpersChildless?.();
    if (childless === false) {
      this.seen = 1;
      return;
    }
    if (this.opts.kernelProof === false) return;
    if (populated === false) this.kernelProof = 'populated-0';
    else if (childless === true) this.kernelProof = 'helper-childless';
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

  track(key: string, member: Member): Tracked {
    const { pid, startTime } = member.identity;
    const details = readDetails(this.ctx.procRoot, pid);
    const record: ProcessRecord = {
      pid,
      startTime,
      ppid: member.stat.ppid,
      uid: details.uid ?? null,
      comm: member.stat.comm,
      cmdline: details.cmdline ?? '',
      foundBy: member.foundBy,
      signals: [],
      endedBy: null,
    };
    if (member.via !== undefined) record.via = member.via;
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

  phaseDone(signal: PhaseSignal, startedAt: number, rounds: number, endedBy: PhaseEnd): void {
    this.phases.push({
      signal,
      startedMs: startedAt - this.started,
      durationMs: performance.now() - startedAt,
      rounds,
      endedBy,
    });
  }

  report(): SweepReport {
    this.releaseHolds(true);
    this.absorbWarnings();
    // A helper lost with no cgroup: its orphans went to another reaper, out of every layer's
    // reach but the env tag's — the sweep cannot say it found everything.
    if (this.warnings.some((w) => w.code === 'HELPER_LOST') && !this.opts.cgroup) this.complete = false;
    const stopped: ProcessRecord[] = [];
    const survivors: SurvivorRecord[] = [];
    for (const [key, t] of this.tracked) {
      if (t.alive) survivors.push({ ...t.record, reason: t.denied ? 'denied' : 'survived-kill' });
      else if (!this.spawnKeys.has(key)) stopped.push(t.record);
    }
    const last = this.phases.at(-1);
    const ended = last?.endedBy;
    const proof: Proof =
      this.complete && ended !== undefined && ended !== 'budget' && ended !== 'scan-failed' ? ended : 'none';
    const report: SweepReport = {
      version: REPORT_VERSION,
      tag: this.tag.name,
      complete: this.complete,
      ok: this.complete && survivors.length === 0,
      layers: this.opts.layers ?? ['env-tag'],
      notes: [...(this.opts.notes ?? []), ...this.notes],
      cgroup: this.opts.cgroup?.path ?? null,
      signalling: this.signaller.mechanism,
      proof,
      stopped,
      survivors,
      unreadable: [...this.unreadable.values()],
      warnings: this.warnings,
      phases: this.phases,
      timings: {
        startedAt: this.startedAt,
        durationMs: performance.now() - this.started,
        scans: this.scans,
        scanMs: this.scanMs,
      },
    };
    if (stopped.length || survivors.length || report.unreadable.length) {
      this.emit({
        type: 'delegate_background',
        phase: 'abandoned',
        tag: this.tag.name,
        stopped,
        survivors,
        unreadable: report.unreadable,
      });
    }
    return report;
  }
}

function lastPhaseSignal(signals: string[]): 'SIGTERM' | 'SIGKILL' | undefined {
  for (let i = signals.length - 1; i >= 0; i--) {
    const s = signals[i];
    if (s === 'SIGTERM' || s === 'SIGKILL') return s;
  }
  return undefined;
}

// Calls a caller's listener; returns what it threw (a listener's exception must not stop a sweep).
function callListener<T>(listener: ((value: T) => void) | undefined, value: T): unknown {
  try {
    listener?.(value);
    return undefined;
  } catch (error) {
    return error ?? new Error(String(error));
  }
}

// The algorithm, once: yields each pause (ms) so that async and sync drivers share it.
function* steps(
  opts: SweepOptions,
  shareSnapshots: boolean,
): Generator<number, SweepReport, number | undefined> {
  const tag = typeof opts.tag === 'string' ? parseTag(opts.tag) : opts.tag;
  const budgets: Record<PhaseSignal, number> = {
    SIGTERM: checkMs('graceMs', opts.graceMs ?? DEFAULT_GRACE_MS),
    SIGKILL: checkMs('killAfterMs', opts.killAfterMs ?? DEFAULT_KILL_AFTER_MS),
  };
  const interval = checkMs('intervalMs', opts.intervalMs ?? DEFAULT_SCAN_INTERVAL_MS, 1);
  const run = new SweepRun(tag, opts);
  run.shareSnapshots = shareSnapshots;
  if (!run.begin()) return run.report();
  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    const phaseStart = performance.now();
    let rounds = 0;
    let empty = 0;
    for (;;) {
      const alive = run.round(signal);
      rounds += 1;
      if (alive < 0) {
        run.phaseDone(signal, phaseStart, rounds, 'scan-failed');
        return run.report();
      }
      run.progress({ signal, waiting: alive, sinceSignalMs: performance.now() - phaseStart });
      // A scan is empty only if it saw no member at all: one that was there and gone by its
      // signal (a fork-and-exit loop) is evidence the session still runs.
      empty = run.seen === 0 ? empty + 1 : 0;
      // With a helper or a cgroup, one empty scan and the kernel's word suffice: a process
      // mid-exec (no readable environ) is still a descendant of the helper and in the cgroup.
      if (run.seen === 0 && run.kernelProof) {
        run.phaseDone(signal, phaseStart, rounds, run.kernelProof);
        return run.report();
      }
      if (empty >= 2) {
        run.phaseDone(signal, phaseStart, rounds, 'two-empty-scans');
        return run.report();
      }
      if (performance.now() - phaseStart >= budgets[signal]) break;
      run.dueAt = yield interval;
    }
    if (signal === 'SIGKILL') {
      // A process first found in the last round got its KILL a moment ago: look once more
      // before naming anything a survivor.
      run.dueAt = yield interval;
      const left = run.round(signal);
      rounds += 1;
      if (left === 0 && run.seen > 0) {
        run.unsettled();
      } else if (left === 0) {
        run.phaseDone(signal, phaseStart, rounds, 'verified-empty');
        return run.report();
      }
    }
    run.phaseDone(signal, phaseStart, rounds, 'budget');
  }
  return run.report();
}

/**
 * Sweeps a session: finds its processes (carriers of the tag, earlier finds by identity, their
 * descendants), sends TERM once to each, rescans every `intervalMs`, then KILL the same way
 * unless the TERM phase ended on two empty scans (ADR-127 §2–4). Never signals pid ≤ 1, the
 * calling process or its ancestors. Resolves to a `SweepReport`; it does not reject for what it
 * could not do (that is in `warnings`, `complete` and `survivors`). Throws `TetherError`
 * `INVALID_OPTION` / `INVALID_TAG` synchronously on bad options.
 */
export function sweep(options: SweepOptions): Promise<SweepReport> {
  const it = steps(options, true);
  const first = it.next(); // validates options and runs the first round now
  return (async () => {
    let s = first;
    while (!s.done) s = it.next(await gridDelay(s.value));
    return s.value;
  })();
}

/**
 * The same sweep, blocking the thread between scans (Atomics.wait). For exit paths where the
 * event loop no longer runs: `process.on('exit')`, after an uncaught exception.
 */
export function sweepSync(options: SweepOptions): SweepReport {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const it = steps(options, false);
  for (let s = it.next(); ; s = it.next()) {
    if (s.done) return s.value;
    Atomics.wait(cell, 0, 0, s.value);
  }
}
