// The shared ledger store: Postgres through `pg`, an optional peer dependency loaded only when
// a postgres:// URL is opened (docs/ledger.md, "Postgres"). The same schema as the SQLite store,
// in its own Postgres schema (default `tether`), versioned in a table and migrated forward in one
// transaction under an advisory lock; the compare-and-set is one `UPDATE … WHERE tag AND revision`.
import { createRequire } from 'node:module';
import type { Pool, PoolClient, PoolConfig } from 'pg';
import { COLUMNS, fromRow, recordsOf, type SessionRow, toRow } from './rows.js';
import { ledgerCorrupt, ledgerLocked, ledgerUnavailable, type StoreHooks } from './store-errors.js';
import { redactUrl } from './target.js';
import type { LedgerStore, ListFilter, SessionRecord } from './types.js';

/** Milliseconds a statement waits for a row or table lock before LEDGER_LOCKED (`lock_timeout`). */
export const POSTGRES_LOCK_TIMEOUT_MS = 5000;
/** Milliseconds a connection attempt waits before LEDGER_UNAVAILABLE. */
export const POSTGRES_CONNECT_TIMEOUT_MS = 10_000;

// Forward migrations, as in the SQLite store: MIGRATIONS[i] takes schema i to i + 1. `%s` is the schema.
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE %s.sessions (
     seq BIGSERIAL NOT NULL,
     tag TEXT PRIMARY KEY,
     revision BIGINT NOT NULL,
     created_at BIGINT NOT NULL,
     updated_at BIGINT NOT NULL,
     state TEXT NOT NULL,
     supervisor TEXT NOT NULL,
     location TEXT NOT NULL,
     command TEXT NOT NULL,
     outcome TEXT,
     reports TEXT NOT NULL,
     lease_until BIGINT
   )`,
  `ALTER TABLE %s.sessions ADD COLUMN kept TEXT NOT NULL DEFAULT '[]';
   CREATE INDEX sessions_by_state ON %s.sessions (state, created_at)`,
];

/** The schema version this code writes; a database at a higher one is refused, never downgraded. */
export const POSTGRES_SCHEMA_VERSION = MIGRATIONS.length;

/** Options of `openPostgresStore`. */
export interface PostgresStoreOptions {
  /** The Postgres schema holding the ledger's tables (an identifier: letters, digits, _); default `tether`. */
  schema?: string;
  /** Migrate only up to this version (the conformance suite's migration check); default the latest. */
  schemaVersion?: number;
  lockTimeoutMs?: number;
  connectTimeoutMs?: number;
  hooks?: StoreHooks;
}

type PgModule = { Pool: new (config: PoolConfig) => Pool };

// `pg` required when a postgres:// URL is used, so that tether runs without it until then (a
// require, not a dynamic import: the CLI's bundle has no loader for one, scripts/build-cli.mjs).
async function loadPg(location: string): Promise<PgModule> {
  try {
    const mod = createRequire(import.meta.url)('pg') as { default?: PgModule } & PgModule;
    return mod.default ?? mod;
  } catch (err) {
    throw ledgerUnavailable(
      location,
      `the Postgres driver 'pg' is not installed (${(err as Error).message.split('\n')[0]}); run: npm install pg`,
      err,
    );
  }
}

/**
 * Opens the Postgres ledger at `url` (`postgres://user:password@host:port/db`), creating its
 * schema and tables when missing. `location` is the URL without its password. Rejects with
 * LEDGER_UNAVAILABLE (no `pg`, unreachable, authentication, a read-only server), LEDGER_LOCKED
 * (a lock waited past lockTimeoutMs) or LEDGER_CORRUPT (a schema version newer than this code's).
 */
export async function openPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<PostgresStore> {
  const location = redactUrl(url);
  const schema = options.schema ?? 'tether';
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw ledgerUnavailable(
      location,
      `schema ${JSON.stringify(schema)} is not a plain lower-case identifier`,
    );
  }
  const { Pool } = await loadPg(location);
  const pool = new Pool({
    connectionString: url,
    max: 4,
    connectionTimeoutMillis: options.connectTimeoutMs ?? POSTGRES_CONNECT_TIMEOUT_MS,
    lock_timeout: options.lockTimeoutMs ?? POSTGRES_LOCK_TIMEOUT_MS,
  });
  // An idle client's error (the server restarted) must not crash the process: the next query reports it.
  pool.on('error', () => {});
  const store = new PostgresStore(pool, location, schema, options.hooks ?? {});
  try {
    await store.migrate(options.schemaVersion ?? POSTGRES_SCHEMA_VERSION);
  } catch (err) {
    await pool.end().catch(() => {});
    throw mapPgError(err, location, 'open');
  }
  return store;
}

// The store. Every method takes a pooled connection; a compare-and-set is one transaction.
export class PostgresStore implements LedgerStore {
  private version = 0;

  constructor(
    private readonly pool: Pool,
    readonly location: string,
    readonly schema: string,
    private readonly hooks: StoreHooks,
  ) {}

  /** The schema version as this store opened (or migrated) it. */
  get schemaVersion(): number {
    return this.version;
  }

  /** @internal Brings the schema to `target` under an advisory lock, in one transaction. */
  async migrate(target: number): Promise<void> {
    await this.transaction(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`tether.ledger.${this.schema}`]);
      await c.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${this.schema}.ledger_schema (version INTEGER NOT NULL)`);
      const got = await c.query<{ version: number }>(`SELECT version FROM ${this.schema}.ledger_schema`);
      const now = got.rows[0]?.version ?? 0;
      if (now > POSTGRES_SCHEMA_VERSION) {
        throw ledgerCorrupt(
          this.location,
          `schema ${this.schema} is at version ${now}, newer than this tether's ${POSTGRES_SCHEMA_VERSION} (a newer tether wrote it; upgrade tether to use it)`,
        );
      }
      for (let v = now; v < target; v++) {
        await c.query((MIGRATIONS[v] as string).replaceAll('%s', this.schema));
      }
      if (now < target) {
        await c.query(`DELETE FROM ${this.schema}.ledger_schema`);
        await c.query(`INSERT INTO ${this.schema}.ledger_schema (version) VALUES ($1)`, [target]);
        await this.hooks.duringMigration?.(now, target);
      }
      this.version = Math.max(now, target);
    });
  }

  async insert(record: SessionRecord): Promise<boolean> {
    return this.run('write', async () => {
      const cols = this.columns();
      const values = toRow({ ...record, revision: 1 }).slice(0, cols.length);
      const sql = `INSERT INTO ${this.schema}.sessions (${cols.join(', ')}) VALUES (${cols.map((_, i) => `$${i + 1}`).join(', ')}) ON CONFLICT (tag) DO NOTHING`;
      return (await this.pool.query(sql, values)).rowCount === 1;
    });
  }

  async get(tag: string): Promise<SessionRecord | null> {
    return this.run('read', async () => {
      const r = await this.pool.query<SessionRow>(`SELECT * FROM ${this.schema}.sessions WHERE tag = $1`, [
        tag,
      ]);
      return r.rows[0] === undefined ? null : fromRow(r.rows[0], this.location);
    });
  }

  async list(filter: ListFilter = {}): Promise<SessionRecord[]> {
    return this.run('read', async () => {
      const r =
        filter.state === undefined
          ? await this.pool.query<SessionRow>(
              `SELECT * FROM ${this.schema}.sessions ORDER BY created_at, seq`,
            )
          : await this.pool.query<SessionRow>(
              `SELECT * FROM ${this.schema}.sessions WHERE state = $1 ORDER BY created_at, seq`,
              [filter.state],
            );
      return recordsOf(r.rows, filter.onCorrupt);
    });
  }

  async compareAndSet(tag: string, expected: number, next: SessionRecord): Promise<boolean> {
    return this.run('write', () =>
      this.transaction(async (c) => {
        const cols = this.columns().filter((col) => col !== 'tag' && col !== 'created_at');
        const row = toRow({ ...next, tag, revision: expected + 1 });
        const values = cols.map((col) => row[(COLUMNS as readonly string[]).indexOf(col)] ?? null);
        const n = cols.length;
        const sql = `UPDATE ${this.schema}.sessions SET ${cols.map((col, i) => `${col} = $${i + 1}`).join(', ')} WHERE tag = $${n + 1} AND revision = $${n + 2}`;
        const changed = (await c.query(sql, [...values, tag, expected])).rowCount === 1;
        if (changed) await this.hooks.beforeCommit?.(tag);
        return changed;
      }),
    );
  }

  async close(): Promise<void> {
    await this.pool.end();
  }

  private columns(): readonly string[] {
    return this.version >= 2 ? COLUMNS : COLUMNS.filter((c) => c !== 'kept');
  }

  private async transaction<T>(fn: (c: PoolClient) => Promise<T>): Promise<T> {
    const c = await this.pool.connect();
    let broken = false;
    try {
      await c.query('BEGIN');
      const result = await fn(c);
      await c.query('COMMIT');
      return result;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => {
        broken = true;
      });
      throw err;
    } finally {
      c.release(broken);
    }
  }

  private async run<T>(action: 'read' | 'write', fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw mapPgError(err, this.location, action);
    }
  }
}

/**
 * A `pg` error as the ledger's TetherError, by SQLSTATE (Postgres "Appendix A. Error Codes") or
 * Node errno. A TetherError passes through; messages name the URL without its password.
 */
export function mapPgError(err: unknown, location: string, action: 'open' | 'read' | 'write'): unknown {
  if ((err as { name?: string } | null)?.name === 'TetherError') return err;
  const code = String((err as { code?: unknown } | null)?.code ?? '');
  const detail = `${code ? `${code}: ` : ''}${(err as Error)?.message ?? String(err)}`;
  if (code === '55P03' || code === '40P01' || code === '57014')
    return ledgerLocked(location, `a lock was held past the lock timeout (${detail})`, err);
  if (code === 'XX001' || code === 'XX002')
    return ledgerCorrupt(location, `Postgres reports corrupted data (${detail})`, err);
  if (code === '53100') return ledgerUnavailable(location, `the server's disk is full (${detail})`, err);
  if (code === '25006') return ledgerUnavailable(location, `the server is read-only (${detail})`, err);
  if (code.startsWith('28')) return ledgerUnavailable(location, `authentication failed (${detail})`, err);
  if (code === '3D000') return ledgerUnavailable(location, `no such database (${detail}); create it`, err);
  if (
    code.startsWith('08') ||
    code.startsWith('57P') ||
    /^E[A-Z]+$/.test(code) ||
    /timeout|terminated/i.test(detail)
  )
    return ledgerUnavailable(location, `the server cannot be reached (${detail})`, err);
  if (code !== '') return ledgerUnavailable(location, `Postgres failed to ${action} it (${detail})`, err);
  return err;
}
