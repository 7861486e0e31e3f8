// Transient registrations (docs/guard.md, "Registrations"): `tether guard allow --ttl D PID…`
// spares a process, by pid and start time, until a wall-clock expiry. They live in one small
// text file in the guard's state directory, one registration a line: `PID START_TIME EXPIRES_MS`
// (start time in clock ticks since boot, expiry in ms since the epoch). The file is replaced by
// write-then-rename, so a reader sees the old file or the new, never half of one. A bad line is
// reported with its line number and the others apply: never an allow-all or kill-all.
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Identity } from '../proc/identity.js';
import type { Problem } from './patterns.js';

/** One registration: the process (pid + start time in clock ticks) and its expiry (epoch ms). */
export interface Registration extends Identity {
  expiresAt: number;
}

/** The file's name inside the state directory. */
export const REGISTRATION_FILE = 'guard-allow';

const HEADER =
  '# tether guard registrations: PID START_TIME EXPIRES_AT_MS (written by `tether guard allow`)\n';

/**
 * The guard's state directory: `TETHER_GUARD_STATE`, else `$XDG_RUNTIME_DIR/tether`, else
 * `/run/tether`.
 */
export function stateDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.TETHER_GUARD_STATE) return env.TETHER_GUARD_STATE;
  if (env.XDG_RUNTIME_DIR) return join(env.XDG_RUNTIME_DIR, 'tether');
  return '/run/tether';
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
 * Reads the registrations of `dir`. A missing file holds none (no problem); an unreadable one is
 * a problem. Expired entries are returned too: the caller compares `expiresAt` with its clock.
 */
export function readRegistrations(dir: string): { entries: Registration[]; problems: Problem[] } {
  const path = join(dir, REGISTRATION_FILE);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { entries: [], problems: [] };
    return {
      entries: [],
      problems: [
        {
          source: path,
          message: `cannot read the registrations (${code ?? (error as Error).message}): none apply`,
        },
      ],
    };
  }
  return parseRegistrations(text, path);
}

/**
 * Adds `added` to the registrations of `dir` (created, mode 0700, when missing), dropping the
 * entries expired at `now` and any older entry for the same identity; writes a temporary file
 * and renames it over the old one. Returns the problems of the old file's lines (they are
 * dropped). Throws the fs error when the directory or file cannot be written.
 */
export function addRegistrations(dir: string, added: Registration[], now = Date.now()): Problem[] {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const { entries, problems } = readRegistrations(dir);
  const key = (r: Identity) => `${r.pid}:${r.startTime}`;
  const fresh = new Set(added.map(key));
  const kept = entries.filter((r) => r.expiresAt > now && !fresh.has(key(r)));
  const body = [...kept, ...added].map((r) => `${r.pid} ${r.startTime} ${r.expiresAt}\n`).join('');
  const path = join(dir, REGISTRATION_FILE);
  const tmp = `${path}.${process.pid}.${now}.tmp`;
  writeFileSync(tmp, HEADER + body, { mode: 0o600 });
  renameSync(tmp, path);
  return problems;
}
