// A real Postgres for the ledger tests: TETHER_TEST_POSTGRES_URL when given (.ci/run starts one),
// else a temporary server this file starts with scripts/test-postgres.sh and stops afterwards.
// `postgresSkip` is the stated reason to skip, set ONLY when no Postgres binary exists.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './paths.js';
import { tempDir } from './zoo.js';

const PG_ROOT = '/usr/lib/postgresql';
const hasBinary =
  existsSync(PG_ROOT) && readdirSync(PG_ROOT).some((v) => existsSync(join(PG_ROOT, v, 'bin/pg_ctl')));

/** Why the Postgres tests skip, or '' when they run. */
export const postgresSkip =
  process.env.TETHER_TEST_POSTGRES_URL || hasBinary
    ? ''
    : `no Postgres: TETHER_TEST_POSTGRES_URL is unset and no ${PG_ROOT}/*/bin/pg_ctl exists (apt-get install postgresql)`;

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
