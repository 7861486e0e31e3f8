// The embedded ledger store: one SQLite file through better-sqlite3 (docs/ledger.md, "SQLite").
// WAL (readers never wait for the writer), a busy timeout, a schema versioned by
// `PRAGMA user_version` and migrated forward in one transaction; a file it cannot read is
// refused with LEDGER_CORRUPT and never rewritten.
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';
import { COLUMNS, fromRow, recordsOf, type SessionRow, toRow } from './rows.js';
import { type Applied, type Ingested, ingestSpool, mergeSpooled, spoolDirOf } from './spool.js';
import {
  addonUnavailable,
  errText,
  MIGRATIONS,
  mapSqliteError,
  preparePath,
  SQLITE_APPLICATION_ID,
  SQLITE_SCHEMA_VERSION,
  sqliteCorrupt,
} from './sqlite-file.js';
import type { StoreHooks } from './store-errors.js';
import type { LedgerStore, ListFilter, SessionRecord } from './types.js';

// better-sqlite3, required when a store opens rather than imported: a process that records
// through the spool (`tether run`) never loads it (docs/ledger.md, "The spool"), and in the
// CLI's bundle a static import would be required at its start (scripts/build-cli.mjs).
let sqlite: typeof BetterSqlite3 | undefined;
function betterSqlite3(): typeof BetterSqlite3 {
  sqlite ??= createRequire(import.meta.url)('better-sqlite3') as typeof BetterSqlite3;
  return sqlite;
}

/**
 * How long a write waits for another writer's lock before LEDGER_LOCKED: 5000 ms. A write holds
 * the lock for well under a millisecond, so 5 s is only reached when something holds the file
 * (a crashed tool's open transaction, a backup taking an exclusive lock).
 */
export const SQLITE_BUSY_TIMEOUT_MS = 5000;

// A synchronous pause (Atomics.wait on a private buffer nothing ever notifies).
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

export { mapSqliteError, SQLITE_APPLICATION_ID, SQLITE_SCHEMA_VERSION } from './sqlite-file.js';

/** Options of `openSqliteStore`. */
export interface SqliteStoreOptions {
  /** Milliseconds a write waits for a lock (`PRAGMA busy_timeout`); default SQLITE_BUSY_TIMEOUT_MS. */
  busyTimeoutMs?: number;
  /** Migrate only up to this schema (the conformance suite's migration check); default the latest. */
  schemaVersion?: number;
  /**
   * Make the file's missing directories (mode 0700). Default true; false: a missing directory is
   * refused (`checkDirectory`), nothing created — `Ledger.open` of a named path.
   */
  makeDirectory?: boolean;
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

// The store. better-sqlite3 is synchronous; the interface is async so that every store looks alike.
export class SqliteStore implements LedgerStore {
  readonly location: string;
  readonly busyTimeoutMs: number;
  private db: BetterSqlite3.Database;
  private readonly hooks: StoreHooks;
  private readonly spool: string;
  private version = 0;

  constructor(path: string, options: SqliteStoreOptions = {}) {
    this.location = path;
    this.busyTimeoutMs = options.busyTimeoutMs ?? SQLITE_BUSY_TIMEOUT_MS;
    this.hooks = options.hooks ?? {};
    const target = options.schemaVersion ?? SQLITE_SCHEMA_VERSION;
    preparePath(path, options.makeDirectory !== false);
    this.spool = spoolDirOf(path); // the file exists now: beside its real path
    this.db = this.connect(path);
    try {
      this.openSteps(target);
    } catch (err) {
      this.db.close();
      if ((err as { code?: unknown }).code !== 'SQLITE_IOERR_SHMSIZE')
        throw mapSqliteError(err, path, 'open');
      // The shared-memory index (`-shm`, 32 KiB) cannot be made: a full disk. In exclusive
      // locking mode, set before the first access, SQLite keeps that index in this process's
      // memory instead (https://www.sqlite.org/wal.html, "Use of WAL Without Shared-Memory"), so
      // the records already there stay readable; other connections wait for this one's close.
      this.db = this.connect(path);
      try {
        this.db.pragma('locking_mode = EXCLUSIVE');
        this.openSteps(target);
      } catch (again) {
        this.db.close();
        throw mapSqliteError(again, path, 'open');
      }
    }
  }

  // A connection to the file: better-sqlite3 loads its compiled addon at the first one.
  private connect(path: string): BetterSqlite3.Database {
    try {
      return new (betterSqlite3())(path, { timeout: this.busyTimeoutMs });
    } catch (err) {
      const code = (err as { code?: unknown } | null)?.code;
      if (typeof code === 'string' && code.startsWith('SQLITE_')) throw mapSqliteError(err, path, 'open');
      // The addon not built (its install script did not run: --ignore-scripts, or npm 11
      // refusing unapproved scripts), or built for another Node. Its first line: `bindings`
      // follows its message with every place it tried, one a line (the cause keeps them).
      throw addonUnavailable(path, errText(err).split('\n')[0] ?? '', err);
    }
  }

  // The opening steps: the file's version checked, WAL, synchronous, the migration.
  private openSteps(target: number): void {
    this.retryBusy(() => {
      this.version = this.readVersion(); // refuses a file that is not ours before anything is written
      this.db.pragma('journal_mode = WAL');
      // A commit is durable against the supervisor's death (SIGKILL, OOM) without an fsync:
      // in WAL mode NORMAL syncs at checkpoints only. What a power loss can take — the last
      // commits — belonged to processes that died with the machine (docs/ledger.md, "The stores").
      this.db.pragma('synchronous = NORMAL');
      if (this.version < target) this.migrate(target);
    });
  }

  // Runs the opening steps again while SQLite answers SQLITE_BUSY, every 5 ms up to the busy
  // timeout: it answers at once, without its busy handler, to a connection that reads or changes
  // the journal mode while another is switching the same new file to WAL (two readers of a new
  // ledger: test/ledger/spool.test.ts, "two readers racing"). Each step can be made again: the
  // migration is one transaction that reads the version afresh.
  private retryBusy(steps: () => void): void {
    const until = Date.now() + this.busyTimeoutMs;
    for (;;) {
      try {
        steps();
        return;
      } catch (err) {
        if (!String((err as { code?: unknown }).code).startsWith('SQLITE_BUSY') || Date.now() >= until)
          throw err;
        Atomics.wait(PAUSE, 0, 0, 5);
      }
    }
  }

  // The file's schema version, refusing a file that is not a tether ledger or is newer than us.
  private readVersion(): number {
    // One statement, so one snapshot: read apart, another process's migration committing in
    // between showed its tables beside the version and application id from before it, and a new
    // ledger read as a database tether did not write.
    const { version, app, tables } = this.db
      .prepare(
        "SELECT (SELECT user_version FROM pragma_user_version) AS version, (SELECT application_id FROM pragma_application_id) AS app, (SELECT count(*) FROM sqlite_master WHERE type = 'table') AS tables",
      )
      .get() as { version: number; app: number; tables: number };
    if (version > SQLITE_SCHEMA_VERSION) {
      throw sqliteCorrupt(
        this.location,
        `its schema version is ${version}, newer than this tether's ${SQLITE_SCHEMA_VERSION} (a newer tether wrote it; upgrade tether to read it)`,
      );
    }
    if (app !== 0 && app !== SQLITE_APPLICATION_ID) {
      throw sqliteCorrupt(
        this.location,
        `it is another application's SQLite database (application_id ${app})`,
      );
    }
    if (app === 0 && version === 0 && tables > 0)
      throw sqliteCorrupt(this.location, 'it is a SQLite database tether did not write');
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
    return this.insertSync(record);
  }

  insertSync(record: SessionRecord): boolean {
    this.ingest();
    return this.run('write', () => this.insertRow(record));
  }

  async get(tag: string): Promise<SessionRecord | null> {
    this.ingest();
    return this.run('read', () => this.getRow(tag));
  }

  async list(filter: ListFilter = {}): Promise<SessionRecord[]> {
    this.ingest(filter.onCorrupt);
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
    return this.run('write', () =>
      this.db
        .transaction(() => {
          const changed = this.updateRow(tag, expected, next);
          if (changed) this.hooks.beforeCommit?.(tag);
          return changed;
        })
        .immediate(),
    );
  }

  /**
   * Takes the spool (`<path>.spool`, written by `tether run`: src/ledger/spool.ts) into the file,
   * each spooled record in its own IMMEDIATE transaction through the transition table. Runs
   * before every read and insert; a missing spool costs one readdir. Throws LEDGER_UNAVAILABLE
   * when the spool cannot be read or written, or what the write throws (LEDGER_LOCKED…).
   */
  ingest(onCorrupt?: ListFilter['onCorrupt']): Ingested {
    return ingestSpool(
      this.spool,
      this.location,
      {
        transaction: (fn) => this.run('write', () => this.db.transaction(fn).immediate()),
        apply: (record) => this.applySpooled(record),
      },
      onCorrupt,
    );
  }

  // One spooled record, inside ingestSpool's transaction.
  private applySpooled(spooled: SessionRecord): Applied {
    let current: SessionRecord | null;
    try {
      current = this.getRow(spooled.tag);
    } catch {
      return 'unreadable'; // the ledger's own row: the spooled copy is kept aside, not applied
    }
    if (current === null) return this.insertRow(spooled) ? 'inserted' : 'conflict';
    const merged = mergeSpooled(current, spooled);
    if (merged === 'conflict') return 'conflict';
    if (merged === null) return 'unchanged';
    return this.updateRow(spooled.tag, current.revision, merged) ? 'merged' : 'conflict';
  }

  private insertRow(record: SessionRecord): boolean {
    const cols = this.columns();
    const values = toRow({ ...record, revision: 1 }).slice(0, cols.length);
    const sql = `INSERT INTO sessions (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')}) ON CONFLICT (tag) DO NOTHING`;
    return this.db.prepare(sql).run(...values).changes === 1;
  }

  private getRow(tag: string): SessionRecord | null {
    const row = this.db.prepare('SELECT * FROM sessions WHERE tag = ?').get(tag) as SessionRow | undefined;
    return row === undefined ? null : fromRow(row, this.location);
  }

  private updateRow(tag: string, expected: number, next: SessionRecord): boolean {
    const cols = this.columns().filter((c) => c !== 'tag' && c !== 'created_at');
    const row = toRow({ ...next, tag, revision: expected + 1 });
    const values = cols.map((c) => row[(COLUMNS as readonly string[]).indexOf(c)] ?? null);
    const sql = `UPDATE sessions SET ${cols.map((c) => `${c} = ?`).join(', ')} WHERE tag = ? AND revision = ?`;
    return this.db.prepare(sql).run(...values, tag, expected).changes === 1;
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
