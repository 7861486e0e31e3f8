// A child's end from the kernel's wait status, not from Node's `exit` event. Node names only the
// signals it knows: a child killed by a real-time signal (SIGRTMIN..SIGRTMAX, 34..64) is
// reported as exit code 0 and no signal (libuv passes the signal number, Node's signo_string has
// no name for it and the event falls back to the exit code, 0). So a command killed by SIGRTMIN
// passed as a success. The kernel keeps the status: a pidfd held from the spawn answers
// ioctl(PIDFD_GET_INFO) with PIDFD_INFO_EXIT (Linux 6.15, linux/pidfd.h) once the child is
// reaped — after libuv's waitpid, so no race with it: the status is the one libuv took.
//
// Why this and not waitid(P_PIDFD, …, WNOWAIT): a non-reaping wait must run before libuv's
// waitpid, and libuv reaps from its own SIGCHLD watcher, in the loop turn that delivers the
// signal; a `process.on('SIGCHLD')` listener runs in that turn too, in an order JS cannot choose,
// and a thread blocked in waitid would race it (and hold a libuv pool thread per child).
// docs/sessions.md, "Exit status".
import { libc, signalName } from '../libc.js';

/** How a process ended, from its wait status (wait(2)): an exit code, or the signal that ended it. */
export type WaitStatus = { exitCode: number; signalNumber: null } | { exitCode: null; signalNumber: number };

/** The end as a result reports it: Node's name for the signal, the number when it has none. */
export interface ChildEnd {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** The signal's number when Node has no name for it (real-time signals 34..64). */
  signalNumber?: number;
}

/** wait(2)'s status word: WIFSIGNALED → the signal (WTERMSIG, the core bit dropped), else WEXITSTATUS. */
export function decodeWaitStatus(status: number): WaitStatus {
  const signal = status & 0x7f;
  if (signal === 0) return { exitCode: (status >> 8) & 0xff, signalNumber: null };
  return { exitCode: null, signalNumber: signal };
}

/** The end of a child as a result states it: an exit code, or a signal by name (by number when unnamed). */
export function childEnd(status: WaitStatus): ChildEnd {
  if (status.signalNumber === null) return { exitCode: status.exitCode, signal: null };
  const name = signalName(status.signalNumber);
  return name
    ? { exitCode: null, signal: name }
    : { exitCode: null, signal: null, signalNumber: status.signalNumber };
}

/**
 * A pidfd held on a child from its spawn, to read its wait status once Node has reported its
 * exit. `take()` reads it once and closes the fd: the status (`WaitStatus`), or undefined when
 * the kernel does not keep it (before Linux 6.15: the ioctl fails or leaves PIDFD_INFO_EXIT out
 * of its mask), when the child has not been reaped yet, or when the pidfd could not be opened
 * (koffi cannot load, EMFILE). Never throws.
 */
export interface ExitWatch {
  take(): WaitStatus | undefined;
}

// linux/pidfd.h: PIDFD_GET_INFO = _IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct pidfd_info), here
// with the first 64 bytes (PIDFD_INFO_SIZE_VER0): mask at 0, exit_code (__s32) at 60.
const PIDFD_INFO_SIZE_VER0 = 64;
const PIDFD_GET_INFO = ((3 << 30) >>> 0) + (PIDFD_INFO_SIZE_VER0 << 16) + (0xff << 8) + 11;
const PIDFD_INFO_EXIT = 1n << 3n;
const EXIT_CODE_OFFSET = 60;
const SYS_PIDFD_OPEN = 434; // the same number on every architecture (the generic syscall table)

interface Calls {
  pidfdOpen(pid: number): number;
  // biome-ignore lint/suspicious/noExplicitAny: a koffi function handle.
  ioctl: any;
  close(fd: number): number;
}
let calls: Calls | null | undefined;

function bind(): Calls | null {
  if (calls !== undefined) return calls;
  const c = libc();
  if (!c) return null; // not cached: libc() tries again after an fd shortage
  try {
    const syscall = c.lib.func('long syscall(long, ...)');
    calls = {
      pidfdOpen: (pid) => Number(syscall(SYS_PIDFD_OPEN, 'int', pid, 'uint', 0)),
      ioctl: c.lib.func('int ioctl(int, unsigned long, _Inout_ uint8_t *)'),
      close: c.lib.func('int close(int)'),
    };
  } catch {
    calls = null;
  }
  return calls;
}

/**
 * Opens a pidfd on `pid` now. Call it synchronously right after `child_process.spawn`: the
 * child cannot have been reaped yet (libuv reaps in the event loop), so `pid` names it.
 */
export function watchExit(pid: number): ExitWatch {
  const f = Number.isInteger(pid) && pid > 0 ? bind() : null;
  let fd = f ? f.pidfdOpen(pid) : -1;
  return {
    take(): WaitStatus | undefined {
      if (!f || fd < 0) return undefined;
      const info = new Uint8Array(PIDFD_INFO_SIZE_VER0);
      const view = new DataView(info.buffer);
      view.setBigUint64(0, PIDFD_INFO_EXIT, true);
      let ok = false;
      try {
        ok = f.ioctl(fd, PIDFD_GET_INFO, info) === 0;
      } catch {
        ok = false;
      }
      f.close(fd);
      fd = -1;
      if (!ok || (view.getBigUint64(0, true) & PIDFD_INFO_EXIT) === 0n) return undefined;
      return decodeWaitStatus(view.getInt32(EXIT_CODE_OFFSET, true));
    },
  };
}

/**
 * A child's end: the kernel's wait status when the watch has it, else what Node's `exit` event
 * said (`code`, `signal`) — which, for a signal Node cannot name, is exit code 0.
 */
export function endFromWatch(
  watch: ExitWatch | undefined,
  code: number | null,
  signal: NodeJS.Signals | null,
): ChildEnd {
  const status = watch?.take();
  return status ? childEnd(status) : { exitCode: code, signal };
}
