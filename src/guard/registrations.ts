// Transient registrations (docs/guard.md, "Registrations"), on the guard's side: `tether guard
// allow --ttl D PID…` spares a process, by pid and start time, until a wall-clock expiry. The
// file's place and format, and its writing, are src/containment/guard-registrations.ts (a session
// that keeps a service writes there too); the guard reads the file through its bounded reader.
import {
  LOCK_ATTEMPTS,
  lockRegistrations,
  parseRegistrations,
  type Registration,
  type RegistrationProblem,
  registrationsPath,
  writeRegistrations,
} from '../containment/guard-registrations.js';
import { TetherError } from '../errors.js';
import { readInputFile } from './input-file.js';

/**
 * Reads the registrations of `dir` through the bounded reader (src/guard/input-file.ts: a
 * regular file of at most 1 MiB, read within its deadline). A missing file holds none (`read`
 * `missing`, no problem); one refused (a FIFO, a device, too big, late, unreadable) holds none
 * either, and `read` is `refused` with `why`: the caller decides what applies instead. Expired
 * entries are returned too: the caller compares `expiresAt` with its clock.
 */
export async function readRegistrations(dir: string): Promise<{
  entries: Registration[];
  problems: RegistrationProblem[];
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
 * entries expired at `now` and any older entry for the same identity (`writeRegistrations`),
 * under the writers' lock (`lockRegistrations`, shared with the sessions that keep a service).
 * Resolves to the file written and the problems of the old file's lines (they are dropped).
 * Rejects `TetherError` `INVALID_OPTION` when the file there is not one it can read (a FIFO, a
 * device, over 1 MiB: it is not replaced), with the lock's `EBUSY`, and with the fs error when
 * the directory or file cannot be written.
 */
export async function addRegistrations(
  dir: string,
  added: Registration[],
  now = Date.now(),
): Promise<{ path: string; problems: RegistrationProblem[] }> {
  for (let attempt = 1; ; attempt++) {
    const lock = lockRegistrations(dir);
    try {
      const old = await readRegistrations(dir);
      if (old.read === 'refused') {
        throw new TetherError(
          'INVALID_OPTION',
          `cannot add to the registrations file ${registrationsPath(dir)}: ${old.why} (set TETHER_GUARD_STATE to the guard's state directory, or remove what is there)`,
        );
      }
      const path = writeRegistrations(dir, old.entries, added, now);
      // Broken as stale while it wrote: another writer may have replaced the file meanwhile.
      if (lock.held() || attempt >= LOCK_ATTEMPTS) return { path, problems: old.problems };
    } finally {
      lock();
    }
  }
}
