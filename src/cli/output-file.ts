// The files a caller names for tether to write (`tether run --report-file`, `--events`): opened
// once, before the payload runs, as an untrusted file (src/proc/untrusted-file.ts: without
// following a symbolic link, O_NOFOLLOW, without waiting for a FIFO's reader, O_NONBLOCK, and
// never becoming tether's controlling terminal, O_NOCTTY); then written through that one descriptor, so a path
// swapped for a link meanwhile is never opened. The directories above it are walked one at a time
// through descriptors, and a link among them that another user could have planted in a sticky,
// world-writable directory is refused (the kernel's fs.protected_symlinks rule, applied whatever
// the sysctl says). docs/cli.md, "Files tether writes".
import {
  accessSync,
  closeSync,
  constants,
  fstatSync,
  ftruncateSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  type Stats,
  statSync,
  writeSync,
} from 'node:fs';
import { dirname } from 'node:path';
import { TetherError } from '../errors.js';
import { openUntrustedFile, type UntrustedOpen, type UntrustedRefusal } from '../proc/untrusted-file.js';

/** How long a write waits for a FIFO's or a pipe's reader that reads nothing, ms. */
export const STALL_MS = 10_000;

/**
 * Paths that name a descriptor tether already holds (`/dev/stdout`, `/dev/fd/3`,
 * `/proc/self/fd/3`): written through that descriptor itself. They are symbolic links the kernel
 * makes in directories only root can change, so no other user can plant one; each maps to N.
 */
const HELD_FD = /^(?:\/dev\/fd\/|\/proc\/self\/fd\/)(\d+)$/;
const STD_FDS: Record<string, number> = { '/dev/stdin': 0, '/dev/stdout': 1, '/dev/stderr': 2 };

/** What an output file is, as fstat(2) says after it was opened. */
export type OutputKind = 'file' | 'fifo' | 'device' | 'descriptor';

/** An output file, open for writing. `write` never throws but returns what failed; `close` never throws. */
export interface OutputFile {
  readonly path: string;
  readonly kind: OutputKind;
  /**
   * Writes `text` whole: appended (`append`, or any stream), or as the file's whole content
   * (`replace`: a regular file is truncated first). Returns undefined when written, else the
   * error (EPIPE: the reader went away; `STALLED`: a reader read nothing for STALL_MS).
   */
  write(text: string): Error | undefined;
  close(): void;
}

/**
 * Opens `path` for `option` (`--report-file`, `--events`): created when missing (mode 0666 less
 * the umask), never truncated here. `append` opens it O_APPEND (the event lines); `replace`
 * writes each `write` over the whole file (the report). Accepted: a regular file with one link,
 * a FIFO whose reader is already there, a character device (`/dev/null`, a terminal), or a path
 * of HELD_FD. Throws `TetherError` `INVALID_OPTION` naming the option, the path and why: a
 * symbolic link (ELOOP), a directory above it reached through a symbolic link `followable`
 * refuses (naming that link), a FIFO with no reader (ENXIO), a socket, a block device, a
 * directory, a file with other hard links, an empty path, or the errno of open(2) (ENOENT,
 * EACCES, …).
 */
export function openOutputFile(
  option: string,
  path: string,
  mode: 'append' | 'replace',
  stallMs: number = STALL_MS,
): OutputFile {
  const refuse = (why: string, cause?: unknown): TetherError =>
    new TetherError('INVALID_OPTION', `invalid ${option} ${JSON.stringify(path)}: ${why}`, { cause });
  if (path === '') throw refuse('an empty path: name a file, or leave the option out');
  const held = heldDescriptor(path);
  if (held !== undefined) {
    const why = heldProblem(held);
    if (why) throw refuse(why);
    return outputFile(path, held, 'descriptor', false, stallMs);
  }
  let opened: UntrustedOpen | UntrustedRefusal;
  try {
    const { dir, name } = walkToParent(path, refuse);
    const at = `/proc/self/fd/${dir}/${name}`;
    try {
      // Not truncated here: `replace` truncates at each write, once the payload has something to say.
      opened = openUntrustedFile(at, {
        access: 'write',
        create: 0o666,
        append: mode === 'append',
        kinds: ['file', 'fifo', 'character device'],
        maxLinks: 1,
      });
    } finally {
      closeSync(dir);
    }
    if (!opened.ok && opened.refused === 'open') throw shownAs(opened.error, at, path);
  } catch (error) {
    if (error instanceof TetherError) throw error;
    throw refuse(openFailure(path, error), error);
  }
  if (!opened.ok) {
    switch (opened.refused) {
      case 'open': // thrown above
      case 'read':
        throw refuse(`cannot be read back (${opened.code})`, opened.error);
      case 'links':
        throw refuse(
          `a file with ${opened.stat.nlink} hard links (tether writes only a file that has no other name)`,
        );
      default:
        throw refuse(
          `${describe(opened.stat)} (expected a regular file, a FIFO with its reader, or a character device)`,
        );
    }
  }
  const kind: OutputKind = opened.kind === 'file' ? 'file' : opened.kind === 'fifo' ? 'fifo' : 'device';
  return outputFile(path, opened.fd, kind, mode === 'replace', stallMs);
}

/**
 * Checks `path` for `option` as `openOutputFile` would open it, without creating or changing
 * anything (for `tether launcher`): an absolute path; when it exists, one `openOutputFile`
 * accepts (a FIFO is accepted: its reader is checked at each start) and that this user may write;
 * when it does not, a directory above it that exists and this user may write in. Throws
 * `TetherError` `INVALID_OPTION` naming the option.
 */
export function checkOutputPath(option: string, path: string): void {
  const refuse = (why: string): TetherError =>
    new TetherError('INVALID_OPTION', `invalid ${option} ${JSON.stringify(path)}: ${why}`);
  if (heldDescriptor(path) !== undefined) return; // the launcher's caller passes that descriptor
  if (!path.startsWith('/'))
    throw refuse('a relative path (the launcher runs in its caller’s directory: give an absolute path)');
  try {
    closeSync(walkToParent(path, refuse).dir);
  } catch (error) {
    if (error instanceof TetherError) throw error; // a link `followable` refuses
    // a directory missing or not searchable: the checks below say which
  }
  let stat: Stats | undefined;
  try {
    stat = lstatSync(path);
  } catch (error) {
    if (errnoOf(error) !== 'ENOENT') throw refuse(`cannot be checked (${errnoOf(error)})`);
  }
  if (stat) {
    if (stat.isSymbolicLink()) throw refuse(openFailure(path, { code: 'ELOOP' }));
    if (!(stat.isFile() || stat.isFIFO() || stat.isCharacterDevice()))
      throw refuse(`${describe(stat)} (expected a regular file, a FIFO or a character device)`);
    if (stat.isFile() && stat.nlink > 1)
      throw refuse(`a file with ${stat.nlink} hard links (tether writes only a file that has no other name)`);
    if (!accessible(path, constants.W_OK)) throw refuse('not writable by this user (EACCES)');
    return;
  }
  const dir = path.slice(0, path.lastIndexOf('/')) || '/';
  let parent: Stats;
  try {
    parent = statSync(dir); // the directories above are followed by open(2) too
  } catch (error) {
    throw refuse(`its directory ${JSON.stringify(dir)} cannot be used (${errnoOf(error)})`);
  }
  if (!parent.isDirectory()) throw refuse(`${JSON.stringify(dir)} is not a directory (ENOTDIR)`);
  if (!accessible(dir, constants.W_OK | constants.X_OK))
    throw refuse(`its directory ${JSON.stringify(dir)} is not writable by this user (EACCES)`);
}

// open(2)'s O_PATH (fcntl.h on Linux; not in Node's fs.constants): a descriptor naming a
// directory for the walk below, which needs only the right to search it.
const O_PATH = 0o10000000;

// How many symbolic links one path may go through (the kernel's MAXSYMLINKS, path_resolution(7)).
const MAX_LINKS = 40;

/**
 * Whether a symbolic link whose lstat(2) is `link`, in a directory whose stat(2) is `dir`, may be
 * followed by this process: the rule of the kernel's fs.protected_symlinks (proc_sys_fs(5)),
 * applied on every machine, whatever that sysctl says. A link in a sticky (S_ISVTX),
 * world-writable (S_IWOTH) directory is followed only when this process's effective uid or the
 * directory's owner owns it: another user could have planted it there (`/tmp/dir` → anywhere).
 * A link anywhere else is followed (only the directory's writers could have put it there).
 */
export function followable(link: Pick<Stats, 'uid'>, dir: Pick<Stats, 'uid' | 'mode'>): boolean {
  if (link.uid === process.geteuid?.()) return true;
  if ((dir.mode & 0o1002) !== 0o1002) return true;
  return link.uid === dir.uid;
}

/**
 * Walks the directories above `path`'s last component one component at a time, each opened
 * O_PATH | O_NOFOLLOW under the descriptor of the one before it (`/proc/self/fd/N/name`, as
 * openat(2) would), from `/` or, for a relative path, the working directory. A symbolic link met
 * on the way is followed (its target's components walked in turn) when `followable` allows it,
 * else refused: throws `refuse(why)` naming the link, its owner and its directory. Other failures
 * throw the errno error of the component (ENOENT, ENOTDIR, EACCES, …), its message naming the
 * path as walked; more than MAX_LINKS links throw `refuse(why)`. Returns the last directory's
 * descriptor (O_PATH, the caller's to close) and the last component (`''` when `path` ends in
 * `/`), which the walk neither opens nor checks: the caller opens it O_NOFOLLOW.
 */
function walkToParent(path: string, refuse: (why: string) => Error): { dir: number; name: string } {
  const parts = path.split('/');
  const name = parts.pop() ?? '';
  const todo = parts.reverse(); // popped from the end: the next component last
  const root = path.startsWith('/');
  let dir = openSync(root ? '/' : '.', O_PATH | constants.O_DIRECTORY);
  let walked = root ? '' : process.cwd().replace(/\/$/, '');
  let links = 0;
  try {
    for (let part = todo.pop(); part !== undefined; part = todo.pop()) {
      if (part === '' || part === '.') continue;
      const at = `/proc/self/fd/${dir}/${part}`;
      const shown = `${walked}/${part}`;
      let next: number;
      try {
        next = openSync(at, O_PATH | constants.O_DIRECTORY | constants.O_NOFOLLOW);
      } catch (error) {
        // A symbolic link opened O_DIRECTORY | O_NOFOLLOW answers ENOTDIR, as a file does.
        if (errnoOf(error) !== 'ENOTDIR') throw shownAs(error, at, shown);
        const link = lstatSync(at);
        if (!link.isSymbolicLink()) throw shownAs(error, at, shown);
        const parent = fstatSync(dir);
        if (!followable(link, parent))
          throw refuse(
            `it goes through ${JSON.stringify(shown)}, a symbolic link owned by uid ${link.uid} in ` +
              `${JSON.stringify(walked || '/')}, a sticky world-writable directory owned by uid ` +
              `${parent.uid}: tether follows a link there only when it or the directory's owner ` +
              'owns it (the rule of fs.protected_symlinks, whatever that sysctl says); name a path ' +
              'without it',
          );
        if (++links > MAX_LINKS)
          throw refuse(
            `it goes through more than ${MAX_LINKS} symbolic links (ELOOP), the last ${JSON.stringify(shown)}`,
          );
        // The link cannot change under us: in a sticky directory only its owner or the
        // directory's owner may replace it (both trusted above); elsewhere only its writers.
        const target = readlinkSync(at);
        todo.push(...target.split('/').reverse());
        if (target.startsWith('/')) {
          const top = openSync('/', O_PATH | constants.O_DIRECTORY);
          closeSync(dir);
          dir = top;
          walked = '';
        }
        continue;
      }
      closeSync(dir);
      dir = next;
      walked = part === '..' ? walked.slice(0, walked.lastIndexOf('/')) : shown;
    }
  } catch (error) {
    closeSync(dir);
    throw error;
  }
  return { dir, name };
}

// `error` with the walk's `/proc/self/fd/N/name` in its message replaced by the path it stands for.
function shownAs(error: unknown, at: string, shown: string): unknown {
  if (error instanceof Error) error.message = error.message.split(at).join(shown);
  return error;
}

// The descriptor a HELD_FD path names, else undefined.
function heldDescriptor(path: string): number | undefined {
  const std = STD_FDS[path];
  if (std !== undefined) return std;
  const m = HELD_FD.exec(path);
  return m ? Number(m[1]) : undefined;
}

// Why descriptor `fd` is not one to write to, or undefined when it is. Node's runtime holds
// descriptors of its own (libuv's epoll and eventfds, and pipes it holds both ends of: its signal
// and wake-up pipes): a JSON line written into one corrupts it (into libuv's signal pipe it
// crashes tether), so those are refused — an anon_inode, a descriptor not open for writing, or a
// pipe whose read end this process holds too. A caller's file, FIFO, pipe, socket or terminal is
// used. (The close-on-exec flag cannot tell them apart: Node sets it on inherited ones as well.)
function heldProblem(fd: number): string | undefined {
  const named = `names descriptor ${fd}`;
  let target: string;
  let flags: number;
  try {
    target = readlinkSync(`/proc/self/fd/${fd}`);
    flags = fdFlags(fd);
  } catch (error) {
    return `${named}, which tether does not hold open (${errnoOf(error)})`;
  }
  if (target.startsWith('anon_inode:')) return `${named}, one of tether's runtime's own (${target})`;
  if ((flags & O_ACCMODE) === constants.O_RDONLY) return `${named}, which is open for reading only`;
  if (target.startsWith('pipe:')) {
    for (const other of readdirSync('/proc/self/fd')) {
      if (Number(other) === fd) continue;
      try {
        if (
          readlinkSync(`/proc/self/fd/${other}`) === target &&
          (fdFlags(Number(other)) & O_ACCMODE) !== constants.O_WRONLY
        )
          return `${named}, a pipe whose read end tether holds too (descriptor ${other}): one of its runtime's own`;
      } catch {
        // closed meanwhile (the readdir's own descriptor among them): not a holder
      }
    }
  }
  return undefined;
}

// The access mode's bits of open(2)'s flags (fcntl.h on Linux; not in Node's fs.constants).
const O_ACCMODE = 0o3;

// The file status flags of descriptor `fd` (octal `flags:` of /proc/self/fdinfo, proc(5)).
function fdFlags(fd: number): number {
  const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'latin1'))?.[1];
  if (flags === undefined) throw Object.assign(new Error('no flags in fdinfo'), { code: 'EPROTO' });
  return Number.parseInt(flags, 8);
}

// One open output file: every write whole, a stream's EAGAIN waited out up to `stallMs`.
function outputFile(
  path: string,
  fd: number,
  kind: OutputKind,
  replace: boolean,
  stallMs: number,
): OutputFile {
  let open = true;
  return {
    path,
    kind,
    write(text) {
      if (!open) return new Error('closed');
      try {
        const bytes = Buffer.from(text);
        if (replace && kind === 'file') {
          ftruncateSync(fd, 0);
          writeWhole(fd, bytes, 0, stallMs);
        } else writeWhole(fd, bytes, null, stallMs);
        return undefined;
      } catch (error) {
        return error as Error;
      }
    },
    close() {
      if (!open) return;
      open = false;
      if (kind === 'descriptor') return; // not ours to close: the caller's
      try {
        closeSync(fd);
      } catch {
        // Nothing is lost on close: every write went out whole with write(2).
      }
    },
  };
}

// A synchronous pause for a non-blocking write that found the pipe full (no timer: the write is
// synchronous, as one blocking write(2) was).
const pause = new Int32Array(new SharedArrayBuffer(4));

// Writes all of `bytes` (at `position` and on for a file, else at the stream's end). A pipe or
// FIFO opened O_NONBLOCK answers EAGAIN when full: wait 1, 2, 4 … 50 ms and go on, and give up
// (code STALLED) once its reader took nothing for `stallMs`.
function writeWhole(fd: number, bytes: Buffer, position: number | null, stallMs: number): void {
  let off = 0;
  let waited = 0;
  let pauseMs = 1;
  while (off < bytes.length) {
    try {
      const n = writeSync(fd, bytes, off, bytes.length - off, position === null ? null : position + off);
      off += n;
      waited = 0;
      pauseMs = 1;
    } catch (error) {
      if (errnoOf(error) !== 'EAGAIN') throw error;
      if (waited >= stallMs)
        throw Object.assign(new Error(`its reader read nothing for ${stallMs} ms (STALLED)`), {
          code: 'STALLED',
        });
      Atomics.wait(pause, 0, 0, pauseMs);
      waited += pauseMs;
      pauseMs = Math.min(pauseMs * 2, 50);
    }
  }
}

// Why open(2) refused `path`, in words: ELOOP and ENXIO get their meaning here.
function openFailure(path: string, error: unknown): string {
  const code = errnoOf(error);
  // A directory on the way that is not there (the walk opens each below a descriptor, so its
  // open(2) names /proc/self/fd/N/…): the file's directory, named (found by a new user's trial).
  const at = (error as NodeJS.ErrnoException)?.path;
  if (code === 'ENOENT' && at !== undefined && at !== path)
    return `its directory ${dirname(path)} does not exist (ENOENT): create it, or name a file in a directory that exists`;
  if (code === 'ELOOP')
    return 'a symbolic link (ELOOP): tether does not follow one here; name the file itself (or /dev/fd/N for a descriptor it holds)';
  if (code === 'ENXIO') {
    let stat: Stats | undefined;
    try {
      stat = lstatSync(path);
    } catch {
      // gone meanwhile: say what open(2) said
    }
    if (stat?.isFIFO())
      return 'a FIFO with no reader (ENXIO): start its reader first; tether does not wait for one';
    if (stat?.isSocket())
      return 'a socket (ENXIO): expected a regular file, a FIFO with its reader, or a character device';
  }
  return (error as Error)?.message ?? code;
}

// What a file that is not a regular file, FIFO or character device is.
function describe(stat: Stats): string {
  if (stat.isDirectory()) return 'a directory';
  if (stat.isBlockDevice()) return 'a block device';
  if (stat.isSocket()) return 'a socket';
  if (stat.isSymbolicLink()) return 'a symbolic link';
  return 'not a regular file';
}

// Whether access(2) grants `mode` on `path` to this process.
function accessible(path: string, mode: number): boolean {
  try {
    accessSync(path, mode);
    return true;
  } catch {
    return false;
  }
}

function errnoOf(error: unknown): string {
  return (error as NodeJS.ErrnoException | undefined)?.code ?? 'unknown';
}
