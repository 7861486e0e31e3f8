// A library session on a shared store (a real Postgres) keeps its lease while it runs: its
// recorder renews it (src/session/record.ts), so another vantage's `recover` — run here from
// another PID namespace, where the supervisor's pid cannot be checked and only the lease
// speaks — leaves it alone past 3 lease periods, and its command still runs.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/ledger.js';
import { openPostgresStore } from '../../src/ledger/postgres.js';
import { Session } from '../../src/session/session.js';
import { ROOT } from '../support/paths.js';
import { freshSchema, postgresSkip, startPostgres } from '../support/postgres.js';
import { identityOf, isAlive } from '../support/proc.js';
import { sleep, waitFor } from '../support/zoo.js';

const execFileP = promisify(execFile);
const LEASE_MS = 900;

// recover() from the built library, in a new PID namespace: the record's supervisor (this
// process) is in another one, so recover judges it by its lease alone (src/ledger/supervisor.ts).
const RECOVER_ELSEWHERE = `
const { openPostgresStore } = await import(${JSON.stringify(join(ROOT, 'dist/ledger/postgres.js'))});
const { Ledger } = await import(${JSON.stringify(join(ROOT, 'dist/ledger/ledger.js'))});
const { recover } = await import(${JSON.stringify(join(ROOT, 'dist/recover/index.js'))});
const ledger = new Ledger(await openPostgresStore(process.argv[1], { schema: process.argv[2] }));
const result = await recover({ ledger, graceMs: 200, killAfterMs: 200 });
await ledger.close();
process.stdout.write(JSON.stringify(result.sessions.map((s) => ({ tag: s.tag, outcome: s.outcome }))));
`;

let server: { url: string; stop: () => void } | undefined;
beforeAll(() => {
  if (!postgresSkip) server = startPostgres();
}, 120_000);
afterAll(() => server?.stop());

describe.skipIf(postgresSkip !== '')(`a library session's lease on Postgres ${postgresSkip}`, () => {
  it('is renewed while it runs: recover from another PID namespace leaves it alone past 3 lease periods', async () => {
    const schema = freshSchema();
    const url = server?.url ?? '';
    const ledger = new Ledger(await openPostgresStore(url, { schema }));
    const s = new Session({ ledger });
    try {
      await s.begin(['sleep', '30'], LEASE_MS);
      const sub = s.spawn('sleep', ['30']);
      await waitFor('the command started', () => sub.pid !== undefined && identityOf(sub.pid) !== undefined);
      const payload = identityOf(sub.pid as number);
      await sleep(3.5 * LEASE_MS);
      const { stdout } = await execFileP(
        'unshare',
        [
          '--pid',
          '--fork',
          '--mount-proc',
          process.execPath,
          '--input-type=module',
          '-e',
          RECOVER_ELSEWHERE,
          url,
          schema,
        ],
        { timeout: 60_000 },
      );
      const handled = JSON.parse(stdout) as { tag: string; outcome: string }[];
      expect(handled.filter((h) => h.tag === s.tag && h.outcome !== 'left-alone')).toEqual([]);
      const record = await ledger.get(s.tag);
      expect(record?.state).toBe('running');
      expect(record?.leaseUntil ?? 0).toBeGreaterThan(Date.now());
      expect(payload && isAlive(payload), 'the command was ended while its session ran').toBe(true);
    } finally {
      const report = await s.end();
      expect(report.ok).toBe(true);
      await ledger.close();
    }
  });
});
