// Reading a SQLite ledger that cannot be opened where it is (docs/ledger.md, "A read-only
// ledger"): its file, directory or filesystem is read-only, so SQLite can make neither the WAL
// index (`-shm`) a reader of a WAL file needs nor take the spool in. `tether ls` and `show` then
// read a private copy — the file, its `-wal` and its spool's sessions — and the store they get
// refuses every write: nothing where the ledger is is written, reset or rewritten.
import {
  accessSync,
  chmodSync,
  constants,
  copyFileSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { TetherError } from '../errors.js';
import { openSqliteStore } from './sqlite.js';
import { spoolDirOf } from './sqlite-file.js';
import { ledgerUnavailable } from './store-errors.js';
import type { LedgerStore, ListFilter, SessionRecord } from './types.js';

/**
 * Why the SQLite ledger at `path` cannot be written where it is: `EROFS` (a read-only
 * filesystem) or `EACCES` (a mode this user cannot write: the file; its directory, where a
 * reader makes the `-shm`; its spool, which a reader takes in); undefined when all can be, or
 * when the file is not there.
 */
export function readOnlyReason(path: string): string | undefined {
  if (lstatSync(path, { throwIfNoEntry: false }) === undefined) return undefined;
  const spool = spoolDirOf(path);
  const places: [string, string][] = [
    ['the file', path],
    ['its directory', dirname(path)],
  ];
  if (lstatSync(spool, { throwIfNoEntry: false })?.isDirectory()) places.push(['its spool', spool]);
  for (const [what, p] of places) {
    try {
      accessSync(p, constants.W_OK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? 'unknown';
      if (code === 'EROFS') return 'EROFS: on a read-only filesystem';
      if (code === 'EACCES') return `EACCES: ${what} is not writable by this user`;
    }
  }
  return undefined;
}

/**
 * A store reading a private copy of the ledger at `path` (the file, its `-wal` when there, and the
 * regular files of its spool), made in a new 0700 directory that `close` removes. Its `location`
 * is `path`; `insert` and `compareAndSet` reject with LEDGER_UNAVAILABLE saying why (`reason`).
 */
export async function openSqliteSnapshot(path: string, reason: string): Promise<LedgerStore> {
  const dir = mkdtempSync(join(tmpdir(), 'tether-ledger-snapshot-'));
  try {
    const copy = join(dir, 'ledger.db');
    try {
      copyPrivate(path, copy);
      if (lstatSync(`${path}-wal`, { throwIfNoEntry: false })?.isFile())
        copyPrivate(`${path}-wal`, `${copy}-wal`);
      copySpool(spoolDirOf(path), join(dir, 'ledger.db.spool'));
    } catch (err) {
      throw ledgerUnavailable(
        path,
        `it is read-only (${reason}), and a copy to read could not be made in ${tmpdir()} (${(err as Error).message})`,
        err,
      );
    }
    const inner = await openSqliteStore(copy);
    return new SnapshotStore(path, reason, inner, dir);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    if (err instanceof TetherError) throw renamed(err, join(dir, 'ledger.db'), path);
    throw err;
  }
}

// The spool's regular files (sessions waiting to be taken in), copied as they are.
function copySpool(from: string, to: string): void {
  let names: string[];
  try {
    names = readdirSync(from);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  mkdirSync(to, { mode: 0o700 });
  for (const name of names) {
    if (lstatSync(join(from, name)).isFile()) copyPrivate(join(from, name), join(to, name));
  }
}

// A copy this user can write (0600, whatever the original's mode: a 0400 file copies as 0400).
function copyPrivate(from: string, to: string): void {
  copyFileSync(from, to);
  chmodSync(to, 0o600);
}

// An error of the copy, naming the ledger instead of the copy.
function renamed(err: TetherError, copy: string, path: string): TetherError {
  if (!err.message.includes(copy)) return err;
  return new TetherError(err.code, err.message.replaceAll(copy, path), { cause: err });
}

// The copy's store, read-only, under the ledger's own name.
class SnapshotStore implements LedgerStore {
  constructor(
    readonly location: string,
    /** Why the ledger is read from a copy (EROFS, EACCES). */
    readonly readOnly: string,
    private readonly inner: LedgerStore,
    private readonly dir: string,
  ) {}

  async insert(_record: SessionRecord): Promise<boolean> {
    throw this.refused();
  }

  async compareAndSet(_tag: string, _expected: number, _next: SessionRecord): Promise<boolean> {
    throw this.refused();
  }

  async get(tag: string): Promise<SessionRecord | null> {
    return this.inner.get(tag).catch((err) => this.named(err));
  }

  async list(filter?: ListFilter): Promise<SessionRecord[]> {
    return this.inner.list(filter).catch((err) => this.named(err));
  }

  async close(): Promise<void> {
    try {
      await this.inner.close();
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }

  // The copy's error under the ledger's name.
  private named(err: unknown): never {
    throw err instanceof TetherError ? renamed(err, this.inner.location, this.location) : err;
  }

  private refused(): TetherError {
    return ledgerUnavailable(
      this.location,
      `it is read-only (${this.readOnly}): it was only read, from a copy`,
    );
  }
}
