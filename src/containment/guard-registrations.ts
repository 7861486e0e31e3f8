// The guard's registrations file (docs/guard.md, "Registrations"), on the writing side: where it
// is and what a line says, shared by `tether guard allow` (src/guard/registrations.ts) and a
// session that ends with kept processes (src/session/keep-registrations.ts), so both write what
// the guard reads. One small text file in the guard's state directory, one registration a line:
// `PID START_TIME EXPIRES_MS` (start time in clock ticks since boot, expiry in ms since the
// epoch). The file is replaced by write-then-rename, so a reader sees the old file or the new,
// never half of one. A bad line is reported with its line number and the others apply: never an
// allow-all or kill-all. The guard's reading side (bounded, with a deadline) stays in src/guard/.

import { randomBytes } from 'node:crypto';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmdirSync,
  rmSync,
  type Stats,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { TetherError } from '../errors.js';
import { type Identity, isAlive, selfIdentity } from '../proc/identity.js';
import { readUntrustedFile, type UntrustedRefusal } from '../proc/untrusted-file.js';
import { keptAt } from '../sweep/keep.js';

/** One registration: the process (pid + start time in clock ticks) and its expiry (epoch ms). */
export interface Registration extends Identity {
  expiresAt: number;
}

/** A line of the file that spares nothing, with where it is (the guard's `Problem` shape). */
export interface RegistrationProblem {
  source: string;
  line?: number;
  message: string;
}

/** The file's name inside the state directory. */
export const REGISTRATION_FILE = 'guard-allow';

/** Where the state directory is when `TETHER_GUARD_STATE` is not set. */
export const DEFAULT_STATE_DIR = '/run/tether';

/** The largest registrations file read, bytes: the guard's cap on its inputs (1 MiB). */
export const REGISTRATIONS_MAX_BYTES = 1024 * 1024;

/** How long a writer waits for another to finish, ms. */
export const LOCK_WAIT_MS = 3000;

/**
 * A lock older than this was left by a writer that died holding it, ms: a writer holds it for one
 * read and one write of a small file (well under a millisecond).
 */
export const LOCK_STALE_MS = 2000;

const HEADER =
  '# tether guard registrations: PID START_TIME EXPIRES_AT_MS (written by `tether guard allow` and sessions that keep a service)\n';

/**
 * The guard's state directory, the one place `tether guard` reads registrations from and `tether
 * guard allow` (and a session's kept processes) write them to: `TETHER_GUARD_STATE` when set,
 * else `/run/tether`. Nothing else (not `XDG_RUNTIME_DIR`, which differs between a login shell
 * and a `docker exec`) moves it: a guard and a writer run by different users or shells find the
 * same file.
 */
export function stateDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.TETHER_GUARD_STATE ? env.TETHER_GUARD_STATE : DEFAULT_STATE_DIR;
}

/** The registrations file of a state directory: `<dir>/guard-allow`. */
export function registrationsPath(dir: string = stateDir()): string {
  return join(dir, REGISTRATION_FILE);
}

/** Parses the file's text: every well-formed line, and a problem for each other one. */
export function parseRegistrations(
  text: string,
  source: string,
): { entries: Registration[]; problems: RegistrationProblem[] } {
  const entries: Registration[] = [];
  const problems: RegistrationProblem[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const m = /^(\d+) (\d+) (\d+)$/.exec(line);
    const [pid, startTime, expiresAt] = m ? [Number(m[1]), Number(m[2]), Number(m[3])] : [];
    if (!m || !(pid && pid > 1) || !Number.isSafeInteger(startTime) || !Number.isSafeInteger(expiresAt)) {
      problems.push({
        source,
        line: i + 1,
        message: `bad registration ${JSON.stringify(line.slice(0, 80))}: expected PID START_TIME EXPIRES_AT_MS (PID > 1): this line spares nothing`,
      });
      return;
    }
    entries.push({ pid, startTime: startTime as number, expiresAt: expiresAt as number });
  });
  return { entries, problems };
}

/**
 * Writes the registrations of `dir` (created, mode 0700, when missing): `old` (what the file held)
 * less the entries expired at `now` and any for an identity in `added`, then `added`; a temporary
 * file made beside it (O_EXCL, mode 0600) is renamed over it. Resolves to the file written.
 * Throws the fs error when the directory or file cannot be written (the temporary file is left
 * only if the rename itself failed).
 */
export function writeRegistrations(
  dir: string,
  old: readonly Registration[],
  added: readonly Registration[],
  now = Date.now(),
): string {
  return replaceRegistrations(dir, old, added, now, () => true) as string;
}

// `writeRegistrations`, with `held` asked just before the rename: when it says no, the temporary
// file is removed, nothing is replaced, and the result is undefined.
function replaceRegistrations(
  dir: string,
  old: readonly Registration[],
  added: readonly Registration[],
  now: number,
  held: () => boolean,
): string | undefined {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = registrationsPath(dir);
  const key = (r: Identity) => `${r.pid}:${r.startTime}`;
  const fresh = new Set(added.map(key));
  const kept = keptAt(old, now).filter((r) => !fresh.has(key(r)));
  const body = [...kept, ...added].map((r) => `${r.pid} ${r.startTime} ${r.expiresAt}\n`).join('');
  const tmp = `${path}.${process.pid}.${now}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(tmp, HEADER + body, { mode: 0o600, flag: 'wx' });
  if (!held()) {
    rmSync(tmp, { force: true });
    return undefined;
  }
  renameSync(tmp, path);
  return path;
}

/**
 * Reads the registrations of `dir` synchronously, for a writer that cannot wait (a session's end
 * runs in its `exit` hook too), by `readUntrustedFile` (src/proc/untrusted-file.ts): opened with
 * O_NONBLOCK (a FIFO's open returns at once) and a symbolic link followed, fstat'ed on that fd and
 * read only when it is a regular file of at most `REGISTRATIONS_MAX_BYTES`. There
 * is no deadline (a synchronous read cannot be given up): the state directory is a local tmpfs
 * (`/run`) unless `TETHER_GUARD_STATE` says otherwise. `missing` (ENOENT) holds none; `refused`
 * says why. Never throws.
 */
export function readRegistrationsSync(dir: string): {
  entries: Registration[];
  problems: RegistrationProblem[];
  read: 'ok' | 'missing' | 'refused';
  why?: string;
} {
  const path = registrationsPath(dir);
  // Followed when a symbolic link: the operator names the state directory and what is in it.
  const file = readUntrustedFile(path, { follow: true, maxBytes: REGISTRATIONS_MAX_BYTES });
  if (file.ok) return { ...parseRegistrations(file.bytes.toString('utf8'), path), read: 'ok' };
  if (file.refused === 'open' && file.code === 'ENOENT')
    return { entries: [], problems: [], read: 'missing' };
  return { entries: [], problems: [], read: 'refused', why: refusedBecause(file) };
}

// Why the registrations file was not read, in the words a refusal has always had here.
function refusedBecause(file: UntrustedRefusal): string {
  switch (file.refused) {
    case 'open':
      return `cannot open it (${file.code})`;
    case 'read':
      return `cannot read it (${file.code})`;
    case 'size':
      return `over the ${REGISTRATIONS_MAX_BYTES}-byte cap`;
    default:
      return 'not a regular file';
  }
}

/**
 * Adds `added` to the registrations of `dir`, synchronously: under `lockRegistrations`,
 * `readRegistrationsSync`, then `writeRegistrations`. Returns the file written. Throws `TetherError` `INVALID_OPTION` when the
 * file there cannot be read (it is not replaced: its registrations would be lost), the lock's
 * `EBUSY` (also when the lock was taken from it as stale `LOCK_ATTEMPTS` times: it then wrote
 * nothing), and the fs error when the directory or file cannot be written.
 */
export function addRegistrationsSync(dir: string, added: readonly Registration[], now = Date.now()): string {
  for (let attempt = 1; ; attempt++) {
    const lock = lockRegistrations(dir);
    try {
      const old = readRegistrationsSync(dir);
      if (old.read === 'refused') {
        throw new TetherError(
          'INVALID_OPTION',
          `cannot add to the registrations file ${registrationsPath(dir)}: ${old.why}`,
        );
      }
      // The lock is checked once more just before the rename: a writer whose lock was taken
      // from it (only ever as stale: see `lockRegistrations`) renames nothing over the file and
      // writes again under a new lock.
      const path = replaceRegistrations(dir, old.entries, added, now, lock.held);
      // Taken from it between that check and the rename (two syscalls apart): another writer may
      // have written meanwhile, and this write is done again.
      if (path !== undefined && lock.held()) return path;
      if (attempt >= LOCK_ATTEMPTS) {
        throw Object.assign(
          new Error(
            `${registrationsPath(dir)}.lock was broken as stale while this writer held it, ${attempt} times`,
          ),
          { code: 'EBUSY' },
        );
      }
    } finally {
      lock();
    }
  }
}

/** How often a write is done again when its lock was broken while it wrote. */
export const LOCK_ATTEMPTS = 3;

// A 4-byte cell for Atomics.wait: the one synchronous sleep Node has.
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

/** A writer's hold on the lock: `release` removes the lock only while it is this writer's. */
export interface RegistrationsLock {
  (): void;
  /** Whether the lock is still this writer's (no other writer broke it as stale meanwhile). */
  held(): boolean;
}

/**
 * Takes the writers' lock of `dir` (created, mode 0700, when missing): the directory
 * `guard-allow.lock`, holding one file `owner.<token>` named by its writer. Each writer reads the
 * file, merges and renames a new one over it, so two at once would each drop what the other added
 * (16 writers started in the same millisecond kept 6 to 14 of their 16 entries without it). Waits
 * up to `LOCK_WAIT_MS`, breaking a lock older than `LOCK_STALE_MS` whose writer is not alive.
 * Returns the release. Throws an error with `code` `EBUSY` when the lock stays taken, and the fs
 * error when the directory or lock cannot be made.
 *
 * Why a directory. The lock was a file made with O_EXCL, broken when stale by renaming it aside,
 * and that lost entries two ways (test/containment/guard-registrations, whole-suite runs on 2
 * cores):
 * - a rename moves whatever is at the name: writers B and A both judged the dead writer's lock
 *   stale, A moved it aside, C took the lock afresh, and B's rename moved C's lock; B put it back
 *   with link(2) unless D had taken the empty name first, and then C and D both wrote, each
 *   renaming its own merge over the other's (e9265b0 added the put-back; it narrowed the window,
 *   it did not close it). No rename, unlink or link of the name is conditional on which lock is
 *   there, so a breaker judging one lock could always act on another.
 * - a writer descheduled for over `LOCK_STALE_MS` between its read and its rename (a loaded
 *   machine; the suite's 169 files on 2 cores) had its live lock broken; another writer added
 *   its entry, then the late one's rename put back the file it had read, without it.
 * Now every step another writer takes on a lock is conditional on the one it judged:
 * - taking: a directory of the writer's own (`guard-allow.lock.<token>`, its owner file inside) is
 *   renamed to `guard-allow.lock`; rename(2) replaces an empty directory (a lock released) and
 *   fails on one that is not empty (a lock held): no lock is ever taken over another.
 * - breaking: the breaker unlinks `guard-allow.lock/owner.<token>`, the token it read and judged;
 *   when that writer released it meanwhile and a new one took the lock, that name is not there
 *   (tokens are unique) and the unlink fails: a fresh lock is never broken for a stale one, and
 *   of two breakers of one stale lock only one unlinks.
 * - judging: stale means older than `LOCK_STALE_MS` **and** its writer gone: the token names its
 *   pid, start time and pid namespace, and a writer of this namespace that is alive keeps its lock
 *   however slow it is (waiters then fail `EBUSY`, writing nothing). Only a writer of another pid
 *   namespace (or one whose /proc could not be read) is judged by age alone; for it the lock is
 *   checked again just before its rename (`addRegistrationsSync`).
 * - releasing: the writer unlinks its own owner file (a broken lock's is gone already: nothing
 *   else is removed) and then rmdir(2)s the lock, which fails when another writer took it
 *   meanwhile (not empty).
 * A lock file left by an older tether (a regular file) is broken when older than `LOCK_STALE_MS`
 * by unlink(2), which fails on a directory: never on a lock of this kind.
 */
export function lockRegistrations(dir: string): RegistrationsLock {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = `${registrationsPath(dir)}.lock`;
  const me = selfToken();
  const token = `${me.ns}.${me.pid}.${me.startTime}.${randomBytes(8).toString('hex')}`;
  const owner = `owner.${token}`;
  const mine = `${path}.${token}`;
  mkdirSync(mine, { mode: 0o700 });
  const deadline = Date.now() + LOCK_WAIT_MS;
  const drop = () => {
    rmSync(join(mine, owner), { force: true });
    try {
      rmdirSync(mine);
    } catch {
      // not made
    }
  };
  try {
    writeFileSync(join(mine, owner), `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
    for (;;) {
      // Its age starts when it is taken, not when this writer began to wait.
      const t = new Date();
      utimesSync(join(mine, owner), t, t);
      try {
        renameSync(mine, path);
        const held = () => existsSync(join(path, owner));
        const release = () => {
          rmSync(join(path, owner), { force: true });
          try {
            rmdirSync(path);
          } catch {
            // taken by another writer already (not empty), or removed by one that released it
          }
        };
        return Object.assign(release, { held });
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        // ENOTEMPTY/EEXIST: held; ENOTDIR: a lock file of an older tether.
        if (code !== 'ENOTEMPTY' && code !== 'EEXIST' && code !== 'ENOTDIR') throw error;
      }
      if (breakStale(path, me)) continue;
      if (Date.now() > deadline) {
        throw Object.assign(new Error(`${path} is held by another writer (waited ${LOCK_WAIT_MS} ms)`), {
          code: 'EBUSY',
        });
      }
      Atomics.wait(PAUSE, 0, 0, 5);
    }
  } catch (error) {
    drop();
    throw error;
  }
}

// This writer, as its lock's token names it: pid namespace (the inode of /proc/self/ns/pid),
// pid and start time; 0 for what cannot be read (its lock is then judged by age alone).
function selfToken(): { ns: string; pid: number; startTime: number } {
  let ns = '0';
  let startTime = 0;
  try {
    ns = /^pid:\[(\d+)\]$/.exec(readlinkSync('/proc/self/ns/pid'))?.[1] ?? '0';
    startTime = selfIdentity().startTime;
  } catch {
    ns = '0';
  }
  return { ns, pid: process.pid, startTime };
}

// Breaks the lock at `path` when it is stale (see `lockRegistrations`): true when it was broken or
// is gone or free (try again at once), false when it is held.
function breakStale(path: string, me: { ns: string }): boolean {
  let st: Stats;
  try {
    st = lstatSync(path);
  } catch {
    return true; // released meanwhile
  }
  if (!st.isDirectory()) {
    // An older tether's lock file: unlink(2) fails (EISDIR) on a lock of this kind.
    if (Date.now() - st.mtimeMs <= LOCK_STALE_MS) return false;
    try {
      unlinkSync(path);
    } catch {
      // removed by another writer, or a lock of this kind is there now
    }
    return true;
  }
  let names: string[];
  try {
    names = readdirSync(path);
  } catch {
    return true; // released meanwhile
  }
  if (names.length === 0) return true; // released: free to take
  const name = names.find((n) => n.startsWith('owner.'));
  if (names.length !== 1 || name === undefined) return false; // not one of ours: never removed
  const owner = join(path, name);
  let age: number;
  try {
    age = Date.now() - lstatSync(owner).mtimeMs;
  } catch {
    return true; // released or broken meanwhile
  }
  if (age <= LOCK_STALE_MS) return false;
  const [ns, pid, startTime] = name.slice('owner.'.length).split('.');
  if (ns !== '0' && ns === me.ns && Number(startTime) > 0) {
    try {
      if (isAlive({ pid: Number(pid), startTime: Number(startTime) })) return false;
    } catch {
      // /proc unreadable: judged by age
    }
  }
  try {
    unlinkSync(owner); // that writer's lock only: gone (ENOENT) when it is not there any more
  } catch {
    // released, or broken by another writer
  }
  return true;
}
