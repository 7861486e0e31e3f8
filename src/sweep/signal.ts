// Signals sent only to a process whose identity was checked right before (decisions.md D5).
// With a pidfd the check is race-free: pidfd_open(2), verify the start time, then
// pidfd_send_signal(2) to the very process the fd names. Without one (no koffi, a kernel
// before 5.3), the start time is re-checked and then kill(2) is used: a narrow race remains.
//
// A process the session knows is *held* (`Hold`): its pidfd is opened once, when it becomes
// known, and kept while it is tracked. The fd names that process and no other for as long as it
// is open, even after its pid is reused; it becomes readable (poll(2)) when the process exits
// (docs/sweep.md, "Identity checks").
import { closeSync } from 'node:fs';
import { constants } from 'node:os';
import { errnoName, libc, libcFailedForFds, POLLIN, POLLNVAL, pollOne } from '../libc.js';
import { type Details, readDetails } from '../proc/details.js';
import type { EnvironRead } from '../proc/environ.js';
import {
  type Evidence,
  evidenceHolds,
  type HoldRequest,
  holdAllNative,
  type PreHeldProcess,
  PreholdFailure,
  preholdNative,
  sameProcessAs as sameProcess,
} from '../proc/hold.js';
import type { Identity } from '../proc/identity.js';
import { type NativeProc, nativeProc } from '../proc/native.js';
import type { ProcStat } from '../proc/stat.js';

export type { Evidence, HoldRequest } from '../proc/hold.js';

/**
 * - `sent`: the signal was delivered to the identified process;
 * - `gone`: the process no longer exists (ESRCH, a new start time, a dead zombie);
 * - `denied`: EPERM — the process belongs to another uid and we lack CAP_KILL.
 */
export type SignalOutcome = 'sent' | 'gone' | 'denied';

/** How identity checks are made race-free: `pidfd`, or the weaker `start-time-recheck`. */
export type SignalMechanism = 'pidfd' | 'start-time-recheck';

/**
 * A process held from the moment it became known. `fd` is its pidfd, or -1 when none is held;
 * then `why` says why: `gone` (it had exited, or its pid named another process, when the hold
 * was taken), `closed` (released), `no-pidfd` (this machine has no pidfd: koffi or the kernel),
 * or the errno name of the failed pidfd_open(2) (`EMFILE`, `ENFILE`…: the fd limit).
 */
export interface Hold {
  readonly identity: Identity;
  fd: number;
  why?: string;
  /**
   * A found member's report details, read right after it was held (`hold` with evidence): the
   * report shows these, read from the held process. The tracker takes them (and clears them).
   */
  details?: Details;
  /**
   * A signal already sent through this pidfd as the hold was taken (`holdCandidates` with a
   * signal: `signal` its number, `result` as tp_send_held's), not yet taken by `sendHeld`: the
   * next `sendHeld` of that signal returns its outcome instead of sending it again.
   */
  sent?: { signal: number; result: number };
}

/** A candidate carrier read through its pidfd (`Signaller.holdCandidates`). */
export interface HeldCandidate {
  read: EnvironRead;
  hold?: Hold;
  ppid: number;
}

/** The signal `holdCandidates` sends each carrier it holds whose `may[i]` is set, as it holds it. */
export interface CandidateSignal {
  signal: NodeJS.Signals;
  may: readonly boolean[];
}

/**
 * `holdCandidates` failed (a read: EMFILE…) after it had signalled: the candidates read before
 * the failure (`held`, in order; their holds the caller's, to report and release), the error in
 * `cause`.
 */
export class CandidatesSignalledError extends Error {
  constructor(
    readonly held: HeldCandidate[],
    cause: unknown,
  ) {
    super((cause as Error).message, { cause });
  }
}

// Sends a signal to one identified process.
export interface Signaller {
  mechanism: SignalMechanism;
  /** Never signals pid ≤ 1: throws a RangeError for one (a caller bug, never a decision). */
  send(procRoot: string, id: Identity, signal: NodeJS.Signals | number): SignalOutcome;
  /**
   * Holds `id`: pidfd_open(2), then the start time re-checked in `<procRoot>/<pid>/stat` (the fd
   * was opened first: if it still matches, the fd names that process). With `evidence` (a found
   * member, src/sweep/scan.ts), then also: the evidence re-read (`evidenceHolds`), the fd not yet
   * readable (no exit since), and the report details read into `details` — in one native call
   * when the native library is loaded (`holdAllNative`). Never throws for the process's state (a
   * `gone` hold, or a fallback hold with fd -1 and the errno); throws a RangeError for pid ≤ 1,
   * and what a read throws (EMFILE…). Each hold with `fd >= 0` costs one fd until `releaseHold`.
   */
  hold(procRoot: string, id: Identity, evidence?: Evidence): Hold;
  /**
   * `hold` with evidence for each of `requests` (one scan's new members; their carriers carry
   * one entry), one hold per request in order — all in one native call when the native library
   * is loaded. Throws as `hold` does; then no hold of the call is kept (their fds are closed).
   */
  holdAll(procRoot: string, requests: readonly HoldRequest[]): Hold[];
  /**
   * Reads the environ of each of `candidates` (a scan's candidate carriers of `entry`) from the
   * process its pidfd names, and holds those that carry `entry` — so that the read deciding
   * membership is the held process's, and made once (`preholdNative`). Per candidate, in order:
   * `read` (`gone` when the process the walk saw is gone); `hold` only for a carrier of `entry`:
   * held with its details, or `gone` (it exited since); none when pidfd_open failed (EMFILE: a
   * carrier is then held, or not, as any new member); `ppid` as re-read after the open (-1
   * unread). Null when this cannot be done in one native call (the caller reads the environs
   * and holds its members apart). With `signal`: each carrier held whose `may[i]` is set is sent
   * `signal.signal` through its pidfd right after its details were read — its teardown starts
   * while the batch goes on — and its outcome is kept on the hold (`Hold.sent`) for `sendHeld`
   * to return. Throws what a read throws (EMFILE…), no hold of it kept — but once a signal was
   * sent, `CandidatesSignalledError` with the candidates read before the failure.
   */
  holdCandidates(
    procRoot: string,
    entry: string,
    candidates: readonly ProcStat[],
    signal?: CandidateSignal,
  ): HeldCandidate[] | null;
  /**
   * Signals a held process through its pidfd (`gone` once it has exited: a zombie is not
   * signalled). A hold without a pidfd (`no-pidfd`, `EMFILE`…) falls back to `send`, the
   * start-time re-check; a `gone` or `closed` hold is `gone`. `signal`: a name Node knows, or a
   * number (a real-time signal, which Node does not name).
   */
  sendHeld(procRoot: string, hold: Hold, signal: NodeJS.Signals | number): SignalOutcome;
}

const SYS_PIDFD_SEND_SIGNAL = 424; // x86_64 and every arch using the generic table
const SYS_PIDFD_OPEN = 434;
const ESRCH = 3;
const EPERM = 1;
const EMFILE = 24;
const ENFILE = 23;
const EBADF = 9;
interface Ffi {
  pidfdOpen: (pid: number) => number;
  pidfdSendSignal: (fd: number, signal: number) => number;
  close: (fd: number) => number;
  errno: () => number;
}

let ffi: Ffi | null | undefined;

// Binds the glibc ≥ 2.36 wrappers (fixed prototypes: cheap calls); on an older glibc, the
// variadic syscall(2) with the generic syscall numbers.
function bind(): Ffi {
  const c = libc();
  if (!c) throw new Error('koffi cannot load');
  const { lib, errno } = c;
  const close = lib.func('int close(int)');
  try {
    const open = lib.func('int pidfd_open(int, unsigned int)');
    const send = lib.func('int pidfd_send_signal(int, int, void *, unsigned int)');
    return {
      pidfdOpen: (pid) => open(pid, 0),
      pidfdSendSignal: (fd, sig) => send(fd, sig, null, 0),
      close,
      errno,
    };
  } catch {
    const syscall = lib.func('long syscall(long, ...)');
    return {
      pidfdOpen: (pid) => syscall(SYS_PIDFD_OPEN, 'int', pid, 'uint', 0),
      pidfdSendSignal: (fd, sig) =>
        syscall(SYS_PIDFD_SEND_SIGNAL, 'int', fd, 'int', sig, 'void *', null, 'uint', 0),
      close,
      errno,
    };
  }
}

function loadFfi(): Ffi | null {
  if (ffi !== undefined) return ffi;
  let bound: Ffi;
  try {
    bound = bind();
  } catch {
    // koffi cannot load. libc() does not cache an fd-exhaustion failure: neither does this.
    if (libc() !== null || !libcFailedForFds()) ffi = null;
    return null;
  }
  // Probe once: pidfd_open on ourselves must give an fd (ENOSYS before Linux 5.3). EMFILE /
  // ENFILE says nothing about the kernel: not cached, the next signaller probes again.
  const fd = bound.pidfdOpen(process.pid);
  if (fd >= 0) {
    bound.close(fd);
    ffi = bound;
    return ffi;
  }
  const errno = bound.errno();
  if (errno !== EMFILE && errno !== ENFILE) ffi = null;
  return null;
}

/** The best signaller this machine allows: pidfd when koffi loads and the kernel has it. */
export function createSignaller(prefer: SignalMechanism = 'pidfd'): Signaller {
  const f = prefer === 'pidfd' ? loadFfi() : null;
  return f ? pidfdSignaller(f) : recheckSignaller();
}

function checkPid(id: Identity): void {
  if (!Number.isInteger(id.pid) || id.pid <= 1) {
    throw new RangeError(`refusing to signal pid ${id.pid}: a pid ≤ 1 is never trusted`);
  }
}

/**
 * Whether a held process has exited: true once its pidfd is readable (the whole thread group
 * has exited: a zombie, or reaped — poll(2) with timeout 0), false while it runs, undefined when
 * no pidfd is held (`no-pidfd`, `EMFILE`: the caller falls back to the start time). A `gone` or
 * `closed` hold has exited: its key is never trusted again.
 */
export function hasExited(hold: Hold): boolean | undefined {
  if (hold.fd < 0) return hold.why === 'gone' || hold.why === 'closed' ? true : undefined;
  // A signal arriving during the call (SIGCHLD, as the session's processes die) interrupts
  // even a zero-timeout poll(2): it is asked again. Any other failure (ENOMEM) leaves the
  // answer unknown, which the callers treat as "not known to have exited". One native call
  // when the library is loaded (tp_poll1: no struct to marshal), else poll(2) through koffi.
  const native = nativeProc();
  let revents: number | null;
  if (native) {
    const r = native.poll1(hold.fd);
    revents = r < 0 ? null : r;
  } else {
    if (!loadFfi()) return undefined;
    revents = pollOne(hold.fd, POLLIN, 0);
  }
  if (revents === null) return undefined;
  if (revents & POLLNVAL) throw new Error(`the pidfd of ${hold.identity.pid} (fd ${hold.fd}) is not open`);
  return revents !== 0;
}

/**
 * `hasExited` of each of `holds`, in order — the pidfds polled in one poll(2) call when the
 * native library is loaded. Throws as `hasExited` does.
 */
export function haveExited(holds: readonly Hold[]): (boolean | undefined)[] {
  const native = nativeProc();
  const open = holds.filter((h) => h.fd >= 0);
  const revents = native && open.length > 1 ? native.pollMany(open.map((h) => h.fd)) : null;
  if (!revents) return holds.map(hasExited);
  let i = 0;
  return holds.map((h) => {
    if (h.fd < 0) return hasExited(h);
    const r = revents[i++] as number;
    if (r & POLLNVAL) throw new Error(`the pidfd of ${h.identity.pid} (fd ${h.fd}) is not open`);
    return r !== 0;
  });
}

/** Closes a hold's pidfd (idempotent): from here it is `closed`, never trusted again. */
export function releaseHold(hold: Hold): void {
  if (hold.fd >= 0) {
    try {
      closeSync(hold.fd);
    } catch {
      // EBADF: already closed elsewhere; the hold is closed either way
    }
  }
  hold.fd = -1;
  hold.why = 'closed';
}

function pidfdSignaller(f: Ffi): Signaller {
  const self: Signaller = {
    mechanism: 'pidfd',
    hold(procRoot, id, evidence) {
      checkPid(id);
      if (evidence !== undefined && nativeProc())
        return self.holdAll(procRoot, [{ id, evidence }])[0] as Hold;
      return holdThroughPidfd(f, procRoot, id, evidence);
    },
    holdAll(procRoot, requests) {
      for (const { id } of requests) checkPid(id);
      const native = holdAllNative(procRoot, requests);
      if (native) {
        return native.map((n, i): Hold => {
          const id = (requests[i] as HoldRequest).id;
          if (n.kind === 'held') return { identity: id, fd: n.fd, details: n.details };
          return { identity: id, fd: -1, why: n.kind === 'gone' ? 'gone' : errnoName(n.errno) };
        });
      }
      return holdEach(requests, (id, evidence) => self.hold(procRoot, id, evidence));
    },
    holdCandidates(procRoot, entry, candidates, signal) {
      for (const stat of candidates) checkPid(stat);
      return holdCandidatesNative(procRoot, entry, candidates, signal);
    },
    sendHeld(procRoot, hold, signal) {
      checkPid(hold.identity);
      const sig = typeof signal === 'number' ? signal : constants.signals[signal];
      // Sent already, as the hold was taken (`holdCandidates` with a signal): its outcome.
      const sent = hold.sent?.signal === sig ? hold.sent.result : undefined;
      if (sent !== undefined) hold.sent = undefined;
      if (hold.fd < 0 && sent === undefined) {
        return hasExited(hold) ? 'gone' : self.send(procRoot, hold.identity, signal);
      }
      const native = nativeProc();
      if (native || sent !== undefined) {
        // The exit check and the signal in one call: the same steps as below.
        const r = sent ?? (native as NativeProc).sendHeld(hold.fd, sig);
        if (r === 0) return 'sent';
        if (r === 1) return 'gone';
        if (r === -EBADF) throw new Error(`the pidfd of ${hold.identity.pid} (fd ${hold.fd}) is not open`);
        return sendFailed(-r, hold.identity, signal);
      }
      if (hasExited(hold)) return 'gone';
      return sendThrough(f, hold.fd, hold.identity, signal);
    },
    send(procRoot, id, signal) {
      checkPid(id);
      const fd = f.pidfdOpen(id.pid);
      if (fd < 0) return f.errno() === ESRCH ? 'gone' : recheckSignaller().send(procRoot, id, signal);
      try {
        // The fd was opened before this check; if the start time still matches now, the
        // process existed throughout and the fd names it.
        if (!sameProcess(procRoot, id)) return 'gone';
        return sendThrough(f, fd, id, signal);
      } finally {
        f.close(fd);
      }
    },
  };
  return self;
}

// One hold through pidfd_open(2), without the native scan: the fd opened, then the identity and
// the evidence re-read.
function holdThroughPidfd(f: Ffi, procRoot: string, id: Identity, evidence: Evidence | undefined): Hold {
  const fd = f.pidfdOpen(id.pid);
  if (fd < 0) {
    const errno = f.errno();
    if (errno === ESRCH) return { identity: id, fd: -1, why: 'gone' };
    // EMFILE/ENFILE (the fd limit) or another failure: this one process falls back to the
    // start-time re-check at each use (no check now: with no fd left, no stat read either);
    // the caller warns.
    return { identity: id, fd: -1, why: errnoName(errno) };
  }
  // The fd was opened before these reads: if the start time still matches now, the process
  // existed throughout and the fd names it; the evidence read now is the held process's,
  // and the details too, once the fd says it has not exited since.
  let keep = false;
  try {
    const gone: Hold = { identity: id, fd: -1, why: 'gone' };
    if (!sameProcess(procRoot, id)) return gone;
    const h: Hold = { identity: id, fd };
    if (evidence !== undefined) {
      if (!evidenceHolds(procRoot, id, evidence) || hasExited(h)) return gone;
      h.details = readDetails(procRoot, id.pid);
    }
    keep = true;
    return h;
  } finally {
    if (!keep) f.close(fd);
  }
}

// `Signaller.holdCandidates` through the native scan: each candidate's environ read and, when it
// carries `entry`, held (and signalled, with `signal`) in one call; null without the native scan.
function holdCandidatesNative(
  procRoot: string,
  entry: string,
  candidates: readonly ProcStat[],
  signal: CandidateSignal | undefined,
): HeldCandidate[] | null {
  const number = signal ? constants.signals[signal.signal] : 0;
  const held = (c: PreHeldProcess, i: number): HeldCandidate => {
    const stat = candidates[i] as ProcStat;
    const identity = { pid: stat.pid, startTime: stat.startTime };
    const carrier = c.read.kind === 'ok' && c.read.entries.includes(entry);
    const h = c.hold;
    const hold: Hold | undefined =
      h.kind === 'held'
        ? { identity, fd: h.fd, details: h.details }
        : carrier && h.kind === 'gone'
          ? { identity, fd: -1, why: 'gone' }
          : undefined;
    if (hold && c.sent !== undefined) hold.sent = { signal: number, result: c.sent };
    return hold ? { read: c.read, hold, ppid: c.ppid } : { read: c.read, ppid: c.ppid };
  };
  let native: PreHeldProcess[] | null;
  try {
    native = preholdNative(procRoot, candidates, entry, signal && { number, may: signal.may });
  } catch (error) {
    if (error instanceof PreholdFailure)
      throw new CandidatesSignalledError(error.held.map(held), error.cause);
    throw error;
  }
  return native ? native.map(held) : null;
}

// `hold` per request, in order; when one throws, the holds already taken are released first.
function holdEach(
  requests: readonly HoldRequest[],
  hold: (id: Identity, evidence: Evidence) => Hold,
): Hold[] {
  const holds: Hold[] = [];
  try {
    for (const { id, evidence } of requests) holds.push(hold(id, evidence));
    return holds;
  } catch (error) {
    for (const h of holds) releaseHold(h);
    throw error;
  }
}

function sendThrough(f: Ffi, fd: number, id: Identity, signal: NodeJS.Signals | number): SignalOutcome {
  const r = f.pidfdSendSignal(fd, typeof signal === 'number' ? signal : constants.signals[signal]);
  if (r === 0) return 'sent';
  return sendFailed(f.errno(), id, signal);
}

function sendFailed(errno: number, id: Identity, signal: NodeJS.Signals | number): SignalOutcome {
  if (errno === EPERM) return 'denied';
  if (errno === ESRCH) return 'gone';
  throw new Error(`pidfd_send_signal(${id.pid}, ${signal}) failed: errno ${errno}`);
}

function recheckSignaller(): Signaller {
  const self: Signaller = {
    mechanism: 'start-time-recheck',
    hold(procRoot, id) {
      checkPid(id);
      return { identity: id, fd: -1, why: sameProcess(procRoot, id) ? 'no-pidfd' : 'gone' };
    },
    holdAll(procRoot, requests) {
      return holdEach(requests, (id) => self.hold(procRoot, id));
    },
    holdCandidates() {
      return null;
    },
    sendHeld(procRoot, hold, signal) {
      checkPid(hold.identity);
      return hasExited(hold) ? 'gone' : self.send(procRoot, hold.identity, signal);
    },
    send(procRoot, id, signal) {
      checkPid(id);
      if (!sameProcess(procRoot, id)) return 'gone';
      try {
        process.kill(id.pid, signal);
        return 'sent';
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'ESRCH') return 'gone';
        if (code === 'EPERM') return 'denied';
        throw error;
      }
    },
  };
  return self;
}
