// glibc through koffi, loaded once: the few system calls Node does not expose (pidfd_open(2),
// pidfd_send_signal(2), pipe2(2), fcntl(2), poll(2) on one fd). Null when koffi cannot load
// (no prebuilt binary for this platform, a blocked install): callers fall back and say so.
import { createRequire } from 'node:module';
import { constants } from 'node:os';

/** koffi's module and its handle on `libc.so.6` (both untyped: koffi ships no types we use). */
export interface Libc {
  // biome-ignore lint/suspicious/noExplicitAny: koffi's API is dynamic.
  koffi: any;
  // biome-ignore lint/suspicious/noExplicitAny: a koffi library handle.
  lib: any;
  /** errno of the last call made through koffi on this thread. */
  errno(): number;
}

let cached: Libc | null | undefined;
let lastError = '';

/**
 * The shared binding, or null when koffi or libc.so.6 cannot be loaded (`libcError()` says
 * why). A failure for want of a file descriptor (EMFILE, ENFILE) is not remembered: the next
 * call tries again, once fds are free.
 */
export function libc(): Libc | null {
  if (cached !== undefined) return cached;
  try {
    const koffi = createRequire(import.meta.url)('koffi');
    cached = { koffi, lib: koffi.load('libc.so.6'), errno: () => koffi.errno() as number };
  } catch (error) {
    lastError = (error as Error).message;
    if (!libcFailedForFds()) cached = null;
    return null;
  }
  return cached;
}

/** Why the last `libc()` call returned null (its error's message), or ''. */
export function libcError(): string {
  return lastError;
}

/** Whether the last `libc()` call failed for want of a file descriptor (EMFILE, ENFILE). */
export function libcFailedForFds(): boolean {
  return /EMFILE|ENFILE|too many open files/i.test(lastError);
}

/** The name of errno `n` (`EMFILE`), from Node's `os.constants.errno`; `errno N` when it has none. */
export function errnoName(n: number): string {
  return Object.entries(constants.errno).find(([, v]) => v === n)?.[0] ?? `errno ${n}`;
}

/** The name of signal `n` (`SIGTERM`), from Node's `os.constants.signals`; undefined for a real-time signal. */
export function signalName(n: number): NodeJS.Signals | undefined {
  return Object.entries(constants.signals).find(([, v]) => v === n)?.[0] as NodeJS.Signals | undefined;
}

/** `poll(2)` event bits (poll.h). */
export const POLLIN = 0x1;
export const POLLNVAL = 0x20;
const EINTR = 4;

// biome-ignore lint/suspicious/noExplicitAny: a koffi function handle.
let pollFn: any;
// One struct pollfd {int fd; short events; short revents;}, passed as a raw pointer: no koffi
// struct to marshal per call (a poll of a pidfd runs once per tracked process per round).
const pollFd = new Int32Array(2);
const pollShorts = new Int16Array(pollFd.buffer);

/**
 * poll(2) on one fd for `events`, waiting up to `timeoutMs` (0: just ask). Returns the
 * `revents` bits (0 when the wait ran out), or null when poll failed (its errno other than
 * EINTR — an interrupted call is asked again with the time left) or koffi cannot load.
 * Synchronous: it blocks the thread, never past `timeoutMs`.
 */
export function pollOne(fd: number, events: number, timeoutMs: number): number | null {
  const c = libc();
  if (!c) return null;
  if (pollFn === undefined) pollFn = c.lib.func('int poll(void *, unsigned long, int)');
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    pollFd[0] = fd;
    pollShorts[2] = events;
    pollShorts[3] = 0;
    const wait = timeoutMs === 0 ? 0 : Math.max(0, Math.ceil(deadline - performance.now()));
    if (pollFn(pollFd, 1, wait) >= 0) return pollShorts[3] as number;
    if (c.errno() !== EINTR) return null;
  }
}
