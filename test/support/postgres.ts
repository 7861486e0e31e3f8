// A real Postgres for the ledger tests: TETHER_TEST_POSTGRES_URL when given (.ci/run starts one),
// else a temporary server this file starts with scripts/test-postgres.sh and stops afterwards.
// `postgresSkip` is the stated reason to skip, set ONLY when no Postgres binary exists (globalSetup
// looked for pg_ctl where the script does: test/support/tools.ts).
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './paths.js';
import { missing } from './tools.js';
import { tempDir } from './zoo.js';

/** Why the Postgres tests skip, or '' when they run. */
export const postgresSkip = process.env.TETHER_TEST_POSTGRES_URL
  ? ''
  : // scripts/test-postgres.sh picks its port with python3.
    missing('pg_ctl', 'python3') &&
    `no Postgres: TETHER_TEST_POSTGRES_URL is unset and ${missing('pg_ctl', 'python3')}`;

const SCRIPT = join(ROOT, 'scripts/test-postgres.sh');

/** A server for one test file: its URL and how to stop it (a no-op for a given URL). */
export function startPostgres(): { url: string; stop: () => void } {
  const given = process.env.TETHER_TEST_POSTGRES_URL;
  if (given) return { url: given, stop: () => {} };
  const dir = tempDir();
  const url = execFileSync(SCRIPT, ['start', dir], { encoding: 'utf8', timeout: 120_000 }).trim();
  return { url, stop: () => execFileSync(SCRIPT, ['stop', dir], { timeout: 60_000 }) };
}

/** A fresh Postgres schema name for one test. */
export function freshSchema(): string {
  return `t_${process.pid}_${Math.random().toString(16).slice(2, 10)}`;
}
