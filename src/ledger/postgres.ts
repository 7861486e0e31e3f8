// The shared ledger store: Postgres through `pg`, an optional peer dependency loaded only when
// a postgres:// URL is opened (docs/ledger.md, "Postgres"). The same schema as the SQLite store,
// in its own Postgres schema (default `tether`), versioned in a table and migrated forward in one
// transaction under an advisory lock (taken only when the schema is behind); the compare-and-set
// is one `UPDATE … WHERE tag AND revision`.
// A store that fails, never crashes: every connection's 'error' has a listener (the pool's while
// idle, the store's while held), every statement has a deadline, and `close` ends connections a
// frozen server never answers (docs/ledger.md, "The stores").
import { createRequire } from 'node:module';
import type { Pool, PoolClient, PoolConfig, QueryResult, QueryResultRow } from 'pg';
import { type GateTimeout, PoolGate } from './pool-gate.js';
import { COLUMNS, fromRow, recordsOf, type SessionRow, toRow } from './rows.js';
import { ledgerCorrupt, ledgerLocked, ledgerUnavailable, type StoreHooks } from './store-errors.js';
import { redactUrl } from './target.js';
import type { LedgerStore, ListFilter, SessionRecord } from './types.js';

/** Milliseconds a statement waits for a row or table lock before LEDGER_LOCKED (`lock_timeout`). */
export const POSTGRES_LOCK_TIMEOUT_MS = 5000;
/** Milliseconds a connection attempt lasts before LEDGER_UNAVAILABLE (`connectionTimeoutMillis`). */
export const POSTGRES_CONNECT_TIMEOUT_MS = 10_000;
/** Connections one store holds at most (pg's pool `max`); further operations wait in turn. */
export const POSTGRES_POOL_SIZE = 4;
/**
 * Milliseconds an operation waits in turn for one of the POSTGRES_POOL_SIZE connections before
 * LEDGER_UNAVAILABLE ("stayed busy"): longer than a few statement deadlines, so that a hundred
 * writers of one process queue behind each other, and a server that stopped answering still
 * fails each of them within it (src/ledger/pool-gate.ts).
 */
export const POSTGRES_QUEUE_TIMEOUT_MS = 30_000;
/**
 * Milliseconds a statement waits for its answer before LEDGER_UNAVAILABLE, its connection then
 * closed (pg's client-side `query_timeout`: it also bounds a server that no longer answers at
 * all — stopped, frozen, cut off — which a server-side `statement_timeout` cannot). Longer than
 * the lock timeout, so that a lock held by another writer is LEDGER_LOCKED, not this.
 */
export const POSTGRES_STATEMENT_TIMEOUT_MS = 10_000;
/** Milliseconds `close` waits for connections to end in order before it cuts them. */
export const POSTGRES_CLOSE_TIMEOUT_MS = 1000;
/** Milliseconds each operation is given once `hurry()` was called (a caller asked to stop). */
export const POSTGRES_HURRY_MS = 2000;

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
  /** `lock_timeout`, ms; default POSTGRES_LOCK_TIMEOUT_MS. */
  lockTimeoutMs?: number;
  /** `connectionTimeoutMillis`, ms; default POSTGRES_CONNECT_TIMEOUT_MS. */
  connectTimeoutMs?: number;
  /** The wait in turn for a pooled connection, ms (0: none); default POSTGRES_QUEUE_TIMEOUT_MS. */
  queueTimeoutMs?: number;
  /** Each statement's deadline (`query_timeout`), ms; default POSTGRES_STATEMENT_TIMEOUT_MS. */
  statementTimeoutMs?: number;
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
  const statementTimeoutMs = options.statementTimeoutMs ?? POSTGRES_STATEMENT_TIMEOUT_MS;
  const pool = new Pool({
    connectionString: url,
    max: POSTGRES_POOL_SIZE,
    connectionTimeoutMillis: options.connectTimeoutMs ?? POSTGRES_CONNECT_TIMEOUT_MS,
    lock_timeout: options.lockTimeoutMs ?? POSTGRES_LOCK_TIMEOUT_MS,
    query_timeout: statementTimeoutMs,
  });
  // An idle client's error (the server restarted) must not crash the process: the next query
  // reports it. A held client's is the store's (`PostgresStore.hold`).
  pool.on('error', () => {});
  const store = new PostgresStore(
    pool,
    location,
    schema,
    options.hooks ?? {},
    statementTimeoutMs,
    options.queueTimeoutMs ?? POSTGRES_QUEUE_TIMEOUT_MS,
  );
  try {
    await store.migrate(options.schemaVersion ?? POSTGRES_SCHEMA_VERSION);
  } catch (err) {
    await store.close(); // bounded: a frozen server never answers a goodbye
    throw mapPgError(err, location, 'open');
  }
  return store;
}

// The store. Every method takes a pooled connection; a compare-and-set is one transaction.
export class PostgresStore implements LedgerStore {
  private version = 0;
  // Every connection the pool holds, so that `close` can cut those a frozen server never lets end.
  private readonly clients = new Set<PoolClient>();
  // The operations under way (each holds, or waits for, one connection), for `hurry`.
  private readonly pending = new Set<{ hurry(ms: number): void }>();
  private hurryMs: number | undefined;
  // The operations' turns for the pool's connections: pg's pool never queues behind it.
  private readonly gate = new PoolGate(POSTGRES_POOL_SIZE);

  constructor(
    private readonly pool: Pool,
    readonly location: string,
    readonly schema: string,
    private readonly hooks: StoreHooks,
    /** Each statement's deadline, ms (for messages; the pool enforces it). */
    readonly statementTimeoutMs = POSTGRES_STATEMENT_TIMEOUT_MS,
    /** The wait in turn for a pooled connection, ms (0: none). */
    readonly queueTimeoutMs = POSTGRES_QUEUE_TIMEOUT_MS,
  ) {
    pool.on('connect', (c) => this.clients.add(c));
    pool.on('remove', (c) => this.clients.delete(c));
  }

  /** The schema version as this store opened (or migrated) it. */
  get schemaVersion(): number {
    return this.version;
  }

  /**
   * @internal Brings the schema to `target` under an advisory lock, in one transaction. The
   * version is read first without the lock: a schema already at `target` (every open but the
   * first of each version) takes no lock, so that concurrent opens never queue behind it.
   */
  async migrate(target: number): Promise<void> {
    const current = await this.storedVersion();
    if (current !== undefined && current >= target) {
      this.version = this.checkedVersion(current);
      return;
    }
    await this.transaction(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`tether.ledger.${this.schema}`]);
      await c.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${this.schema}.ledger_schema (version INTEGER NOT NULL)`);
      const got = await c.query<{ version: number }>(`SELECT version FROM ${this.schema}.ledger_schema`);
      const now = this.checkedVersion(got.rows[0]?.version ?? 0);
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

  // The stored schema version, read without a lock; undefined when the schema or its version
  // table does not exist yet (SQLSTATE 3F000 invalid_schema_name, 42P01 undefined_table).
  private async storedVersion(): Promise<number | undefined> {
    try {
      const got = await this.query<{ version: number }>(`SELECT version FROM ${this.schema}.ledger_schema`);
      return got.rows[0]?.version;
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (code === '3F000' || code === '42P01') return undefined;
      throw err;
    }
  }

  // A stored version this code can use; LEDGER_CORRUPT for one a newer tether wrote.
  private checkedVersion(now: number): number {
    if (now > POSTGRES_SCHEMA_VERSION)
      throw ledgerCorrupt(
        this.location,
        `schema ${this.schema} is at version ${now}, newer than this tether's ${POSTGRES_SCHEMA_VERSION} (a newer tether wrote it; upgrade tether to use it)`,
      );
    return now;
  }

  async insert(record: SessionRecord): Promise<boolean> {
    return this.run('write', async () => {
      const cols = this.columns();
      const values = toRow({ ...record, revision: 1 }).slice(0, cols.length);
      const sql = `INSERT INTO ${this.schema}.sessions (${cols.join(', ')}) VALUES (${cols.map((_, i) => `$${i + 1}`).join(', ')}) ON CONFLICT (tag) DO NOTHING`;
      return (await this.query(sql, values)).rowCount === 1;
    });
  }

  async get(tag: string): Promise<SessionRecord | null> {
    return this.run('read', async () => {
      const r = await this.query<SessionRow>(`SELECT * FROM ${this.schema}.sessions WHERE tag = $1`, [tag]);
      return r.rows[0] === undefined ? null : fromRow(r.rows[0], this.location);
    });
  }

  async list(filter: ListFilter = {}): Promise<SessionRecord[]> {
    return this.run('read', async () => {
      const r =
        filter.state === undefined
          ? await this.query<SessionRow>(`SELECT * FROM ${this.schema}.sessions ORDER BY created_at, seq`)
          : await this.query<SessionRow>(
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

  /**
   * Gives every operation under way, and every later one, at most `ms` more (default
   * POSTGRES_HURRY_MS) instead of a statement's full deadline: one still waiting then has its
   * connection cut and fails with LEDGER_UNAVAILABLE. For a caller told to stop (`tether run`
   * on a signal): a live server answers well within it, a frozen one no longer holds it up.
   */
  hurry(ms = POSTGRES_HURRY_MS): void {
    if (this.hurryMs !== undefined) return;
    this.hurryMs = ms;
    for (const op of this.pending) op.hurry(ms);
  }

  /**
   * Ends the pool: idle connections at once, held ones as their statement ends. After
   * POSTGRES_CLOSE_TIMEOUT_MS (a frozen server answers neither) every connection is cut, and the
   * statements still waiting fail with LEDGER_UNAVAILABLE. Resolves within twice that, never rejects.
   */
  async close(): Promise<void> {
    const ended = this.pool.end().then(
      () => true,
      () => true,
    );
    // Hurried (a caller is stopping): no wait for a goodbye a frozen server would never answer.
    if (await within(ended, this.hurryMs === undefined ? POSTGRES_CLOSE_TIMEOUT_MS : 0)) return;
    for (const c of this.clients) cut(c);
    await within(ended, POSTGRES_CLOSE_TIMEOUT_MS);
  }

  private columns(): readonly string[] {
    return this.version >= 2 ? COLUMNS : COLUMNS.filter((c) => c !== 'kept');
  }

  // One connection held for `fn`. While held, its 'error' (the server went away: pg emits it
  // besides failing the statement) is listened to here — without a listener Node throws it and
  // the process dies — and a connection lost or past its deadline is discarded, never reused.
  // After `hurry`, the operation (its wait for a connection included) is cut at its deadline.
  private async hold<T>(fn: (c: PoolClient, lost: () => Error | undefined) => Promise<T>): Promise<T> {
    let client: PoolClient | undefined;
    let leave: (() => void) | undefined;
    let lost: Error | undefined;
    let giveUp: ((err: Error) => void) | undefined;
    let timer: NodeJS.Timeout | undefined;
    const waiting = new AbortController();
    const op = {
      hurry: (ms: number) => {
        timer ??= setTimeout(() => {
          const late = new Error(`Connection terminated: given up ${ms} ms after hurry()`);
          lost ??= late;
          if (client) cut(client);
          else {
            waiting.abort(late);
            giveUp?.(late);
          }
        }, ms);
      },
    };
    const onError = (err: Error) => {
      lost ??= err;
    };
    this.pending.add(op);
    if (this.hurryMs !== undefined) op.hurry(this.hurryMs);
    try {
      const connecting = this.connect(waiting.signal);
      const abandoned = new Promise<never>((_, reject) => {
        giveUp = reject;
      });
      try {
        ({ client, leave } = await Promise.race([connecting, abandoned]));
      } catch (err) {
        // A connection that comes after all goes back to the pool, and its turn to the next.
        connecting.then(
          (got) => {
            got.client.release();
            got.leave();
          },
          () => {},
        );
        throw err;
      }
      client.on('error', onError);
      try {
        if (lost) throw lost; // given up as it came: released below, discarded
        return await fn(client, () => lost);
      } catch (err) {
        if (connectionLost(err)) lost ??= err as Error;
        throw err;
      } finally {
        client.release(lost ?? false);
        client.removeListener('error', onError);
        leave();
      }
    } finally {
      clearTimeout(timer);
      this.pending.delete(op);
    }
  }

  // A connection of the pool, once this operation's turn came (`gate`): pg's connect deadline
  // then times a real connection attempt, never the wait behind the other operations.
  private async connect(signal: AbortSignal): Promise<{ client: PoolClient; leave: () => void }> {
    const leave = await this.gate.enter(this.queueTimeoutMs, (t) => this.busy(t), signal);
    try {
      return { client: await this.pool.connect(), leave };
    } catch (err) {
      leave();
      throw err;
    }
  }

  // A wait in turn past its deadline: every connection stayed busy (not an unreachable server).
  private busy(t: GateTimeout): Error {
    return ledgerUnavailable(
      this.location,
      `all ${this.gate.size} of this process's connections to it stayed busy for ${t.waitedMs} ms (${t.holding} operations holding them, ${t.waiting} waiting in turn): the server answers too slowly for this many concurrent writes`,
    );
  }

  // One statement on a held connection (pg's pool.query, with `hold`'s listener and deadline).
  private async query<R extends QueryResultRow>(sql: string, values?: unknown[]): Promise<QueryResult<R>> {
    return this.hold((c) => c.query<R>(sql, values));
  }

  // One transaction on a held connection. A lost or timed-out connection is not rolled back (a
  // ROLLBACK there would wait out a second deadline): `hold` discards it.
  private async transaction<T>(fn: (c: PoolClient) => Promise<T>): Promise<T> {
    return this.hold(async (c, lost) => {
      let committing = false;
      try {
        await c.query('BEGIN');
        const result = await fn(c);
        committing = true;
        await c.query('COMMIT');
        return result;
      } catch (err) {
        if (lost() === undefined && !connectionLost(err)) {
          await c.query('ROLLBACK').catch((e: Error) => {
            throw new RollbackFailed(err, e);
          });
          throw err;
        }
        throw committing ? new InDoubt(lost() ?? (err as Error)) : err;
      }
    });
  }

  private async run<T>(action: 'read' | 'write', fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (this.hurryMs !== undefined && connectionLost(err) && !(err instanceof InDoubt))
        throw ledgerUnavailable(
          this.location,
          `the server did not answer within ${this.hurryMs} ms of being told to hurry (the caller is stopping); its connection was closed (${(err as Error).message})`,
          err,
        );
      throw mapPgError(err, this.location, action, this.statementTimeoutMs);
    }
  }
}

// A transaction whose ROLLBACK failed as well: the first error is the one to report, and the
// connection, in an unknown state, is discarded (`connectionLost`).
class RollbackFailed extends Error {
  readonly code = 'ROLLBACK_FAILED';
  constructor(
    readonly first: unknown,
    readonly rollback: Error,
  ) {
    super(rollback.message);
  }
}

// A COMMIT whose connection was lost before its answer: the write may or may not have landed.
class InDoubt extends Error {
  constructor(readonly lost: Error) {
    super(lost.message);
  }
}

// Whether a statement failed because its connection is gone or stopped answering (pg's own
// errors carry no SQLSTATE; a server's error does, and leaves the connection usable).
function connectionLost(err: unknown): boolean {
  if (err instanceof RollbackFailed || err instanceof InDoubt) return true;
  const code = String((err as { code?: unknown } | null)?.code ?? '');
  if (code.startsWith('08') || code.startsWith('57P') || /^E[A-Z]+$/.test(code)) return true;
  return code === '' && /timeout|terminated|not queryable|closed/i.test((err as Error)?.message ?? '');
}

// Ends a connection without waiting for the server: its statements fail with "Connection terminated".
function cut(c: PoolClient): void {
  c.end().catch(() => {});
  (c as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
}

// Whether `p` settled within `ms`.
async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([p.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A `pg` error as the ledger's TetherError, by SQLSTATE (Postgres "Appendix A. Error Codes") or
 * Node errno. A TetherError passes through; messages name the URL without its password. A
 * connection lost or a statement past its deadline (`statementTimeoutMs`) is LEDGER_UNAVAILABLE
 * with the pg error as its cause; one lost during a COMMIT says the write may have landed.
 */
export function mapPgError(
  err: unknown,
  location: string,
  action: 'open' | 'read' | 'write',
  statementTimeoutMs = POSTGRES_STATEMENT_TIMEOUT_MS,
): unknown {
  if ((err as { name?: string } | null)?.name === 'TetherError') return err;
  if (err instanceof RollbackFailed) return mapPgError(err.first, location, action, statementTimeoutMs);
  if (err instanceof InDoubt)
    return ledgerUnavailable(
      location,
      `the connection was lost while the write was committed (${err.message}): whether it landed is unknown`,
      err.lost,
    );
  const code = String((err as { code?: unknown } | null)?.code ?? '');
  const detail = `${code ? `${code}: ` : ''}${(err as Error)?.message ?? String(err)}`;
  if (code === '' && /^Query read timeout$/.test((err as Error)?.message ?? ''))
    return ledgerUnavailable(
      location,
      `the server did not answer a statement within ${statementTimeoutMs} ms (stopped, frozen or cut off); its connection was closed`,
      err,
    );
  if (code === '' && /after calling end on the pool/.test(detail))
    return ledgerUnavailable(location, `the ledger was closed (${detail})`, err);
  if (code === '' && /Connection terminated/.test(detail))
    return ledgerUnavailable(location, `the connection to the server was lost (${detail})`, err);
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
