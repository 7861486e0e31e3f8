// The Postgres ledger under faults: a server stopped mid-transaction
// (`pg_ctl stop -m immediate` while the end's compare-and-set waits on a row another connection
// holds FOR UPDATE) and a frozen server (the postmaster and its backends SIGSTOPped). tether
// never crashes: the session ends its processes, the CLI prints its report with the failed write
// as a LEDGER_WRITE_FAILED warning and exits with the command's status, the library's end()
// settles, and the row stays `running` for `tether recover`. A frozen server costs at most a
// statement's deadline (src/ledger/postgres.ts, POSTGRES_STATEMENT_TIMEOUT_MS).
// These tests stop and freeze their server: each file run starts its own private one with
// scripts/test-postgres.sh, never the shared TETHER_TEST_POSTGRES_URL other files use.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  openPostgresStore,
  POSTGRES_HURRY_MS,
  POSTGRES_STATEMENT_TIMEOUT_MS,
} from '../../src/ledger/postgres.js';
import { type Ran, RECORD, recordedIds, tether } from '../support/cli.js';
import { runNode } from '../support/node.js';
import { ROOT } from '../support/paths.js';
import { freshSchema } from '../support/postgres.js';
import { childrenOf, isAlive } from '../support/proc.js';
import { missing, tool } from '../support/tools.js';
import { sleep, tempDir } from '../support/zoo.js';

const SCRIPT = join(ROOT, 'scripts/test-postgres.sh');

// scripts/test-postgres.sh runs the server as the postgres user (root's runuser) and picks its
// port with python3.
const skip =
  missing('pg_ctl', 'python3') ||
  (process.getuid?.() === 0 ? '' : 'scripts/test-postgres.sh needs root (it runs the server as postgres)');

/** The private server of this file: its directory, URL and port. */
interface Server {
  dir: string;
  url: string;
  port: string;
}

let server: Server | undefined;

function startServer(): Server {
  const dir = tempDir();
  const url = execFileSync(SCRIPT, ['start', dir], { encoding: 'utf8', timeout: 120_000 }).trim();
  return { dir, url, port: readFileSync(join(dir, 'port'), 'utf8').trim() };
}

function pgCtl(s: Server, args: string[]): void {
  execFileSync(
    'runuser',
    ['-u', 'postgres', '--', tool('pg_ctl').path as string, '-D', join(s.dir, 'data'), ...args],
    {
      timeout: 120_000,
      stdio: 'ignore',
    },
  );
}

/** `pg_ctl stop -m immediate`: every backend ends at once, no connection is closed in order. */
function stopNow(s: Server): void {
  pgCtl(s, ['-m', 'immediate', '-w', 'stop']);
}

/** Starts the stopped server again on its port and socket directory (as the script did). */
function restart(s: Server): void {
  pgCtl(s, [
    '-l',
    join(s.dir, 'server.log'),
    '-w',
    '-t',
    '60',
    '-o',
    `-c listen_addresses=127.0.0.1 -p ${s.port} -k ${s.dir} -c fsync=off`,
    'start',
  ]);
}

/** The postmaster's pid and its children's (every backend and auxiliary process). */
function serverPids(s: Server): number[] {
  const postmaster = Number(readFileSync(join(s.dir, 'data/postmaster.pid'), 'utf8').split('\n')[0]);
  return [postmaster, ...childrenOf(postmaster).map((st) => st.pid)];
}

/** Sends `signal` to each pid still there (a backend may end between the listing and the kill). */
function signalAll(pids: number[], signal: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      // gone
    }
  }
}

beforeAll(() => {
  if (!skip) server = startServer();
}, 120_000);
afterAll(() => {
  if (!server) return;
  try {
    signalAll(serverPids(server), 'SIGCONT');
  } catch {
    // stopped already (no postmaster.pid)
  }
  execFileSync(SCRIPT, ['stop', server.dir], { timeout: 60_000 });
});

async function client(s: Server): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: s.url });
  c.on('error', () => {}); // its server is about to go away
  await c.connect();
  return c;
}

/** Polls until a row's command holds `marker`; returns its tag. */
async function tagOf(c: pg.Client, marker: string): Promise<string> {
  for (let i = 0; i < 500; i++) {
    const r = await c
      .query<{ tag: string }>('SELECT tag FROM tether.sessions WHERE command LIKE $1', [`%${marker}%`])
      .catch(() => ({ rows: [] as { tag: string }[] }));
    if (r.rows[0]) return r.rows[0].tag;
    await sleep(20);
  }
  throw new Error(`premise broken: no row for ${marker}`);
}

/**
 * Polls until some backend waits on a lock (the end's UPDATE behind our FOR UPDATE). `c` must be
 * outside a transaction: inside one, pg_stat_activity is read once and kept.
 */
async function waitForLockWait(c: pg.Client): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const r = await c.query<{ n: string }>(
      "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE%'",
    );
    if (Number(r.rows[0]?.n) > 0) return;
    await sleep(20);
  }
  throw new Error('premise broken: the end never waited on the held row');
}

/** The report `tether run --json` printed last on stderr. */
function jsonReport(ran: Ran): { ok: boolean; warnings: { code: string; message: string }[] } {
  const line = ran.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .at(-1);
  if (!line) throw new Error(`no JSON report on stderr: ${ran.stderr}`);
  return JSON.parse(line);
}

/**
 * A payload that leaves `sleep 300` behind, records it, creates `go`.started, waits for `go` to
 * exist and exits 3.
 */
function payload(marker: string, go: string): string[] {
  return [
    'sh',
    '-c',
    `sleep 300 & ${RECORD}; : > ${go}.started; while [ ! -e ${go} ]; do sleep 0.05; done; exit 3`,
    marker,
  ];
}

// The migration's advisory lock (src/ledger/postgres.ts) of `schema`.
const lockKey = (schema: string) => `tether.ledger.${schema}`;

// A crash prints Node's stack trace of the unhandled 'error' event.
const CRASH = /Unhandled 'error' event|^\s+at .*node:/m;

describe.skipIf(skip !== '')(`the Postgres ledger under faults${skip ? ` (skipped: ${skip})` : ''}`, () => {
  it('tether run: the server stopped while the end waits on a locked row — no crash, report, command status, row left running for recover', async () => {
    const s = server as Server;
    const dir = tempDir();
    const go = join(dir, 'go');
    const marker = `lost-${process.pid}-${Date.now()}`;
    const holder = await client(s);
    const watcher = await client(s);
    const done = tether(['run', '--json', '--ledger', s.url, '--', ...payload(marker, go)]);
    try {
      const tag = await tagOf(holder, marker);
      await holder.query('BEGIN');
      await holder.query('SELECT * FROM tether.sessions WHERE tag = $1 FOR UPDATE', [tag]);
      writeFileSync(go, '');
      await waitForLockWait(watcher);
      stopNow(s);
      const ran = await done;
      expect(ran.stderr).not.toMatch(CRASH);
      expect(ran.code, ran.stderr).toBe(3);
      const report = jsonReport(ran);
      expect(report.ok).toBe(true);
      const failed = report.warnings.filter((w) => w.code === 'LEDGER_WRITE_FAILED');
      expect(failed, ran.stderr).toHaveLength(1);
      expect(failed[0]?.message).toMatch(/connection to the server was lost|not answer/);
      for (const id of recordedIds(ran.stdout)) expect(isAlive(id), `leftover ${id.pid}`).toBe(false);
      // The row stays `running`; recover (its supervisor is gone) settles it.
      restart(s);
      const after = await client(s);
      try {
        const row = await after.query<{ state: string }>('SELECT state FROM tether.sessions WHERE tag = $1', [
          tag,
        ]);
        expect(row.rows[0]?.state).toBe('running');
        const recovered = await tether(['recover', '--ledger', s.url]);
        expect(recovered.code, recovered.stderr).toBe(0);
        const settled = await after.query<{ state: string }>(
          'SELECT state FROM tether.sessions WHERE tag = $1',
          [tag],
        );
        expect(settled.rows[0]?.state).toBe('recovered');
      } finally {
        await after.end();
      }
    } finally {
      writeFileSync(go, '');
      await holder.end().catch(() => {});
      await watcher.end().catch(() => {});
      if (!existsSync(join(s.dir, 'data/postmaster.pid'))) restart(s);
    }
  }, 60_000);

  it('the library: the server stopped while end() waits on a locked row — end() settles with LEDGER_WRITE_FAILED, the host lives', async () => {
    const s = server as Server;
    const dir = tempDir();
    const go = join(dir, 'go');
    const marker = `lib-${process.pid}-${Date.now()}`;
    const program = `
const { Ledger } = await import(${JSON.stringify(join(ROOT, 'dist/ledger/ledger.js'))});
const { Session } = await import(${JSON.stringify(join(ROOT, 'dist/session/session.js'))});
const ledger = await Ledger.open(process.argv[1]);
const s = new Session({ ledger });
const argv = ${JSON.stringify(payload(marker, go))};
await s.begin(argv);
const sub = s.spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'inherit', 'inherit'] });
await sub.exited;
const report = await s.end();
await ledger.close();
process.stdout.write('REPORT ' + JSON.stringify(report) + '\\n');
`;
    const holder = await client(s);
    const watcher = await client(s);
    const child = runNode(['--input-type=module', '-e', program, s.url]);
    try {
      const tag = await tagOf(holder, marker);
      await holder.query('BEGIN');
      await holder.query('SELECT * FROM tether.sessions WHERE tag = $1 FOR UPDATE', [tag]);
      writeFileSync(go, '');
      await waitForLockWait(watcher);
      stopNow(s);
      const ran = await child.done;
      expect(ran.stderr).not.toMatch(CRASH);
      expect(ran.code, ran.stderr).toBe(0);
      const line = ran.stdout.split('\n').find((l) => l.startsWith('REPORT '));
      expect(line, ran.stdout + ran.stderr).toBeDefined();
      const report = JSON.parse((line as string).slice('REPORT '.length)) as {
        ok: boolean;
        warnings: { code: string; message: string }[];
      };
      expect(report.ok).toBe(true);
      expect(report.warnings.map((w) => w.code)).toContain('LEDGER_WRITE_FAILED');
      for (const id of recordedIds(ran.stdout)) expect(isAlive(id), `leftover ${id.pid}`).toBe(false);
    } finally {
      writeFileSync(go, '');
      await holder.end().catch(() => {});
      await watcher.end().catch(() => {});
      if (!existsSync(join(s.dir, 'data/postmaster.pid'))) restart(s);
    }
  }, 60_000);

  it('20 concurrent tether runs, the server stopped while each end waits on its locked row, then restarted: no crash, the command status, every leftover gone, recover settles each row whose end was lost', async () => {
    const s = server as Server;
    const dir = tempDir();
    const go = join(dir, 'go');
    const marker = `restart-${process.pid}-${Date.now()}`;
    const holder = await client(s);
    const watcher = await client(s);
    const runs = Array.from({ length: 20 }, (_, i) =>
      tether(['run', '--json', '--ledger', s.url, '--', ...payload(`${marker}-${i}`, go)]),
    );
    const mine = 'SELECT tag, state FROM tether.sessions WHERE command LIKE $1';
    try {
      for (let i = 0; i < 1000; i++) {
        const r = await watcher.query<{ tag: string }>(mine, [`%${marker}%`]).catch(() => ({ rows: [] })); // before the first open made the schema
        if (r.rows.length === 20) break;
        await sleep(20);
      }
      await holder.query('BEGIN');
      const held = await holder.query(`${mine} FOR UPDATE`, [`%${marker}%`]);
      expect(held.rows).toHaveLength(20);
      writeFileSync(go, '');
      // Every end waiting on its row; lock_timeout (5 s) ends the wait of the first ones anyway.
      for (let i = 0; i < 250; i++) {
        const r = await watcher.query<{ n: string }>(
          "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE%'",
        );
        if (Number(r.rows[0]?.n) === 20) break;
        await sleep(20);
      }
      stopNow(s);
      restart(s);
      const ran = await Promise.all(runs);
      // What each run says of its end: not recorded (the stop cut its write), or recorded (a
      // run so slow under load that its write came after the restart).
      const expected = new Map<string, string>();
      for (const r of ran) {
        expect(r.stderr).not.toMatch(CRASH);
        expect(r.code, r.stderr).toBe(3);
        const report = jsonReport(r) as ReturnType<typeof jsonReport> & { tag: string };
        expect(report.ok).toBe(true);
        const lost = report.warnings.some((w) => w.code === 'LEDGER_WRITE_FAILED');
        expected.set(report.tag, lost ? 'recovered' : 'failed');
        for (const id of recordedIds(r.stdout)) expect(isAlive(id), `leftover ${id.pid}`).toBe(false);
      }
      expect([...expected.values()], 'premise: the stop cut the ends').toContain('recovered');
      const recovered = await tether(['recover', '--ledger', s.url]);
      expect(recovered.code, recovered.stderr).toBe(0);
      const after = await client(s);
      try {
        const rows = await after.query<{ tag: string; state: string }>(mine, [`%${marker}%`]);
        expect(new Map(rows.rows.map((r) => [r.tag, r.state]))).toEqual(expected);
      } finally {
        await after.end();
      }
    } finally {
      writeFileSync(go, '');
      await holder.end().catch(() => {});
      await watcher.end().catch(() => {});
      if (!existsSync(join(s.dir, 'data/postmaster.pid'))) restart(s);
    }
  }, 90_000);

  it('tether run: the server stopped while the open waits for the migration lock — no crash, 125 naming the ledger, the command never ran', async () => {
    const s = server as Server;
    const dir = tempDir();
    const ran = join(dir, 'ran');
    // A database of its own: its schema is behind (absent), so the open takes the lock.
    const db = `t_open_${process.pid}_${Date.now()}`;
    const admin = await client(s);
    await admin.query(`CREATE DATABASE ${db}`);
    await admin.end();
    const url = s.url.replace(/\/tether_test$/, `/${db}`);
    const holder = await client({ ...s, url });
    const watcher = await client({ ...s, url });
    try {
      await holder.query('SELECT pg_advisory_lock(hashtext($1))', [lockKey('tether')]);
      const done = tether(['run', '--ledger', url, '--', 'touch', ran]);
      for (let i = 0; i < 250; i++) {
        const r = await watcher.query<{ n: string }>(
          "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'",
        );
        if (Number(r.rows[0]?.n) > 0) break;
        await sleep(20);
      }
      stopNow(s);
      const result = await done;
      expect(result.stderr).not.toMatch(CRASH);
      expect(result.code, result.stderr).toBe(125);
      expect(result.stderr).toContain('cannot record the session in the ledger');
      expect(result.stderr).toContain('connection to the server was lost');
      expect(existsSync(ran)).toBe(false);
    } finally {
      await holder.end().catch(() => {});
      await watcher.end().catch(() => {});
      if (!existsSync(join(s.dir, 'data/postmaster.pid'))) restart(s);
    }
  });

  it('tether run: a frozen server (postmaster and backends SIGSTOPped) costs at most a statement deadline', async () => {
    const s = server as Server;
    const dir = tempDir();
    const go = join(dir, 'go');
    const marker = `frozen-${process.pid}-${Date.now()}`;
    const watcher = await client(s);
    const done = tether(['run', '--json', '--ledger', s.url, '--', ...payload(marker, go)]);
    let frozen: number[] = [];
    try {
      await tagOf(watcher, marker);
      await watcher.end();
      frozen = serverPids(s);
      signalAll(frozen, 'SIGSTOP');
      const since = Date.now();
      writeFileSync(go, '');
      const ran = await done;
      const tookMs = Date.now() - since;
      expect(ran.stderr).not.toMatch(CRASH);
      expect(ran.code, ran.stderr).toBe(3);
      // The end's read waits out one deadline; closing cuts what the server never answers.
      expect(tookMs).toBeLessThan(POSTGRES_STATEMENT_TIMEOUT_MS + 6000);
      const report = jsonReport(ran);
      const failed = report.warnings.filter((w) => w.code === 'LEDGER_WRITE_FAILED');
      expect(failed, ran.stderr).toHaveLength(1);
      expect(failed[0]?.message).toMatch(/did not answer a statement within/);
      for (const id of recordedIds(ran.stdout)) expect(isAlive(id), `leftover ${id.pid}`).toBe(false);
    } finally {
      signalAll(frozen, 'SIGCONT');
      writeFileSync(go, '');
      await watcher.end().catch(() => {});
    }
  }, 60_000);

  it('tether run: SIGTERM on a live server hurries nothing away: the end is recorded cancelled', async () => {
    const s = server as Server;
    const dir = tempDir();
    const go = join(dir, 'go');
    const marker = `live-term-${process.pid}-${Date.now()}`;
    const watcher = await client(s);
    let pid = 0;
    const done = tether(['run', '--json', '--ledger', s.url, '--', ...payload(marker, go)], {
      onStart: (p) => {
        pid = p;
      },
    });
    try {
      const tag = await tagOf(watcher, marker);
      for (let i = 0; i < 500 && !existsSync(`${go}.started`); i++) await sleep(20);
      process.kill(pid, 'SIGTERM');
      const ran = await done;
      expect(ran.code, ran.stderr).toBe(128 + 15);
      expect(jsonReport(ran).warnings).toEqual([]);
      const row = await watcher.query<{ state: string }>('SELECT state FROM tether.sessions WHERE tag = $1', [
        tag,
      ]);
      expect(row.rows[0]?.state).toBe('cancelled');
      for (const id of recordedIds(ran.stdout)) expect(isAlive(id), `leftover ${id.pid}`).toBe(false);
    } finally {
      writeFileSync(go, '');
      await watcher.end().catch(() => {});
    }
  });

  it('tether run: SIGTERM while the end waits on a frozen server ends the run', async () => {
    const s = server as Server;
    const dir = tempDir();
    const go = join(dir, 'go');
    const marker = `term-${process.pid}-${Date.now()}`;
    const watcher = await client(s);
    let pid = 0;
    const done = tether(['run', '--json', '--ledger', s.url, '--', ...payload(marker, go)], {
      onStart: (p) => {
        pid = p;
      },
    });
    let frozen: number[] = [];
    try {
      await tagOf(watcher, marker);
      await watcher.end();
      frozen = serverPids(s);
      signalAll(frozen, 'SIGSTOP');
      writeFileSync(go, '');
      // The payload exits (within 50 ms) and the end's first statement waits on the frozen server.
      await sleep(1500);
      const since = Date.now();
      process.kill(pid, 'SIGTERM');
      const ran = await done;
      const tookMs = Date.now() - since;
      expect(ran.stderr).not.toMatch(CRASH);
      expect(ran.signal).toBeNull();
      // The signal hurries the ledger: the write it waits for is given up 2 s later, not at the
      // statement's 10 s deadline (the bound has a wide margin: 2 shared cores).
      expect(tookMs).toBeLessThan(POSTGRES_HURRY_MS + 4000);
      expect(ran.code, ran.stderr).toBe(3);
      const failed = jsonReport(ran).warnings.filter((w) => w.code === 'LEDGER_WRITE_FAILED');
      expect(failed[0]?.message, ran.stderr).toMatch(/told to hurry/);
      for (const id of recordedIds(ran.stdout)) expect(isAlive(id), `leftover ${id.pid}`).toBe(false);
    } finally {
      signalAll(frozen, 'SIGCONT');
      writeFileSync(go, '');
      await watcher.end().catch(() => {});
    }
  }, 60_000);
});

describe.skipIf(skip !== '')(
  `concurrent opens and writers on one Postgres${skip ? ` (skipped: ${skip})` : ''}`,
  () => {
    it('20 concurrent tether runs on a current schema take no migration lock: all recorded while another connection holds it past lock_timeout', async () => {
      const s = server as Server;
      // The schema made current first (the one open that migrates).
      const first = await tether(['run', '--ledger', s.url, '--', 'true']);
      expect(first.code, first.stderr).toBe(0);
      const holder = await client(s);
      const marker = `writers-${process.pid}-${Date.now()}`;
      try {
        await holder.query('SELECT pg_advisory_lock(hashtext($1))', [lockKey('tether')]);
        const since = Date.now();
        const runs = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            tether(['run', '--ledger', s.url, '--', 'sh', '-c', 'exit 0', `${marker}-${i}`]),
          ),
        );
        const tookMs = Date.now() - since;
        const failed = runs.filter((r) => r.code !== 0).map((r) => `${r.code}: ${r.stderr.trim()}`);
        expect(failed).toEqual([]);
        const rows = await holder.query<{ state: string; n: string }>(
          'SELECT state, count(*) AS n FROM tether.sessions WHERE command LIKE $1 GROUP BY state',
          [`%${marker}%`],
        );
        expect(rows.rows.map((r) => [r.state, Number(r.n)])).toEqual([['succeeded', 20]]);
        // Each run's own bound is tether()'s 20 s; the old store failed them all at lock_timeout.
        expect(tookMs).toBeLessThan(40_000);
      } finally {
        await holder.end().catch(() => {});
      }
    }, 60_000);

    it('a schema behind still migrates under the lock: an open waits for it, LEDGER_LOCKED past lock_timeout, then migrates', async () => {
      const s = server as Server;
      const schema = freshSchema();
      await (await openPostgresStore(s.url, { schema, schemaVersion: 1 })).close();
      const holder = await client(s);
      try {
        await holder.query('SELECT pg_advisory_lock(hashtext($1))', [lockKey(schema)]);
        await expect(openPostgresStore(s.url, { schema, lockTimeoutMs: 300 })).rejects.toMatchObject({
          code: 'LEDGER_LOCKED',
        });
        await holder.query('SELECT pg_advisory_unlock(hashtext($1))', [lockKey(schema)]);
        const store = await openPostgresStore(s.url, { schema });
        expect(store.schemaVersion).toBe(2);
        await store.close();
      } finally {
        await holder.end().catch(() => {});
      }
    });
  },
);
