// Signals sent only to a process whose identity was checked right before (ADR-127 §2).
// With a pidfd the check is race-free: pidfd_open(2), verify the start time, then
// pidfd_send_signal(2) to the very process the fd names. Without one (no koffi, a kernel
// before 5.3), the start time is re-checked and then kill(2) is used: a narrow race remains.
import { constants } from 'node:os';
import { libc } from '../libc.js';
import { type Identity, isAliveStat, readStat } from '../proc/identity.js';

/**
 * - `sent`: the signal was delivered to the identified process;
 * - `gone`: the process no longer exists (ESRCH, a new start time, a dead zombie);
 * - `denied`: EPERM — the process belongs to another uid and we lack CAP_KILL.
 */
export type SignalOutcome = 'sent' | 'gone' | 'denied';

/** How identity checks are made race-free: `pidfd`, or the weaker `start-time-recheck`. */
export type SignalMechanism = 'pidfd' | 'start-time-recheck';

// Sends a signal to one identified process.
export interface Signaller {
  mechanism: SignalMechanism;
  /** Never signals pid ≤ 1: throws a RangeError for one (a caller bug, never a decision). */
  send(procRoot: string, id: Identity, signal: NodeJS.Signals): SignalOutcome;
}

const SYS_PIDFD_SEND_SIGNAL = 424; // x86_64 and every arch using the generic table
const SYS_PIDFD_OPEN = 434;
const ESRCH = 3;
const EPERM = 1;

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
  try {
    ffi = bind();
    // Probe once: pidfd_open on ourselves must give an fd (ENOSYS before Linux 5.3).
    const fd = ffi.pidfdOpen(process.pid);
    if (fd < 0) ffi = null;
    else ffi.close(fd);
  } catch {
    ffi = null;
  }
  return ffi;
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

function sameProcess(procRoot: string, id: Identity): boolean {
  const stat = readStat(procRoot, id.pid);
  return stat !== undefined && stat.startTime === id.startTime && isAliveStat(procRoot, stat);
}

function pidfdSignaller(f: Ffi): Signaller {
  return {
    mechanism: 'pidfd',
    send(procRoot, id, signal) {
      checkPid(id);
      const fd = f.pidfdOpen(id.pid);
      if (fd < 0) return f.errno() === ESRCH ? 'gone' : recheckSignaller().send(procRoot, id, signal);
      try {
        // The fd was opened before this check; if the start time still matches now, the
        // process existed throughout and the fd names it.
        if (!sameProcess(procRoot, id)) return 'gone';
        const r = f.pidfdSendSignal(fd, constants.signals[signal]);
        if (r === 0) return 'sent';
        const errno = f.errno();
        if (errno === EPERM) return 'denied';
        if (errno === ESRCH) return 'gone';
        throw new Error(`pidfd_send_signal(${id.pid}, ${signal}) failed: errno ${errno}`);
      } finally {
        f.close(fd);
      }
    },
  };
}

function recheckSignaller(): Signaller {
  return {
    mechanism: 'start-time-recheck',
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
}
