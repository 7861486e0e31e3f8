// Reads from /proc through one fixed-size buffer: no allocation per file on the hot path, and
// no file, however large a process makes it, grows the supervisor's memory.
import { closeSync, openSync, readSync } from 'node:fs';

/** What a read of a /proc file came to. */
export type ReadOutcome =
  /** `truncated`: the file holds more than the `limit` bytes read (only `length` of them kept). */
  | { kind: 'ok'; length: number; truncated: boolean }
  /** ENOENT / ESRCH: the process (or thread) is gone. */
  | { kind: 'gone' }
  /** EACCES / EPERM: the file exists but this uid may not read it (proc(5), ptrace access mode). */
  | { kind: 'denied'; code: string };

/** Size of the one buffer every /proc read goes through, in bytes. It is never grown. */
export const READ_BUFFER_BYTES = 64 * 1024;

const buffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);
const GONE: ReadOutcome = { kind: 'gone' };

/** The shared buffer the last read filled; valid until the next read. Always `READ_BUFFER_BYTES` long. */
export function sharedBuffer(): Buffer {
  return buffer;
}

/**
 * Reads at most `limit` bytes (default and maximum `READ_BUFFER_BYTES - 1`) of the file at `path`
 * into the shared buffer: one open/read…/close. `truncated` when the file holds more — found by
 * reading one byte past `limit`, never the rest of the file (a process can point its cmdline at
 * gigabytes: prctl(2) `PR_SET_MM_MAP`). Errors other than gone/denied (EIO, EMFILE…) are
 * thrown: the caller reports them.
 */
export function readInto(path: string, limit = READ_BUFFER_BYTES - 1): ReadOutcome {
  const want = Math.min(limit, READ_BUFFER_BYTES - 1) + 1;
  const fd = openProc(path);
  if (typeof fd !== 'number') return fd;
  try {
    let length = 0;
    while (length < want) {
      const n = readSync(fd, buffer, length, want - length, null);
      if (n === 0) break;
      length += n;
    }
    return length === want
      ? { kind: 'ok', length: want - 1, truncated: true }
      : { kind: 'ok', length, truncated: false };
  } catch (error) {
    return classify(error);
  } finally {
    closeSync(fd);
  }
}

/** Reads a small text file (stat, status, cmdline), at most `limit` bytes; undefined when gone or denied. */
export function readText(path: string, limit?: number): string | undefined {
  const r = readInto(path, limit);
  return r.kind === 'ok' ? buffer.toString('latin1', 0, r.length) : undefined;
}

/** Opens `path` read-only for a streamed read (see `readChunk`): the fd, or why it cannot be read. */
export function openProc(path: string): number | ReadOutcome {
  try {
    return openSync(path, 'r');
  } catch (error) {
    return classify(error);
  }
}

/**
 * One read(2) from `fd` into the shared buffer at `[offset, offset + length)` (default: to the
 * buffer's end, `READ_BUFFER_BYTES`): the bytes read, 0 at the end of the file. Throws what
 * read(2) throws (see `classify`).
 */
export function readChunk(fd: number, offset: number, length = READ_BUFFER_BYTES - offset): number {
  return readSync(fd, buffer, offset, length, null);
}

/** Maps a /proc open or read error to gone/denied; rethrows anything else. */
export function classify(error: unknown): ReadOutcome {
  const code = (error as NodeJS.ErrnoException).code ?? '';
  if (code === 'ENOENT' || code === 'ESRCH') return GONE;
  if (code === 'EACCES' || code === 'EPERM') return { kind: 'denied', code };
  throw error;
}

/**
 * True for EMFILE / ENFILE: this process (or the system) has no fd left. A read that fails so
 * says nothing about /proc itself, so it is never reported as "no procfs" (`NO_PROC`).
 */
export function isFdExhaustion(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === 'EMFILE' || code === 'ENFILE';
}
