// Holding a found process: after its pidfd was opened (src/sweep/signal.ts owns holds), the
// evidence that made it a member is read again — so from the held process, not from one that
// took its pid between the walk and the hold — and then its report details. All of a scan's new
// members in one native call when the native library is there (`tp_hold_batch`, native/scan.c);
// else the JS reads below, per member, in the same order and by the same rules.
import { CMDLINE_CAP_BYTES, cmdlineText, type Details } from './details.js';
import { type EnvironRead, readEnviron } from './environ.js';
import { type Identity, isAliveStat, readStat } from './identity.js';
import {
  type Evidence,
  type HoldRequest,
  type NativeHold,
  nativeProc,
  type PreHeld,
  type PreSignal,
} from './native.js';
import type { ProcStat } from './stat.js';

export type { Evidence, HoldRequest, PreSignal } from './native.js';

/**
 * A hold taken in a native call: `held` (the pidfd, the caller's to close, and the details
 * read through it), `gone` (exited, reused, or the evidence no longer holds), `no-pidfd`
 * (pidfd_open(2) failed with `errno`, not ESRCH: the fd limit…).
 */
export type HeldProcess =
  | { kind: 'held'; fd: number; details: Details }
  | { kind: 'gone' }
  | { kind: 'no-pidfd'; errno: number };

/**
 * Each of `requests` held and checked, all in one native call (`tp_hold_batch`), one result
 * per request in order: pidfd_open(2); the same start time and alive (`isAliveStat`); the
 * evidence still true; the fd not readable (no exit since the open); then the details — the
 * real uid from ioctl(PIDFD_GET_INFO) (Linux 6.13; status `Uid:` before) and cmdline, capped
 * as `readCmdline`. Null when the native library is not loaded (the caller takes the JS path:
 * its pidfd_open, then `sameProcessAs`, `evidenceHolds`, `readDetails`, per member). Carriers
 * of one batch carry one entry (a scan's). Throws what those reads throw (an Error with
 * `code`: EMFILE…), every pidfd of the call closed.
 */
export function holdAllNative(procRoot: string, requests: readonly HoldRequest[]): HeldProcess[] | null {
  const native = nativeProc();
  if (!native) return null;
  return native.holdAll(procRoot, requests, CMDLINE_CAP_BYTES + 1).map(heldProcess);
}

/** A candidate carrier read through its pidfd (`preholdNative`). */
export interface PreHeldProcess {
  /** Its environ, read after the pidfd was opened and its start time checked (`gone` else). */
  read: EnvironRead;
  /** `held` when `read` carries the entry and it had not exited since; else `gone` or `no-pidfd`. */
  hold: HeldProcess;
  /** The parent its stat showed, read after the pidfd was opened (-1: not read). */
  ppid: number;
  /** With a signal asked for: its result (`NativeProc.sendHeld`'s), when it was sent. */
  sent?: number;
}

/**
 * The one failure of a prehold (`preholdNative`) that is not a plain read error: a read failed
 * after the call had signalled a carrier. `held`: the candidates read before the failure (their
 * pidfds open, the caller's, so that it can still say what it signalled); `cause`: the read's
 * error (an Error with `code`: EMFILE…).
 */
export class PreholdFailure extends Error {
  constructor(
    readonly held: PreHeldProcess[],
    cause: Error,
  ) {
    super(cause.message, { cause });
  }
}

/**
 * The environs of a scan's candidate carriers, each read from the process its pidfd names, in
 * one native call (`tp_prehold`): pidfd_open(2); the same start time and alive; the environ
 * read — the read that decides membership — and, when it holds `entry`, the fd not readable
 * (no exit since) and the details, as `holdAllNative`; else the fd closed. So a carrier's
 * environ is read once, and from the held process. With `signal`, each carrier held whose
 * `may[i]` is set is sent `signal.number` through its pidfd as soon as its details are read
 * (`sent`), while the call goes on. Null when the native library is not loaded. Throws what the
 * reads throw (EMFILE…), every pidfd of the call closed — but `PreholdFailure` once a signal
 * was sent.
 */
export function preholdNative(
  procRoot: string,
  candidates: readonly ProcStat[],
  entry: string,
  signal?: PreSignal,
): PreHeldProcess[] | null {
  const native = nativeProc();
  if (!native) return null;
  const { held, failure } = native.prehold(procRoot, candidates, entry, CMDLINE_CAP_BYTES + 1, signal);
  const read = held.map(preHeldProcess);
  if (failure) throw new PreholdFailure(read, failure);
  return read;
}

function preHeldProcess(r: PreHeld): PreHeldProcess {
  const p: PreHeldProcess = { read: r.read, hold: heldProcess(r.hold), ppid: r.ppid };
  if (r.sent !== undefined) p.sent = r.sent;
  return p;
}

function heldProcess(r: NativeHold): HeldProcess {
  return r.kind === 'held'
    ? { kind: 'held', fd: r.fd, details: { uid: r.uid, cmdline: cmdlineText(r.cmdline, r.text) } }
    : r;
}

/**
 * The JS path's identity check of a pid just opened as a pidfd: the same start time, alive
 * (a zombie leader with live threads is). Throws a read's error other than gone/denied.
 */
export function sameProcessAs(procRoot: string, id: Identity): boolean {
  const stat = readStat(procRoot, id.pid);
  return stat !== undefined && stat.startTime === id.startTime && isAliveStat(procRoot, stat);
}

/** The JS path's re-read of `evidence` for `id` (a carrier's environ, a descendant's ppid). */
export function evidenceHolds(procRoot: string, id: Identity, evidence: Evidence): boolean {
  if (evidence.kind === 'carrier') {
    const r = readEnviron(procRoot, id.pid, evidence.leaderExited);
    return r.kind === 'ok' && r.entries.includes(evidence.entry);
  }
  if (evidence.kind === 'parent') return readStat(procRoot, id.pid)?.ppid === evidence.ppid;
  return true;
}
