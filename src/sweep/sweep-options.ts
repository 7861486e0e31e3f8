// What a sweep is given (`SweepOptions`) and what it tells after each round (`SweepProgress`).
import type { SessionCgroup } from '../proc/cgroup.js';
import type { Identity } from '../proc/identity.js';
import type { SessionTag } from '../proc/tag.js';
import type { EventListener } from './events.js';
import type { KeepRule } from './keep.js';
import type { SweepWarning } from './report.js';
import type { Member, Root } from './scan.js';
import type { Signaller } from './signal.js';

/** Options of `sweep()` / `sweepSync()`. Durations in milliseconds. */
export interface SweepOptions {
  /** The session tag (or its name, validated as `TETHER_SESSION_<32 hex>`). */
  tag: SessionTag | string;
  /** Where procfs is mounted. Default `/proc`. */
  procRoot?: string;
  /** TERM phase budget. Default 5000. */
  graceMs?: number;
  /**
   * When the caller's own stop signal went to the session's command (`performance.now()` ms):
   * the TERM phase's budget counts from then, so the command and what it left share one grace
   * (`tether run`'s timeout, docs/cli.md#tether-run) instead of a second grace from scratch. A
   * sweep begun after that grace ran out sends TERM and goes on to KILL at once. Default: the
   * grace counts from the sweep's first TERM.
   */
  graceStartedAt?: number;
  /**
   * Aborted (before or during the sweep): the TERM phase's grace is spent from then on — the
   * round under way still sends TERM to what it finds, and the next goes on to KILL. `tether run`
   * aborts it at a second ending signal (Ctrl-C twice), also when the sweep had already begun
   * because the command had exited.
   */
  hurry?: AbortSignal;
  /** KILL phase budget. Default 3000. */
  killAfterMs?: number;
  /** Pause between scans. Default 50. */
  intervalMs?: number;
  /** Session start in clock ticks since boot (see `ScanContext.notBefore`). */
  notBefore?: number;
  /** Earlier finds, shared by the sweeps of one session. */
  known?: Map<string, Member>;
  /** The session's own spawns: swept like the rest, never listed as stopped (decisions.md D7). */
  spawns?: Identity[];
  /** Containment layers to name in the report. Default `['env-tag']`. */
  layers?: string[];
  /** Why a layer was not active (report `notes`). */
  notes?: string[];
  /**
   * What the caller knows the layers cannot see in this session (PRIVILEGED_BLIND_SPOT: its
   * commands ran with CAP_SYS_ADMIN), said in the report's `blindSpots` after the layers' own.
   */
  blindSpots?: readonly string[];
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
   * Asks the helpers whether any of them still has a child other than the `kept` processes (the
   * ones alive that this sweep keeps, by identity): the kernel's answer, waitid(2) and the
   * helper's children list. See `HelpersAnswer`.
   */
  helpersChildless?: (kept: readonly Identity[]) => HelpersAnswer;
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
  /**
   * The processes to stop, given by identity (pid + start time), instead of the carriers of
   * `tag`: the guard's targets (docs/guard.md). Each is held by its pidfd when the sweep begins
   * (its start time re-checked; one already gone is skipped) and tracked with its descendants,
   * found as `given`; no environ is read for the tag, which then only names the sweep in its
   * events and report.
   */
  members?: Identity[];
  /**
   * Pids never taken as members, and never passed through to their descendants: the guard's
   * spared processes. (A pid, not an identity: a spared pid reused during the sweep is spared too.)
   */
  spare?: Iterable<number>;
  /**
   * Reads, at each process's first sight and before its first signal, the TCP ports it listens
   * on (src/proc/sockets.ts) into its record's `listening`: what was serving is known after it
   * is gone. Default false (it costs a readlink per open fd of each process found).
   */
  collectPorts?: boolean;
  /**
   * Declared services (docs/sweep.md, "Kept processes"): a member whose cmdline matches one of
   * these globs, and every descendant of it, is never signalled and is reported in `kept`. The
   * session's own spawns are never kept. Checked by `compileKeep` (`INVALID_OPTION`).
   */
  keep?: readonly KeepRule[];
}

/** Every key `sweep()` and `sweepSync()` take; any other is refused by name (`INVALID_OPTION`). */
export const SWEEP_KEYS = [
  'tag',
  'procRoot',
  'graceMs',
  'graceStartedAt',
  'hurry',
  'killAfterMs',
  'intervalMs',
  'notBefore',
  'known',
  'spawns',
  'layers',
  'notes',
  'blindSpots',
  'warnings',
  'roots',
  'cgroup',
  'kernelProof',
  'helpersChildless',
  'onEvent',
  'onProgress',
  'signaller',
  'outsideCgroup',
  'members',
  'spare',
  'collectPorts',
  'keep',
] as const satisfies readonly (keyof SweepOptions)[];

// Every key of SweepOptions is listed above: a key added there and not here is a compile error
// naming it.
type UnlistedSweepKey = Exclude<keyof SweepOptions, (typeof SWEEP_KEYS)[number]>;
export const SWEEP_KEYS_COMPLETE: [UnlistedSweepKey] extends [never] ? true : UnlistedSweepKey = true;

/**
 * What the helpers say of their subtrees (`SweepOptions.helpersChildless`): `childless` (none has
 * a child but kept ones: every subtree is gone), `child` (one still has another child: the
 * session still runs), `cannot-tell` (none can say by design — a PID namespace's init is always
 * its helper's child — or no helper ran), or `silent`: a helper that should answer did not, even
 * after a SIGCONT and a second ask (`why` names it and how; `alive`: it still runs — stopped,
 * or slow — so the next round asks again; false when it is gone). Silence is never "no child".
 */
export type HelpersAnswer =
  | { kind: 'childless' }
  | { kind: 'child' }
  | { kind: 'cannot-tell' }
  | { kind: 'silent'; why: string; alive: boolean };

/**
 * Progress after a round: processes still alive (`waiting`), how many of them are the session's
 * own spawns (`spawns`: its commands, never listed as stopped), ms since the phase's first signal,
 * and the phase's budget in ms (the TERM phase's is what is left of the grace).
 */
export interface SweepProgress {
  signal: 'SIGTERM' | 'SIGKILL';
  waiting: number;
  spawns: number;
  sinceSignalMs: number;
  budgetMs: number;
}

/** The signal of a phase: TERM up to the grace, then KILL. */
export type PhaseSignal = 'SIGTERM' | 'SIGKILL';
