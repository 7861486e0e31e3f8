// The guard's registrations file (docs/guard.md, "Registrations"), on the writing side: where it
// is and what a line says, shared by `tether guard allow` (src/guard/registrations.ts) and a
// session that ends with kept processes (src/session/keep-registrations.ts), so both write what
// the guard reads. One small text file in the guard's state directory, one registration a line:
// `PID START_TIME EXPIRES_MS` (start time in clock ticks since boot, expiry in ms since the
// epoch). The file is replaced by write-then-rename, so a reader sees the old file or the new,
// never half of one. A bad line is reported with its line number and the others apply: never an
// allow-all or kill-all. The guard's reading side (bounded, with a deadline) stays in src/guard/.

import { randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { TetherError } from '../errors.js';
import type { Identity } from '../proc/identity.js';
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
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = registrationsPath(dir);
  const key = (r: Identity) => `${r.pid}:${r.startTime}`;
  const fresh = new Set(added.map(key));
  const kept = keptAt(old, now).filter((r) => !fresh.has(key(r)));
  const body = [...kept, ...added].map((r) => `${r.pid} ${r.startTime} ${r.expiresAt}\n`).join('');
  const tmp = `${path}.${process.pid}.${now}.tmp`;
  writeFileSync(tmp, HEADER + body, { mode: 0o600, flag: 'wx' });
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
 * `EBUSY`, and the fs error when the directory or file cannot be written.
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
      const path = writeRegistrations(dir, old.entries, added, now);
      // Broken as stale while it wrote: another writer may have replaced the file meanwhile.
      if (lock.held() || attempt >= LOCK_ATTEMPTS) return path;
    } finally {
      lock();
    }
  }
}

/** How often a write is done again when its lock was broken while it wrote. */
export const LOCK_ATTEMPTS = 3;

// A 4-byte cell for Atomics.wait: the one synchronous sleep Node has.
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

/**
 * Takes the writers' lock of `dir` (created, mode 0700, when missing): `guard-allow.lock`, made
 * with O_EXCL. Each writer reads the file, merges and renames a new one over it, so two at once
 * would each drop what the other added (16 writers started in the same millisecond kept 6 to 14
 * of their 16 entries without it). Waits up to `LOCK_WAIT_MS`, breaking a lock older than
 * `LOCK_STALE_MS`. Returns the release. Throws an error with `code` `EBUSY` when the lock stays
 * taken, and the fs error when the directory or lock cannot be made.
 */
/** A writer's hold on the lock: `release` removes the lock only while it is this writer's. */
export interface RegistrationsLock {
  (): void;
  /** Whether the lock is still this writer's (no other writer broke it as stale meanwhile). */
  held(): boolean;
}

export function lockRegistrations(dir: string): RegistrationsLock {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = `${registrationsPath(dir)}.lock`;
  const token = `${process.pid}.${randomBytes(8).toString('hex')}\n`;
  const deadline = Date.now() + LOCK_WAIT_MS;
  const held = () => {
    try {
      return readFileSync(path, 'latin1') === token;
    } catch {
      return false;
    }
  };
  for (;;) {
    try {
      writeFileSync(path, token, { flag: 'wx', mode: 0o600 });
      const release = () => {
        if (held()) rmSync(path, { force: true });
      };
      return Object.assign(release, { held });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    // A stale lock is moved aside under a name of this writer's, then removed: never another
    // writer's lock removed by name. A fresh one moved by a race is its writer's to notice
    // (`held`), and its write is done again.
    if (ageMs(path) > LOCK_STALE_MS) {
      const aside = `${path}.${token.trim()}`;
      try {
        renameSync(path, aside);
        // Two writers may both see the stale lock: one breaks it, a third takes the lock afresh,
        // and the second's rename moves that fresh lock aside. One not stale is put back
        // (link(2) fails when a lock is there again: its writer then notices, `held`, and writes
        // again), never removed: taken from its writer three times, a write ran unlocked and lost
        // another's entries (test/containment/guard-registrations, 2 of 3 whole-suite runs).
        if (ageMs(aside) <= LOCK_STALE_MS) linkSync(aside, path);
      } catch {
        // gone already: released, or broken by another writer; or a lock is there again
      }
      rmSync(aside, { force: true });
    } else if (Date.now() > deadline) {
      throw Object.assign(new Error(`${path} is held by another writer (waited ${LOCK_WAIT_MS} ms)`), {
        code: 'EBUSY',
      });
    } else Atomics.wait(PAUSE, 0, 0, 5);
  }
}

// The age of a file by its mtime, ms (0 when it is gone: it was just released).
function ageMs(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}
