// The guard's input files (docs/guard.md, "Inputs"): the allow file and the registrations file
// are read every tick, and a tick must never wait on them. A FIFO blocks an open(2) for reading
// until a writer comes and a read until it writes; /dev/zero never ends. So each is read as an
// untrusted file (src/proc/untrusted-file.ts: opened O_NONBLOCK, a FIFO's open returning at once,
// fstat'ed on that very fd, refused unless it is a regular file of at most `INPUT_MAX_BYTES`), and
// with a deadline: a read that does not finish in time (a hung FUSE or NFS mount) is given up and
// the tick goes on without it.
import { type Stats, statSync } from 'node:fs';
import { readUntrustedFileAsync } from '../proc/untrusted-file.js';

/** The largest allow or registrations file read, bytes (1 MiB). */
export const INPUT_MAX_BYTES = 1024 * 1024;
/** How long one tick waits for one input file (open, fstat and read together), ms. */
export const INPUT_DEADLINE_MS = 2000;

/**
 * One read: `ok` (the text, UTF-8), `missing` (ENOENT), or `refused` with why (not a regular
 * file, over the cap, past the deadline, or the errno of the open or read).
 */
export type InputRead = { kind: 'ok'; text: string } | { kind: 'missing' } | { kind: 'refused'; why: string };

// A read still under way (past its deadline) per path: the next tick does not start another,
// which would only pile up on the same hung file system (libuv's thread pool has four threads).
const pending = new Set<string>();

/**
 * Reads `path` as an input file, within `deadlineMs` (default `INPUT_DEADLINE_MS`) and
 * `maxBytes` (default `INPUT_MAX_BYTES`). Never throws, never blocks the event loop.
 */
export async function readInputFile(
  path: string,
  { maxBytes = INPUT_MAX_BYTES, deadlineMs = INPUT_DEADLINE_MS } = {},
): Promise<InputRead> {
  if (pending.has(path)) {
    return { kind: 'refused', why: 'an earlier read of it has not finished (a hung file system?)' };
  }
  pending.add(path);
  const read = readBounded(path, maxBytes).finally(() => pending.delete(path));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<InputRead>((resolve) => {
    timer = setTimeout(
      () => resolve({ kind: 'refused', why: `not read within ${deadlineMs} ms (a hung file system?)` }),
      deadlineMs,
    );
  });
  try {
    return await Promise.race([read, late]);
  } finally {
    clearTimeout(timer);
  }
}

// The read itself, as an untrusted file (src/proc/untrusted-file.ts) through libuv's thread pool,
// a symbolic link followed: the operator names these files (a Kubernetes ConfigMap's file is a
// link), and only root, or whoever runs the guard, writes where they are.
async function readBounded(path: string, maxBytes: number): Promise<InputRead> {
  const read = await readUntrustedFileAsync(path, { follow: true, maxBytes });
  if (read.ok) return { kind: 'ok', text: read.bytes.toString('utf8') };
  switch (read.refused) {
    case 'open':
      return read.code === 'ENOENT'
        ? { kind: 'missing' }
        : { kind: 'refused', why: `cannot open it (${read.code})` };
    case 'read':
      return { kind: 'refused', why: `cannot read it (${read.code})` };
    case 'size':
      return { kind: 'refused', why: tooBig(read.size, maxBytes) };
    default:
      return { kind: 'refused', why: `${kindOf(read.stat)}, not a regular file` };
  }
}

/**
 * The start-time check of an input file, by stat(2) alone (no open: a FIFO is never opened):
 * undefined when `path` is a regular file within `maxBytes`, or (with `missingOk`) absent;
 * otherwise why it is refused.
 */
export function checkInputFile(
  path: string,
  { maxBytes = INPUT_MAX_BYTES, missingOk = false } = {},
): string | undefined {
  let st: Stats;
  try {
    st = statSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && missingOk) return undefined;
    return code === 'ENOENT' ? 'no such file' : `cannot stat it (${code ?? (error as Error).message})`;
  }
  if (!st.isFile()) return `${kindOf(st)}, not a regular file`;
  if (st.size > maxBytes) return tooBig(st.size, maxBytes);
  return undefined;
}

function kindOf(st: {
  isFIFO(): boolean;
  isCharacterDevice(): boolean;
  isBlockDevice(): boolean;
  isDirectory(): boolean;
  isSocket(): boolean;
}): string {
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isDirectory()) return 'a directory';
  if (st.isSocket()) return 'a socket';
  return 'not a file';
}

const tooBig = (size: number, max: number) => `${size} bytes or more, over the ${max}-byte cap`;
