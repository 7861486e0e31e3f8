// The embedded ledger store: one SQLite file through better-sqlite3 (docs/ledger.md, "SQLite").
// WAL (readers never wait for the writer), a busy timeout, a schema versioned by
// `PRAGMA user_version` and migrated forward in one transaction; a file it cannot read is
// refused with LEDGER_CORRUPT and never rewritten.
import { closeSync, lstatSync, mkdirSync, openSync, readlinkSync, type Stats, statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { COLUMNS, fromRow, recordsOf, type SessionRow, toRow } from './rows.js';
import { ledgerCorrupt, ledgerLocked, ledgerUnavailable, type StoreHooks } from './store-errors.js';
import type { LedgerStore, ListFilter, SessionRecord } from './types.js';

/**
 * How long a write waits for another writer's lock before LEDGER_LOCKED: 5000 ms. A write holds
 * the lock for well under a millisecond, so 5 s is only reached when something holds the file
 * (a crashed tool's open transaction, a backup taking an exclusive lock).
 */
export const SQLITE_BUSY_TIMEOUT_MS = 5000;

/** `PRAGMA application_id` of a tether ledger ("teth"): a database with another id is not ours. */
export const SQLITE_APPLICATION_ID = 0x74657468;

// Forward migrations: MIGRATIONS[i] takes schema i to i + 1. Never edit one that shipped; add one.
const MIGRATIONS: readonly string[] = [
  // 0 → 1: the sessions table.
  `CREATE TABLE sessions (
     tag TEXT PRIMARY KEY,
     revision INTEGER NOT NULL,
     created_at INTEGER NOT NULL,
     updated_at INTEGER NOT NULL,
     state TEXT NOT NULL,
     supervisor TEXT NOT NULL,
     location TEXT NOT NULL,
     command TEXT NOT NULL,
     outcome TEXT,
     reports TEXT NOT NULL,
     lease_until INTEGER
   );`,
  // 1 → 2: declared long-lived processes, and `list({state})` without a full scan.
  `ALTER TABLE sessions ADD COLUMN kept TEXT NOT NULL DEFAULT '[]';
   CREATE INDEX sessions_by_state ON sessions (state, created_at);`,
];

/** The schema this code writes. A file with a higher `user_version` is refused, never downgraded. */
export const SQLITE_SCHEMA_VERSION = MIGRATIONS.length;

/** Options of `openSqliteStore`. */
export interface SqliteStoreOptions {
  /** Milliseconds a write waits for a lock (`PRAGMA busy_timeout`); default SQLITE_BUSY_TIMEOUT_MS. */
  busyTimeoutMs?: number;
  /** Migrate only up to this schema (the conformance suite's migration check); default the latest. */
  schemaVersion?: number;
  hooks?: StoreHooks;
}

/**
 * Opens (creating it, mode 0600, and its directory, mode 0700, when missing) the SQLite ledger at
 * `path`; an existing file's mode is left as it is. A path that exists and is no regular file
 * (after following symlinks: a directory, a FIFO, a device such as /dev/null) or a dangling
 * symlink is refused with LEDGER_UNAVAILABLE before SQLite opens it.
 * Rejects with a TetherError naming the file: LEDGER_CORRUPT (not a SQLite database, malformed,
 * another application's database, or a schema newer than SQLITE_SCHEMA_VERSION), LEDGER_LOCKED
 * (a migration waited past the busy timeout), LEDGER_UNAVAILABLE (read-only, full, no such directory).
 */
export async function openSqliteStore(path: string, options: SqliteStoreOptions = {}): Promise<SqliteStore> {
  return new SqliteStore(path, options);
}

// `mkdir -p` with mode 0700, one level at a time from the nearest existing ancestor, so that
// each failure is the real one: Node's own recursive mkdirSync loops for ever under /proc
// (mkdir of /proc/x is ENOENT, of /proc EEXIST, again and again) and calls a path under a
// regular file EEXIST. Throws the errno error of the level that failed (ENOTDIR named as such).
function makeDirectories(dir: string): void {
  const missing: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    let isDirectory: boolean | undefined;
    try {
      isDirectory = statSync(d).isDirectory();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err; // ENOTDIR: a file further up, named below
    }
    if (isDirectory === false)
      throw Object.assign(new Error(`ENOTDIR: ${d} is not a directory`), { code: 'ENOTDIR' });
    if (isDirectory) break;
    missing.push(d);
    if (dirname(d) === d) break;
  }
  for (const d of missing.reverse()) mkdirSync(d, { mode: 0o700 });
}

// What a path that is no regular file is, for the refusal.
function kindOf(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

// Before SQLite touches `path`: an existing path must be (or link to) a regular file — SQLite
// would otherwise open a FIFO, /dev/null or a directory and create `<path>-journal` beside it;
// a missing file is created here, mode 0600 (the ledger holds every session's command line), as
// SQLite would create it 0644. An existing file's mode is left as it is. Throws LEDGER_UNAVAILABLE.
function prepareFile(path: string): void {
  let st: Stats | undefined;
  try {
    st = statSync(path); // follows symlinks: a symlink to a regular file is fine
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
      throw ledgerUnavailable(path, `it cannot be inspected (${errText(err)})`, err);
  }
  if (st === undefined) {
    let link: string | undefined;
    try {
      if (lstatSync(path).isSymbolicLink()) link = readlinkSync(path);
    } catch {
      // nothing there at all: created below
    }
    if (link !== undefined)
      throw ledgerUnavailable(
        path,
        `it is a symbolic link to ${link}, which does not exist; remove the link or create its target`,
      );
    try {
      closeSync(openSync(path, 'wx', 0o600));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
        prepareFile(path); // another process made it (or a link) meanwhile: check what it is
        return;
      }
      const mapped = mapSqliteError(err, path, 'open'); // EACCES, EROFS: "cannot be written"
      throw mapped !== err ? mapped : ledgerUnavailable(path, `it cannot be created (${errText(err)})`, err);
    }
    return;
  }
  if (!st.isFile())
    throw ledgerUnavailable(
      path,
      `it is ${kindOf(st)}, not a regular file; point --ledger / TETHER_LEDGER at a file`,
    );
}

// The store. better-sqlite3 is synchronous; the interface is async so that every store looks alike.
export class SqliteStore implements LedgerStore {
  readonly location: string;
  readonly busyTimeoutMs: number;
  private readonly db: Database.Database;
  private readonly hooks: StoreHooks;
  private version: number;

  constructor(path: string, options: SqliteStoreOptions = {}) {
    this.location = path;
    this.busyTimeoutMs = options.busyTimeoutMs ?? SQLITE_BUSY_TIMEOUT_MS;
    this.hooks = options.hooks ?? {};
    const target = options.schemaVersion ?? SQLITE_SCHEMA_VERSION;
    try {
      makeDirectories(dirname(path));
    } catch (err) {
      throw ledgerUnavailable(path, `its directory cannot be created (${errText(err)})`, err);
    }
    prepareFile(path);
    try {
      this.db = new Database(path, { timeout: this.busyTimeoutMs });
    } catch (err) {
      const code = (err as { code?: unknown } | null)?.code;
      if (typeof code === 'string' && code.startsWith('SQLITE_')) throw mapSqliteError(err, path, 'open');
      // better-sqlite3 loads its compiled addon here: not built (its install script did not
      // run: --ignore-scripts, or npm 11 refusing unapproved scripts), or built for another Node.
      throw ledgerUnavailable(
        path,
        `the SQLite addon (better-sqlite3) cannot be loaded (${errText(err)}); build it with ` +
          '`npm install-scripts approve better-sqlite3 && npm rebuild better-sqlite3` ' +
          '(npm 11 runs no install script it was not told to), or record in Postgres (--ledger postgres://…)',
        err,
      );
    }
    try {
      this.version = this.readVersion(); // refuses a file that is not ours before anything is written
      this.db.pragma('journal_mode = WAL');
      // A commit is durable against the supervisor's death (SIGKILL, OOM) without an fsync:
      // in WAL mode NORMAL syncs at checkpoints only. What a power loss can take — the last
      // commits — belonged to processes that died with the machine (docs/ledger.md, "The stores").
      this.db.pragma('synchronous = NORMAL');
      if (this.version < target) this.migrate(target);
    } catch (err) {
      this.db.close();
      throw mapSqliteError(err, path, 'open');
    }
  }

  // The file's schema version, refusing a file that is not a tether ledger or is newer than us.
  private readVersion(): number {
    const version = this.db.pragma('user_version', { simple: true }) as number;
    const app = this.db.pragma('application_id', { simple: true }) as number;
    if (version > SQLITE_SCHEMA_VERSION) {
      throw ledgerCorrupt(
        this.location,
        `its schema version is ${version}, newer than this tether's ${SQLITE_SCHEMA_VERSION} (a newer tether wrote it; upgrade tether to read it)`,
      );
    }
    if (app !== 0 && app !== SQLITE_APPLICATION_ID) {
      throw ledgerCorrupt(
        this.location,
        `it is another application's SQLite database (application_id ${app})`,
      );
    }
    if (app === 0 && version === 0) {
      const tables = this.db
        .prepare("SELECT count(*) AS n FROM sqlite_master WHERE type = 'table'")
        .get() as {
        n: number;
      };
      if (tables.n > 0) throw ledgerCorrupt(this.location, 'it is a SQLite database tether did not write');
    }
    return version;
  }

  // Every step from the file's version to `target` in one IMMEDIATE transaction: a reader sees
  // the old schema's data or the new one's, never a half-migrated file. The version is read again
  // inside the transaction: another process may have migrated between our read and our lock.
  private migrate(target: number): void {
    this.db
      .transaction(() => {
        const now = this.readVersion();
        for (let v = now; v < target; v++) this.db.exec(MIGRATIONS[v] as string);
        if (now < target) {
          this.db.pragma(`application_id = ${SQLITE_APPLICATION_ID}`);
          this.db.pragma(`user_version = ${target}`);
          this.hooks.duringMigration?.(now, target);
        }
        this.version = Math.max(now, target);
      })
      .immediate();
  }

  /** The schema version of the file as this store opened (or migrated) it. */
  get schemaVersion(): number {
    return this.version;
  }

  async insert(record: SessionRecord): Promise<boolean> {
    return this.run('write', () => {
      const cols = this.columns();
      const values = toRow({ ...record, revision: 1 }).slice(0, cols.length);
      const sql = `INSERT INTO sessions (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')}) ON CONFLICT (tag) DO NOTHING`;
      return this.db.prepare(sql).run(...values).changes === 1;
    });
  }

  async get(tag: string): Promise<SessionRecord | null> {
    return this.run('read', () => {
      const row = this.db.prepare('SELECT * FROM sessions WHERE tag = ?').get(tag) as SessionRow | undefined;
      return row === undefined ? null : fromRow(row, this.location);
    });
  }

  async list(filter: ListFilter = {}): Promise<SessionRecord[]> {
    return this.run('read', () => {
      const rows = (
        filter.state === undefined
          ? this.db.prepare('SELECT * FROM sessions ORDER BY created_at, rowid').all()
          : this.db
              .prepare('SELECT * FROM sessions WHERE state = ? ORDER BY created_at, rowid')
              .all(filter.state)
      ) as SessionRow[];
      return recordsOf(rows, filter.onCorrupt);
    });
  }

  async compareAndSet(tag: string, expected: number, next: SessionRecord): Promise<boolean> {
    return this.run('write', () => {
      const cols = this.columns().filter((c) => c !== 'tag' && c !== 'created_at');
      const row = toRow({ ...next, tag, revision: expected + 1 });
      const values = cols.map((c) => row[(COLUMNS as readonly string[]).indexOf(c)] ?? null);
      const sql = `UPDATE sessions SET ${cols.map((c) => `${c} = ?`).join(', ')} WHERE tag = ? AND revision = ?`;
      const update = this.db.prepare(sql);
      return this.db
        .transaction(() => {
          const changed = update.run(...values, tag, expected).changes === 1;
          if (changed) this.hooks.beforeCommit?.(tag);
          return changed;
        })
        .immediate();
    });
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }

  // The columns the file has: schema 1 has no `kept` (a store opened at schema 1 writes without it).
  private columns(): readonly string[] {
    return this.version >= 2 ? COLUMNS : COLUMNS.filter((c) => c !== 'kept');
  }

  private run<T>(action: 'read' | 'write', fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      throw mapSqliteError(err, this.location, action);
    }
  }
}

/**
 * A better-sqlite3 error as the ledger's TetherError (SQLite result codes:
 * https://www.sqlite.org/rescode.html). A TetherError passes through unchanged; an error that is
 * not SQLite's (a bug) is rethrown as it is.
 */
export function mapSqliteError(err: unknown, path: string, action: 'open' | 'read' | 'write'): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || (err as { name?: string }).name === 'TetherError') return err;
  const detail = errText(err);
  if (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT'))
    return ledgerCorrupt(path, `it is not a SQLite database or is malformed (${detail})`, err);
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'))
    return ledgerLocked(path, `another process held it past the busy timeout (${detail})`, err);
  if (code === 'SQLITE_FULL')
    return ledgerUnavailable(
      path,
      `the disk is full (${detail}); free space on its filesystem: the records already there stay readable`,
      err,
    );
  if (code.startsWith('SQLITE_READONLY') || code === 'SQLITE_PERM' || code === 'EROFS' || code === 'EACCES')
    return ledgerUnavailable(
      path,
      `it cannot be written (${detail}); make the file and its directory writable, or point --ledger / TETHER_LEDGER elsewhere`,
      err,
    );
  if (code.startsWith('SQLITE_CANTOPEN'))
    return ledgerUnavailable(
      path,
      `it cannot be opened (${detail}); check that its directory exists and is writable, or point --ledger / TETHER_LEDGER elsewhere`,
      err,
    );
  if (code.startsWith('SQLITE_'))
    return ledgerUnavailable(path, `SQLite failed to ${action} it (${detail})`, err);
  return err;
}

function errText(err: unknown): string {
  const e = err as { code?: string; message?: string };
  return e?.code && e.message && !e.message.includes(e.code)
    ? `${e.code}: ${e.message}`
    : String(e?.message ?? err);
}
