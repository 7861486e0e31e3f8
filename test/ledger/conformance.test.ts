// The conformance suite (src/ledger/conformance.ts) on tether's two stores: a real SQLite file
// and a real Postgres (TETHER_TEST_POSTGRES_URL, or a temporary server started here).
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  builtinStoreSpec,
  type ConformanceResult,
  runLedgerConformance,
} from '../../src/ledger/conformance.js';
import { FIXTURES } from '../support/paths.js';
import { freshSchema, postgresSkip, startPostgres } from '../support/postgres.js';
import { tempDir } from '../support/zoo.js';

function expectAllPassed(results: ConformanceResult[]): void {
  const failed = results.filter((r) => r.status !== 'passed');
  expect(failed, JSON.stringify(failed, null, 2)).toEqual([]);
  expect(results.map((r) => r.name)).toHaveLength(7);
}

describe('ledger conformance: SQLite', () => {
  it('passes every check', async () => {
    const dir = tempDir();
    const results = await runLedgerConformance(
      builtinStoreSpec({ kind: 'sqlite', path: join(dir, 'l.db') }),
      {
        migration: {
          old: builtinStoreSpec({ kind: 'sqlite', path: join(dir, 'm.db'), schemaVersion: 1 }),
          current: builtinStoreSpec({ kind: 'sqlite', path: join(dir, 'm.db') }),
        },
      },
    );
    console.log(
      results.map((r) => `${r.name}: ${r.status} ${r.durationMs} ms; ${r.notes.join('; ')}`).join('\n'),
    );
    expectAllPassed(results);
  }, 240_000);
});

describe.skipIf(postgresSkip !== '')(
  `ledger conformance: Postgres${postgresSkip ? ` (skipped: ${postgresSkip})` : ''}`,
  () => {
    let server: { url: string; stop: () => void };
    beforeAll(() => {
      server = startPostgres();
    });
    afterAll(() => server?.stop());

    it('passes every check', async () => {
      const schema = freshSchema();
      const results = await runLedgerConformance(
        builtinStoreSpec({ kind: 'postgres', url: server.url, schema }),
        {
          migration: {
            old: builtinStoreSpec({
              kind: 'postgres',
              url: server.url,
              schema: `${schema}_m`,
              schemaVersion: 1,
            }),
            current: builtinStoreSpec({ kind: 'postgres', url: server.url, schema: `${schema}_m` }),
          },
        },
      );
      console.log(
        results.map((r) => `${r.name}: ${r.status} ${r.durationMs} ms; ${r.notes.join('; ')}`).join('\n'),
      );
      expectAllPassed(results);
    }, 240_000);
  },
);

describe('ledger conformance: the suite itself', () => {
  it('fails a store whose compare-and-set has a lost-update window', async () => {
    const path = join(tempDir(), 'lossy.db');
    const results = await runLedgerConformance(
      { module: join(FIXTURES, 'node/lossy-store.mjs'), arg: JSON.stringify({ path }) },
      { rounds: 100 },
    );
    const race = results.find((r) => r.name === 'two writer processes race the read/CAS');
    expect(race?.status, JSON.stringify(race)).toBe('failed');
    expect(results.find((r) => r.name === 'a reader during a migration')?.status).toBe('skipped');
  }, 240_000);
});
