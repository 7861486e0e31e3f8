// The sweep report: what was stopped, what survived, what could not be inspected (docs/report.md).
import type { ListeningSocket } from '../proc/sockets.js';
import type { SignalMechanism } from './signal.js';

/**
 * Which layer first found a process, the env tag's first: `carrier` (its environ holds the tag)
 * or `descendant` (of a carrier, by parent); `subreaper` (a descendant of the helper the env tag
 * did not find); `cgroup` (in the session's cgroup, found by neither); `given` (named by the
 * caller, `SweepOptions.members`: the guard's targets).
 */
export type FoundBy = 'carrier' | 'descendant' | 'subreaper' | 'cgroup' | 'given';

/** Version of the JSON shape below; bumped on any incompatible change. */
export const REPORT_VERSION = 1;

/**
 * What a sweep by the env tag alone cannot see (`blindSpots`): it finds carriers and their
 * descendants by parent, so a process whose environment was cleared and whose parent is gone
 * escapes it (docs/sweep.md, "What escapes this"). Said by every sweep with no helper, cgroup or
 * PID namespace beside the env tag: local (`containment: ['env-tag']`, `NO_HELPER`, `tether
 * sweep --tag`) and in a sandbox.
 */
export const ENV_TAG_BLIND_SPOT =
  'env-cleared processes are invisible to the env tag: a process started with a cleared environment (env -i) whose parent is gone (a double fork) is not found, and runs on';

/**
 * What no layer can see when the command runs with CAP_SYS_ADMIN (`blindSpots`; root, in most
 * containers too): a privileged process can leave every layer without a trace the sweep reads,
 * so `complete` and the proof speak only of what stayed within them (docs/containment.md, "What
 * escapes this", names the ways: another PID namespace, another cgroup, a process outside the
 * session). Said by a session's sweep whose commands started with that capability
 * (src/sweep/privilege.ts); one short line, as it is printed on every report of a root run.
 */
export const PRIVILEGED_BLIND_SPOT =
  'a privileged payload is beyond any proof: with CAP_SYS_ADMIN (root) it can leave every layer unseen, so the proof covers only what stayed (docs/containment.md)';

/** A process named in a report. `startTime` is in clock ticks since boot (field 22 of stat). */
export interface ProcessRecord {
  pid: number;
  startTime: number;
  ppid: number;
  uid: number | null;
  comm: string;
  /** At most 4 KiB of /proc/<pid>/cmdline, NULs as spaces; a longer one ends in `…` (docs/report.md). */
  cmdline: string;
  foundBy: FoundBy;
  /** For a descendant: the parent pid through which it was found. */
  via?: number;
  /** Signals sent, in order (a stopped process gets SIGCONT right after its SIGTERM). */
  signals: string[];
  /**
   * What ended it: the last signal sent before it was seen gone, or `exited` when it was gone
   * before any signal reached it. Null while alive (survivors).
   */
  endedBy: 'SIGTERM' | 'SIGKILL' | 'exited' | null;
  /**
   * The TCP sockets it listened on when first found, before any signal: present only when the
   * sweep was asked to read them (`collectPorts`); [] when it held none.
   */
  listening?: ListeningSocket[];
}

/** A survivor: still alive when the KILL phase ended. */
export interface SurvivorRecord extends ProcessRecord {
  /** `denied` (EPERM: another uid, no CAP_KILL) or `survived-kill` (still there after SIGKILL). */
  reason: 'denied' | 'survived-kill';
}

/**
 * A process left running because a `keep` rule declared it a service (docs/sweep.md, "Kept
 * processes"): one whose cmdline matched `match`, or a descendant of one (`keptWith`), never
 * signalled. `expiresAt` is in milliseconds since the epoch: when it was first kept, plus the
 * rule's `ttlMs` (after it, `tether recover` may end it: docs/ledger.md).
 */
export interface KeptRecord extends ProcessRecord {
  /** The glob of the rule that kept it (for a descendant: its kept ancestor's). */
  match: string;
  /** The rule's owner. */
  owner: string;
  /** Ms since the epoch: first kept + `ttlMs`. */
  expiresAt: number;
  /** For a descendant kept with a matching process: that process's pid. */
  keptWith?: number;
}

/**
 * Why an environ could not be decided: `denied` (EACCES/EPERM: a non-dumpable process) or
 * `oversized` (larger than `ENVIRON_BYTE_BUDGET`, 6 MiB, or slower than `ENVIRON_TIME_BUDGET_MS`,
 * with no session entry in what was read: src/proc/environ.ts).
 */
export type UnreadableReason = 'denied' | 'oversized';

/**
 * A process left running because its environ could not be decided, started since the session
 * began: `denied` ones of our uid only, `oversized` ones of any uid (docs/sweep.md).
 */
export interface UnreadableRecord {
  pid: number;
  startTime: number;
  uid: number | null;
  comm: string;
  /** At most 4 KiB of /proc/<pid>/cmdline; a longer one ends in `…` (docs/report.md). */
  cmdline: string;
  reason: UnreadableReason;
}

/**
 * Something the sweep could not do. Codes: `NO_PROC` (no readable procfs: the sweep did not
 * run), `PROC_NAMESPACE` (the procfs is another PID namespace's: the sweep did not run),
 * `SCAN_FAILED` (a scan threw), `UNSETTLED` (members still appearing at the end, or a helper
 * that did not answer whether it has a child left), `NO_PIDFD`
 * (identity checks fall back to a start-time re-check), `NO_HELPER` (the subreaper helper could
 * not be used: only the env tag, and the cgroup if any, found processes), `HELPER_LOST` (a
 * helper ended before its payload was reported: the payload's status is unknown), `COARSE_SLEEP`
 * (sandbox: the target's `sleep` has no fractions, scans are 1 s apart), `LISTENER_FAILED` (an
 * `onEvent` or `onProgress` listener threw: caught, once per listener, the sweep went on),
 * `CGROUP_KILL_FAILED` (writing the session cgroup's `cgroup.kill` failed: the errno is named),
 * `HELPER_SWEPT` (the sweep could not run, so each helper was left to end its own subtree — its
 * dead man's switch — instead of being released; the message says whether the helpers exited and
 * the cgroup is gone), `HELPER_FAULT` (a system call failed in a helper: the call, the errno
 * and what the helper did instead are named; docs/containment.md, "What each errno means"),
 * `KEPT_IN_CGROUP` (a kept process could not be moved out of the session cgroup: no cgroup.kill
 * and no `populated` proof in that sweep; docs/sweep.md, "Kept processes"),
 * `LEDGER_WRITE_FAILED` (the session's ledger refused a write: its begin, so it is not recorded,
 * or its end, so it stays `running` until `tether recover`; the ledger and its error are named),
 * `HELPER_STOPPED` (a helper was stopped when the session released it: it was sent SIGCONT, and
 * SIGKILL if it had not exited within 1 s; its pid is named).
 */
export interface SweepWarning {
  code:
    | 'NO_PROC'
    | 'PROC_NAMESPACE'
    | 'SCAN_FAILED'
    | 'UNSETTLED'
    | 'NO_PIDFD'
    | 'NO_HELPER'
    | 'HELPER_LOST'
    | 'COARSE_SLEEP'
    | 'LISTENER_FAILED'
    | 'CGROUP_KILL_FAILED'
    | 'HELPER_SWEPT'
    | 'HELPER_FAULT'
    | 'KEPT_IN_CGROUP'
    | 'LEDGER_WRITE_FAILED'
    | 'HELPER_STOPPED';
  message: string;
}

/**
 * How a phase ended: two empty scans in a row; a scan found nothing and the kernel proved it —
 * `populated-0` (the session's cgroup.events says `populated 0`) or `helper-childless` (every
 * helper says, from waitid(2), it has no child left: nothing of its subtree remains); its time budget
 * ran out; (KILL phase) its budget ran out but one more scan, an interval later, found nothing
 * alive; a scan failed.
 */
export type PhaseEnd =
  | 'two-empty-scans'
  | 'populated-0'
  | 'helper-childless'
  | 'budget'
  | 'verified-empty'
  | 'scan-failed';

/** What proved a sweep's end (see `PhaseEnd`), or `none`. */
export type Proof = 'two-empty-scans' | 'populated-0' | 'helper-childless' | 'verified-empty' | 'none';

/** One phase: `startedMs` is relative to the sweep's start; all durations in milliseconds. */
export interface PhaseRecord {
  signal: 'SIGTERM' | 'SIGKILL';
  startedMs: number;
  durationMs: number;
  rounds: number;
  endedBy: PhaseEnd;
}

/** The whole report (JSON-serialisable). */
export interface SweepReport {
  version: typeof REPORT_VERSION;
  tag: string;
  /** False when the sweep could not run or finish (see `warnings`): nothing it says is complete. */
  complete: boolean;
  /** True when complete and no survivor: every process found is gone, or kept (`kept`). */
  ok: boolean;
  /** Containment layers that were active: `env-tag`, `subreaper`, `cgroup`, `pid-namespace`. */
  layers: string[];
  /** Why a layer asked for (or tried by `auto`) was not active, e.g. a cgroup not writable. */
  notes: string[];
  /** The session's cgroup directory, when that layer was active. */
  cgroup: string | null;
  /** The identity check used before every signal. */
  signalling: SignalMechanism;
  /**
   * What proved the end: `two-empty-scans`; `populated-0` or `helper-childless` (one empty scan
   * and the kernel's word); `verified-empty` (the KILL budget ran out, and one last scan found
   * nothing alive); or `none` (something survived, or the sweep did not run).
   */
  proof: Proof;
  /** Sandbox sweeps only (docs/sandbox.md): how environs were read, `grep -z` or `tr`. */
  environReader?: 'grep-z' | 'tr';
  stopped: ProcessRecord[];
  survivors: SurvivorRecord[];
  /**
   * Processes left running because a `keep` rule declared them (with their descendants); always
   * present, empty without `keep`. They are no survivors: a sweep whose only processes left are
   * kept is complete and `ok`.
   */
  kept: KeptRecord[];
  unreadable: UnreadableRecord[];
  /**
   * What the layers used could not see, in sentences: set where a whole kind of process escapes
   * them (the sandbox sweep, env tag alone: "env-cleared processes are invisible to the env
   * tag…"; a command run with CAP_SYS_ADMIN: PRIVILEGED_BLIND_SPOT; in a sandbox, what the
   * end line and the sweep's answer rest on). `complete` and `proof` keep their meaning within
   * what the layers see. A report with blind spots never says "nothing left running". Absent:
   * none named.
   */
  blindSpots?: string[];
  warnings: SweepWarning[];
  phases: PhaseRecord[];
  timings: {
    /** ISO-8601 wall-clock time the sweep began. */
    startedAt: string;
    durationMs: number;
    scans: number;
    /** Sum of the scans' process-table walks (the stat reads; environ reads not included), ms. */
    scanMs: number;
  };
}

// A TetherError's `report` is a SweepReport: errors.ts sits below this layer and cannot name it.
declare module '../errors.js' {
  interface TetherError {
    readonly report?: SweepReport;
  }
  interface TetherErrorFields {
    report?: SweepReport;
  }
}
