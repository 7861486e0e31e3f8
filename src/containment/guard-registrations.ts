// The guard's registrations file (docs/guard.md, "Registrations"), on the writing side: where it
// is and what a line says, shared by `tether guard allow` (src/guard/registrations.ts) and a
// session that ends with kept processes (src/session/keep-registrations.ts), so both write what
// the guard reads. One small text file in the guard's state directory, one registration a line:
// `PID START_TIME EXPIRES_MS` (start time in clock ticks since boot, expiry in ms since the
// epoch). The file is replaced by write-then-rename, so a reader sees the old file or the new,
// never half of one. A bad line is reported with its line number and the others apply: never an
// allow-all or kill-all. The guard's reading side (bounded, with a deadline) stays in src/guard/.
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Identity } from '../proc/identity.js';

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
  const kept = old.filter((r) => r.expiresAt > now && !fresh.has(key(r)));
  const body = [...kept, ...added].map((r) => `${r.pid} ${r.startTime} ${r.expiresAt}\n`).join('');
  const tmp = `${path}.${process.pid}.${now}.tmp`;
  writeFileSync(tmp, HEADER + body, { mode: 0o600, flag: 'wx' });
  renameSync(tmp, path);
  return path;
}
