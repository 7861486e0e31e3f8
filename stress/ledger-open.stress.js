// Readers racing to open a new ledger: 60 rounds, each a fresh SQLite ledger with 100 sessions
// spooled (tether run's writer), then two reader processes at once, each `Ledger.open` + `list`.
// Before src/ledger/sqlite.ts retried its opening steps and read the version in one statement,
// 1 to 3 readers in 100 failed: LEDGER_LOCKED (SQLite's SQLITE_BUSY, given without its busy
// handler while the other reader switched the file to WAL) or LEDGER_CORRUPT (the version read
// before the other reader's migration committed, its tables after). Checks that every reader
// succeeds and that each ledger then holds its 100 sessions, none left in the spool. Exits 1
// when a check fails.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ledger } from '../dist/ledger/index.js';
import { spoolDirOf } from '../dist/ledger/spool.js';
import { createTag } from '../dist/proc/tag.js';

const ROUNDS = Number(process.env.STRESS_LEDGER_ROUNDS ?? 60);
const SESSIONS = 100;
const index = join(dirname(fileURLToPath(import.meta.url)), '../dist/ledger/index.js');
const dir = mkdtempSync(join(tmpdir(), 'tether-ledger-open-'));

function reader(db) {
  const code = `import { Ledger } from ${JSON.stringify(index)};
    const l = await Ledger.open(${JSON.stringify(db)}); const n = (await l.list()).length; await l.close(); console.log(n);`;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', code], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    child.on('exit', (status) => resolve({ status, out, err }));
  });
}

const failures = [];
const started = performance.now();
try {
  for (let round = 0; round < ROUNDS; round++) {
    const db = join(dir, `ledger-${round}.db`);
    const writer = await Ledger.open(db, { spool: true });
    for (let i = 0; i < SESSIONS; i++) {
      const tag = createTag().name;
      await writer.begin({ tag, command: ['true'], location: { kind: 'local' } });
      await writer.end(tag, { exitCode: 0, signal: null, error: null }, 'succeeded');
    }
    const results = await Promise.all([reader(db), reader(db)]);
    for (const r of results) {
      if (r.status !== 0)
        failures.push(`round ${round}: ${(r.err.match(/TetherError \[\w+\][^\n]*/) ?? [r.err])[0]}`);
    }
    const ledger = await Ledger.open(db);
    const held = (await ledger.list()).length;
    await ledger.close();
    const left = readdirSync(spoolDirOf(db)).length;
    if (held !== SESSIONS || left !== 0)
      failures.push(`round ${round}: ${held} sessions held, ${left} files left in the spool`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(
  `ledger-open: ${ROUNDS} rounds, ${2 * ROUNDS} racing readers, ${failures.length} failures, ${((performance.now() - started) / 1000).toFixed(1)} s`,
);
for (const f of failures.slice(0, 10)) console.log(`  ${f}`);
process.exitCode = failures.length ? 1 : 0;
