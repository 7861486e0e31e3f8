// A hundred writers: 100 concurrent `tether run`s (the CLI's bundle, each its own process), each
// leaving a detached leftover, on one SQLite ledger and then on one Postgres ledger
// (docs/benchmarks.md, "Stress"; docs/ledger.md, "The stores").
//   node stress/run.js writers          (RUNS=100 at once, on each store)
//   RUNS=20 node stress/writers.stress.js
// Postgres: TETHER_TEST_POSTGRES_URL, else a private server started with scripts/test-postgres.sh
// (root and pg_ctl), else that half is skipped and says why. Checks, against ground truth: every
// run exits 0 with no ledger error (no LEDGER_LOCKED, no "not recorded"), the ledger holds each
// run's row `succeeded` with its leftover among what its report stopped, and every leftover's
// pid + start time is gone. Exits 1 when a check fails; prints its figures.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ledger } from '../dist/ledger/index.js';

const RUNS = Number(process.env.RUNS ?? 100);
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const BIN = join(ROOT, 'bin/tether.cjs');
const PER_RUN_LIMIT_MS = 120_000;

const failures = [];
const check = (ok, message) => {
  if (!ok) failures.push(message);
};

// One `tether run` leaving a `setsid` sleep, its pid and start time printed while it runs.
function run(ledger, marker) {
  const line = `setsid sleep 300 >/dev/null 2>&1 & echo "pid $! $(cut -d' ' -f22 /proc/$!/stat)"`;
  const args = [BIN, 'run', '--ledger', ledger, '--', 'sh', '-c', line, marker];
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    // A run that hangs fails the check; it was started here, so it may be ended here.
    const timer = setTimeout(() => child.kill('SIGKILL'), PER_RUN_LIMIT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const m = out.match(/^pid (\d+) (\d+)$/m);
      resolve({
        marker,
        code: code ?? signal,
        err,
        ms: performance.now() - started,
        leftover: m ? { pid: Number(m[1]), startTime: Number(m[2]) } : undefined,
      });
    });
  });
}

function alive(id) {
  try {
    const stat = readFileSync(`/proc/${id.pid}/stat`, 'latin1');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return rest[0] !== 'Z' && Number(rest[19]) === id.startTime;
  } catch {
    return false;
  }
}

// Ends what this script started and a failed run may have left (by identity: never another's).
function cleanup(results) {
  for (const r of results)
    if (r.leftover && alive(r.leftover))
      try {
        process.kill(r.leftover.pid, 'SIGKILL');
      } catch {
        // gone
      }
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function writers(name, ledger) {
  const prefix = `writers-${process.pid}-${Date.now()}-${name}`;
  const started = performance.now();
  const results = await Promise.all(Array.from({ length: RUNS }, (_, i) => run(ledger, `${prefix}-${i}`)));
  const wallS = (performance.now() - started) / 1000;
  try {
    for (const r of results) {
      check(r.code === 0, `${name} ${r.marker}: exit ${r.code}: ${r.err.trim().slice(0, 300)}`);
      check(
        !/LEDGER_|locked|55P03|not recorded/i.test(r.err),
        `${name} ${r.marker}: ${r.err.trim().slice(0, 300)}`,
      );
      check(r.leftover !== undefined, `${name} ${r.marker}: printed no leftover (premise)`);
      if (r.leftover) check(!alive(r.leftover), `${name} ${r.marker}: leftover ${r.leftover.pid} alive`);
    }
    const l = await Ledger.open(ledger);
    let rows;
    try {
      rows = (await l.list()).filter((row) => row.command.some((a) => a.startsWith(prefix)));
    } finally {
      await l.close();
    }
    const byMarker = new Map(rows.map((row) => [row.command.at(-1), row]));
    check(rows.length === RUNS, `${name}: ${rows.length} rows for ${RUNS} runs`);
    for (const r of results) {
      const row = byMarker.get(r.marker);
      check(row?.state === 'succeeded', `${name} ${r.marker}: row ${row ? row.state : 'missing'}`);
      const stopped = row?.reports.at(-1)?.stopped.map((p) => p.pid) ?? [];
      if (r.leftover)
        check(stopped.includes(r.leftover.pid), `${name} ${r.marker}: report does not name its leftover`);
    }
    const ms = results.map((r) => r.ms).sort((a, b) => a - b);
    const states = {};
    for (const row of rows) states[row.state] = (states[row.state] ?? 0) + 1;
    console.log(
      `writers ${name}: ${RUNS} tether runs at once in ${wallS.toFixed(1)} s; per run median ${(percentile(ms, 50) / 1000).toFixed(2)} s, p95 ${(percentile(ms, 95) / 1000).toFixed(2)} s, max ${(ms.at(-1) / 1000).toFixed(2)} s; exit 0: ${results.filter((r) => r.code === 0).length}; rows ${JSON.stringify(states)}; leftovers alive: ${results.filter((r) => r.leftover && alive(r.leftover)).length}`,
    );
  } finally {
    cleanup(results);
  }
}

// Postgres for the second half: the given URL, else a private server, else why not.
function postgres() {
  const given = process.env.TETHER_TEST_POSTGRES_URL;
  if (given) return { url: given, stop: () => {} };
  if (process.getuid?.() !== 0) return { skip: 'TETHER_TEST_POSTGRES_URL unset and not root' };
  const dir = mkdtempSync(join(tmpdir(), 'tether-writers-pg-'));
  const script = join(ROOT, 'scripts/test-postgres.sh');
  try {
    const url = execFileSync(script, ['start', dir], { encoding: 'utf8', timeout: 120_000 }).trim();
    return {
      url,
      stop: () => {
        execFileSync(script, ['stop', dir], { timeout: 60_000 });
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    return { skip: `no Postgres: ${err.message.split('\n')[0]}` };
  }
}

const dir = mkdtempSync(join(tmpdir(), 'tether-writers-'));
try {
  await writers('sqlite', join(dir, 'ledger.db'));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const pg = postgres();
if (pg.skip) console.log(`writers postgres: skipped (${pg.skip})`);
else
  try {
    // The schema made current first: the first open migrates, under its lock.
    await (await Ledger.open(pg.url)).close();
    await writers('postgres', pg.url);
  } finally {
    pg.stop();
  }
for (const f of failures.slice(0, 20)) console.log(`  ${f}`);
if (failures.length > 20) console.log(`  … ${failures.length - 20} more`);
process.exitCode = failures.length ? 1 : 0;
