// glibc through koffi, loaded once: the few system calls Node does not expose (pidfd_open(2),
// pidfd_send_signal(2), pipe2(2)). Null when koffi cannot load (no prebuilt binary for this
// platform, a blocked install): callers fall back and say so.
import { createRequire } from 'node:module';

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
    if (!/EMFILE|ENFILE|too many open files/i.test(lastError)) cached = null;
    return null;
  }
  return cached;
}

/** Why the last `libc()` call returned null (its error's message), or ''. */
export function libcError(): string {
  return lastError;
}
