// Transient registrations (docs/guard.md, "Registrations"): `tether guard allow --ttl D PID…`
// spares a process, by pid and start time, until a wall-clock expiry. They live in one small
// text file in the guard's state directory, one registration a line: `PID START_TIME EXPIRES_MS`
// (start time in clock ticks since boot, expiry in ms since the epoch). The file is replaced by
// write-then-rename, so a reader sees the old file or the new, never half of one. A bad line is
// reported with its line number and the others apply: never an allow-all or kill-all.
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { TetherError } from '../errors.js';
import type { Identity } from '../proc/identity.js';
import { readInputFile } from './input-file.js';
import type { Problem } from './patterns.js';

/** One registration: the process (pid + start time in clock ticks) and its expiry (epoch ms). */
export interface Registration extends Identity {
  expiresAt: number;
}

/** The file's name inside the state directory. */
export const REGISTRATION_FILE = 'guard-allow';

const HEADER =
  '# tether guard registrations: PID START_TIME EXPIRES_AT_MS (written by `tether guard allow`)\n';

/** Where the state directory is when `TETHER_GUARD_STATE` is not set. */
export const DEFAULT_STATE_DIR = '/run/tether';

/**
 * The guard's state directory, the one place `tether guard` reads registrations from and `tether
 * guard allow` writes them to: `TETHER_GUARD_STATE` when set, else `/run/tether`. Nothing else
 * (not `XDG_RUNTIME_DIR`, which differs between a login shell and a `docker exec`) moves it: a
 * guard and an `allow` run by different users or shells find the same file.
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
): { entries: Registration[]; problems: Problem[] } {
  const entries: Registration[] = [];
  const problems: Problem[] = [];
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
 * Reads the registrations of `dir` through the bounded reader (src/guard/input-file.ts: a
 * regular file of at most 1 MiB, read within its deadline). A missing file holds none (`read`
 * `missing`, no problem); one refused (a FIFO, a device, too big, late, unreadable) holds none
 * either, and `read` is `refused` with `why`: the caller decides what applies instead. Expired
 * entries are returned too: the caller compares `expiresAt` with its clock.
 */
export async function readRegistrations(dir: string): Promise<{
  entries: Registration[];
  problems: Problem[];
  read: 'ok' | 'missing' | 'refused';
  why?: string;
}> {
  const path = registrationsPath(dir);
  const r = await readInputFile(path);
  if (r.kind === 'missing') return { entries: [], problems: [], read: 'missing' };
  if (r.kind === 'refused') return { entries: [], problems: [], read: 'refused', why: r.why };
  return { ...parseRegistrations(r.text, path), read: 'ok' };
}

/**
 * Adds `added` to the registrations of `dir` (created, mode 0700, when missing), dropping the
 * entries expired at `now` and any older entry for the same identity; writes a temporary file
 * and renames it over the old one. Resolves to the file written and the problems of the old
 * file's lines (they are dropped). Rejects `TetherError` `INVALID_OPTION` when the file there is
 * not one it can read (a FIFO, a device, over 1 MiB: it is not replaced), and with the fs error
 * when the directory or file cannot be written.
 */
export async function addRegistrations(
  dir: string,
  added: Registration[],
  now = Date.now(),
): Promise<{ path: string; problems: Problem[] }> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const old = await readRegistrations(dir);
  const path = registrationsPath(dir);
  if (old.read === 'refused') {
    throw new TetherError(
      'INVALID_OPTION',
      `cannot add to the registrations file ${path}: ${old.why} (set TETHER_GUARD_STATE to the guard's state directory, or remove what is there)`,
    );
  }
  const key = (r: Identity) => `${r.pid}:${r.startTime}`;
  const fresh = new Set(added.map(key));
  const kept = old.entries.filter((r) => r.expiresAt > now && !fresh.has(key(r)));
  const body = [...kept, ...added].map((r) => `${r.pid} ${r.startTime} ${r.expiresAt}\n`).join('');
  const tmp = `${path}.${process.pid}.${now}.tmp`;
  writeFileSync(tmp, HEADER + body, { mode: 0o600 });
  renameSync(tmp, path);
  return { path, problems: old.problems };
}
