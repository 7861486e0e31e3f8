// Small-file reads from /proc with one reused buffer: no allocation per file on the hot path.
import { closeSync, openSync, readSync } from 'node:fs';

/** What a read of a /proc file came to. */
export type ReadOutcome =
  | { kind: 'ok'; length: number }
  /** ENOENT / ESRCH: the process (or thread) is gone. */
  | { kind: 'gone' }
  /** EACCES / EPERM: the file exists but this uid may not read it (proc(5), ptrace access mode). */
  | { kind: 'denied'; code: string };

let buffer = Buffer.allocUnsafe(64 * 1024);

/** The shared buffer the last `readInto` filled; valid until the next read. */
export function sharedBuffer(): Buffer {
  return buffer;
}

/**
 * Reads the whole file at `path` into the shared buffer (grown as needed), one open/read…/close.
 * Errors other than gone/denied (EIO, EMFILE…) are thrown: the caller reports them.
 */
export function readInto(path: string): ReadOutcome {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (error) {
    return classify(error);
  }
  try {
    let length = 0;
    for (;;) {
      if (length === buffer.length) {
        const bigger = Buffer.allocUnsafe(buffer.length * 2);
        buffer.copy(bigger, 0, 0, length);
        buffer = bigger;
      }
      const n = readSync(fd, buffer, length, buffer.length - length, null);
      if (n === 0) return { kind: 'ok', length };
      length += n;
    }
  } catch (error) {
    return classify(error);
  } finally {
    closeSync(fd);
  }
}

/** Reads a small text file (stat, status, cmdline); undefined when gone or denied. */
export function readText(path: string): string | undefined {
  const r = readInto(path);
  return r.kind === 'ok' ? buffer.toString('latin1', 0, r.length) : undefined;
}

function classify(error: unknown): ReadOutcome {
  const code = (error as NodeJS.ErrnoException).code ?? '';
  if (code === 'ENOENT' || code === 'ESRCH') return { kind: 'gone' };
  if (code === 'EACCES' || code === 'EPERM') return { kind: 'denied', code };
  throw error;
}
