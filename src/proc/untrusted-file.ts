// A file another user or a session member could have put in place (a registration, a spooled
// record, the channel key, a file named on the command line), opened one careful way: without
// following a symbolic link at its last component (O_NOFOLLOW), without waiting for a FIFO's
// other end (O_NONBLOCK), never made this process's controlling terminal (O_NOCTTY); then judged
// by fstat(2) on that very descriptor — its kind, its links, its owner, its permission bits, its
// size — so that a path swapped between a check and the open is never what is read. A read
// stops one byte past the size cap: a file that grows past it while read is refused, not
// followed (`--allow /dev/zero` once grew the guard to 1.6 GB in 15 s: docs/guard.md, "Inputs").
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';

/** What a file is, as fstat(2) says (`file`: a regular file). */
export type FileKind =
  | 'file'
  | 'directory'
  | 'fifo'
  | 'socket'
  | 'character device'
  | 'block device'
  | 'symbolic link';

/** How a file is opened and what it must be. Every field is optional. */
export interface UntrustedFileRules {
  /** open(2)'s access mode: `read` (O_RDONLY, the default), `write` (O_WRONLY), `read-write` (O_RDWR). */
  access?: 'read' | 'write' | 'read-write';
  /** Created when missing (O_CREAT) with this mode, less the umask; never truncated. */
  create?: number;
  /** Every write at the end (O_APPEND). */
  append?: boolean;
  /**
   * Follow a symbolic link at `path` (default false: O_NOFOLLOW, and a link is refused `open`
   * with code ELOOP). Only for a path its operator chose and this process's user controls.
   */
  follow?: boolean;
  /** The kinds accepted. Default `['file']`. */
  kinds?: readonly FileKind[];
  /** A regular file with more names than this (st_nlink) is refused `links`. Default: any. */
  maxLinks?: number;
  /** The uids that may own it (refused `owner` otherwise). Default: any. */
  owners?: readonly number[];
  /** Permission bits (mode & 0o777): exactly `is`, or none of `without` (refused `mode`). */
  mode?: { is: number } | { without: number };
  /**
   * The largest size accepted, bytes (refused `size`): st_size when opened, and what a read
   * finds. Default: no cap (required to read).
   */
  maxBytes?: number;
}

/**
 * Why a file was refused, each with what the caller needs to say so:
 * `open` — open(2) failed: `code` its errno (ENOENT: none there; ELOOP: a symbolic link, without
 * `follow`; ENXIO: a FIFO with no reader, or a socket; EISDIR, EACCES …), `error` Node's error;
 * `kind` — not one of `kinds`; `links` — over `maxLinks` names; `owner` — not owned by one of
 * `owners`; `mode` — its permission bits are not `mode`'s; `size` — over `maxBytes` (`size`:
 * st_size, or with `grew`, the bytes read when it grew past the cap while read);
 * `read` — fstat(2) or read(2) failed (`code`, `error`).
 */
export type UntrustedRefusal =
  | { ok: false; refused: 'open' | 'read'; code: string; error: NodeJS.ErrnoException }
  | { ok: false; refused: 'kind' | 'links' | 'owner' | 'mode'; kind: FileKind; stat: Stats }
  | { ok: false; refused: 'size'; size: number; grew: boolean; stat: Stats };

/** A file opened and accepted: its descriptor (the caller's to close) and its fstat(2). */
export interface UntrustedOpen {
  ok: true;
  fd: number;
  kind: FileKind;
  stat: Stats;
}

/** A file read whole and accepted: its bytes (at most `maxBytes`) and its fstat(2) when opened. */
export interface UntrustedRead {
  ok: true;
  bytes: Buffer;
  stat: Stats;
}

/**
 * Opens `path` as `rules` say (O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, plus the access mode,
 * O_CREAT and O_APPEND asked for) and judges the open file by fstat(2): kind, links, owner,
 * permission bits, then size, the first that fails being the refusal. Returns the descriptor
 * (the caller closes it; it stays O_NONBLOCK) or the refusal (nothing left open). Never throws.
 */
export function openUntrustedFile(
  path: string,
  rules: UntrustedFileRules = {},
): UntrustedOpen | UntrustedRefusal {
  let fd: number;
  try {
    fd = openSync(path, openFlags(rules), rules.create ?? 0o666);
  } catch (error) {
    return failed('open', error);
  }
  let stat: Stats;
  try {
    stat = fstatSync(fd);
  } catch (error) {
    closeSync(fd);
    return failed('read', error);
  }
  const refusal = judge(stat, rules);
  if (refusal) {
    closeSync(fd);
    return refusal;
  }
  return { ok: true, fd, kind: kindOf(stat), stat };
}

/**
 * Reads the whole of `path`, opened and judged as `openUntrustedFile` does (read-only: `access`,
 * `create` and `append` are ignored), at most `maxBytes` bytes: the buffer is sized by fstat(2)
 * and grown to one byte past the cap for a file that grows while read, which is then refused
 * `size` with `grew`. Returns the bytes or the refusal. Never throws; the descriptor is closed.
 */
export function readUntrustedFile(
  path: string,
  rules: UntrustedFileRules & { maxBytes: number },
): UntrustedRead | UntrustedRefusal {
  const opened = openUntrustedFile(path, readOnly(rules));
  if (!opened.ok) return opened;
  const { fd, stat } = opened;
  try {
    const bounded = new BoundedBuffer(stat.size, rules.maxBytes);
    for (;;) {
      const room = bounded.room();
      const n = readSync(fd, bounded.buffer, bounded.length, room, bounded.length);
      if (n === 0) break;
      if (bounded.took(n)) return { ok: false, refused: 'size', size: bounded.length, grew: true, stat };
    }
    return { ok: true, bytes: bounded.bytes(), stat };
  } catch (error) {
    return failed('read', error);
  } finally {
    closeSync(fd);
  }
}

/**
 * `readUntrustedFile` through libuv's thread pool (fs/promises), for a caller that must not
 * block its event loop on a hung file system: the same open, judgement, cap and refusals.
 * Never rejects; the file handle is closed.
 */
export async function readUntrustedFileAsync(
  path: string,
  rules: UntrustedFileRules & { maxBytes: number },
): Promise<UntrustedRead | UntrustedRefusal> {
  let handle: FileHandle;
  try {
    handle = await open(path, openFlags(readOnly(rules)));
  } catch (error) {
    return failed('open', error);
  }
  try {
    const stat = await handle.stat();
    const refusal = judge(stat, rules);
    if (refusal) return refusal;
    const bounded = new BoundedBuffer(stat.size, rules.maxBytes);
    for (;;) {
      const room = bounded.room();
      const { bytesRead } = await handle.read(bounded.buffer, bounded.length, room, bounded.length);
      if (bytesRead === 0) break;
      if (bounded.took(bytesRead))
        return { ok: false, refused: 'size', size: bounded.length, grew: true, stat };
    }
    return { ok: true, bytes: bounded.bytes(), stat };
  } catch (error) {
    return failed('read', error);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

// What `stat` is, among the seven kinds of file Linux has (the fallback is never reached there).
function kindOf(stat: Stats): FileKind {
  if (stat.isFile()) return 'file';
  if (stat.isDirectory()) return 'directory';
  if (stat.isFIFO()) return 'fifo';
  if (stat.isSocket()) return 'socket';
  if (stat.isCharacterDevice()) return 'character device';
  if (stat.isBlockDevice()) return 'block device';
  if (stat.isSymbolicLink()) return 'symbolic link';
  return 'file';
}

// open(2)'s flags for `rules`: the careful three, the access mode, and what was asked for.
function openFlags(rules: UntrustedFileRules): number {
  const { O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_APPEND, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;
  const access = rules.access === 'write' ? O_WRONLY : rules.access === 'read-write' ? O_RDWR : O_RDONLY;
  return (
    access |
    O_NONBLOCK |
    O_NOCTTY |
    (rules.follow ? 0 : O_NOFOLLOW) |
    (rules.create === undefined ? 0 : O_CREAT) |
    (rules.append ? O_APPEND : 0)
  );
}

function readOnly(rules: UntrustedFileRules): UntrustedFileRules {
  return { ...rules, access: 'read', create: undefined, append: false };
}

// The first rule `stat` breaks, in the order kind, links, owner, mode, size; undefined: none.
function judge(stat: Stats, rules: UntrustedFileRules): UntrustedRefusal | undefined {
  const kind = kindOf(stat);
  const refuse = (refused: 'kind' | 'links' | 'owner' | 'mode') => ({
    ok: false as const,
    refused,
    kind,
    stat,
  });
  if (!(rules.kinds ?? ['file']).includes(kind)) return refuse('kind');
  if (kind === 'file' && rules.maxLinks !== undefined && stat.nlink > rules.maxLinks) return refuse('links');
  if (rules.owners !== undefined && !rules.owners.includes(stat.uid)) return refuse('owner');
  const bits = stat.mode & 0o777;
  if (rules.mode && ('is' in rules.mode ? bits !== rules.mode.is : (bits & rules.mode.without) !== 0))
    return refuse('mode');
  if (kind === 'file' && rules.maxBytes !== undefined && stat.size > rules.maxBytes)
    return { ok: false, refused: 'size', size: stat.size, grew: false, stat };
  return undefined;
}

function failed(refused: 'open' | 'read', error: unknown): UntrustedRefusal {
  const e = error as NodeJS.ErrnoException;
  return { ok: false, refused, code: e?.code ?? e?.message ?? String(error), error: e };
}

// A read buffer sized by fstat and grown, doubling, to at most one byte past the cap.
class BoundedBuffer {
  buffer: Buffer;
  length = 0;
  constructor(
    size: number,
    private readonly maxBytes: number,
  ) {
    this.buffer = Buffer.alloc(Math.min(size, maxBytes) + 1);
  }
  // Room for the next read, the buffer grown first when full (call it before reading `buffer`).
  room(): number {
    if (this.length === this.buffer.length) {
      const grown = Buffer.alloc(Math.min(this.buffer.length * 2, this.maxBytes + 1));
      this.buffer.copy(grown);
      this.buffer = grown;
    }
    return this.buffer.length - this.length;
  }
  // Counts `n` bytes read; whether the file is now past the cap.
  took(n: number): boolean {
    this.length += n;
    return this.length > this.maxBytes;
  }
  bytes(): Buffer {
    return this.buffer.subarray(0, this.length);
  }
}
