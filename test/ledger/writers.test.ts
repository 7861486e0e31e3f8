// Many writers of one library Ledger: 20 concurrent sessions, each leaving a
// leftover, on a SQLite file and on a real Postgres, are all recorded with their leftover ended.
// On Postgres a write waits in turn for one of the store's 4 pooled connections
// (src/ledger/pool-gate.ts): a wait behind a slow server's other writes is not "the server
// cannot be reached", and it is bounded by its own deadline (POSTGRES_QUEUE_TIMEOUT_MS).
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TetherError } from '../../src/errors.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { openPostgresStore, POSTGRES_POOL_SIZE } from '../../src/ledger/postgres.js';
import type { SessionRecord } from '../../src/ledger/types.js';
import { createTag } from '../../src/proc/tag.js';
import { Session } from '../../src/session/session.js';
import { RECORD, recordedIds } from '../support/cli.js';
import { freshSchema, postgresSkip, startPostgres } from '../support/postgres.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { sleep, tempDir } from '../support/zoo.js';

const WRITERS = 20;
const LEFTOVER = `setsid sleep 300 >/dev/null 2>&1 & ${RECORD}`;
const OK = { exitCode: 0, signal: null, error: null };

interface Written {
  tag: string;
  leftover: ProcessId;
  warnings: string[];
  stopped: number[];
}

// One library session on `ledger`: its begin unawaited (spawn writes it), a leftover, its end.
async function writer(ledger: Ledger): Promise<Written> {
  const s = new Session({ ledger, graceMs: 1000, killAfterMs: 1000 });
  const ran = await s.spawn('sh', ['-c', LEFTOVER]);
  const [leftover] = recordedIds(String(ran.stdout));
  const report = await s.end();
  return {
    tag: s.tag,
    leftover: leftover as ProcessId,
    warnings: report.warnings.map((w) => `${w.code}: ${w.message}`),
    stopped: report.stopped.map((p) => p.pid),
  };
}

// Every writer recorded `succeeded` with its report naming its leftover, and the leftover gone.
async function expectAllRecorded(ledger: Ledger, written: Written[]): Promise<void> {
  expect(written.flatMap((w) => w.warnings)).toEqual([]);
  const rows = new Map((await ledger.list()).map((r) => [r.tag, r] as [string, SessionRecord]));
  for (const w of written) {
    const row = rows.get(w.tag);
    expect(row?.state, w.tag).toBe('succeeded');
    expect(row?.reports.at(-1)?.stopped.map((p) => p.pid)).toContain(w.leftover.pid);
    expect(w.stopped).toContain(w.leftover.pid);
    expect(isAlive(w.leftover), `leftover ${w.leftover.pid} of ${w.tag}`).toBe(false);
  }
}

describe('20 concurrent library writers: SQLite', () => {
  it('are all recorded, each leftover ended', async () => {
    const ledger = await Ledger.open(join(tempDir(), 'ledger.db'));
    try {
      const written = await Promise.all(Array.from({ length: WRITERS }, () => writer(ledger)));
      await expectAllRecorded(ledger, written);
    } finally {
      await ledger.close();
    }
  }, 120_000);
});

describe.skipIf(postgresSkip !== '')(`many writers on one Postgres store ${postgresSkip}`, () => {
  let server: { url: string; stop: () => void } | undefined;
  beforeAll(() => {
    server = startPostgres();
  }, 120_000);
  afterAll(() => server?.stop());

  // A store whose commits each take `commitMs` (a slow server, made with the store's hook), so
  // that writes queue for its connections longer than `connectTimeoutMs`.
  async function slowStore(commitMs: number, more: { connectTimeoutMs?: number; queueTimeoutMs?: number }) {
    const store = await openPostgresStore((server as { url: string }).url, {
      schema: freshSchema(),
      ...more,
      hooks: { beforeCommit: () => sleep(commitMs) },
    });
    return new Ledger(store);
  }

  it('20 concurrent library writers are all recorded, their ends waiting in turn behind slow commits', async () => {
    // 20 ends × 250 ms over 4 connections: the last waits about 1 s, twice the connect deadline.
    // pg's pool timed that wait with connectionTimeoutMillis: "the server cannot be reached".
    const ledger = await slowStore(250, { connectTimeoutMs: 500 });
    try {
      const written = await Promise.all(Array.from({ length: WRITERS }, () => writer(ledger)));
      await expectAllRecorded(ledger, written);
    } finally {
      await ledger.close();
    }
  }, 120_000);

  it('a wait in turn past its own deadline says the connections stayed busy, not that the server is unreachable', async () => {
    const ledger = await slowStore(3000, { queueTimeoutMs: 300 });
    try {
      const tags = Array.from({ length: WRITERS }, () => createTag().name);
      await Promise.all(
        tags.map((tag) => ledger.begin({ tag, command: ['true'], location: { kind: 'local' } })),
      );
      const ends = await Promise.allSettled(tags.map((tag) => ledger.end(tag, OK, 'succeeded')));
      const failures = ends.flatMap((e) => (e.status === 'rejected' ? [e.reason as TetherError] : []));
      // The first ends hold the 4 connections for 3 s; the others give up after 300 ms in turn.
      expect(failures.length).toBeGreaterThanOrEqual(WRITERS - 2 * POSTGRES_POOL_SIZE);
      for (const f of failures) {
        expect(f).toBeInstanceOf(TetherError);
        expect(f.code).toBe('LEDGER_UNAVAILABLE');
        expect(f.message).toMatch(/stayed busy for \d+ ms/);
        expect(f.message).not.toMatch(/cannot be reached/);
      }
      // A write that gave up wrote nothing: its row is as it was.
      const rows = await ledger.list();
      const running = rows.filter((r) => r.state === 'running').length;
      expect(running).toBe(failures.length);
      expect(rows.length).toBe(WRITERS);
    } finally {
      await ledger.close();
    }
  }, 120_000);
});
