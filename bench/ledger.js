// The ledger's cost (docs/ledger.md): `npm run bench` (builds dist/ first), or `node bench/ledger.js`.
//
// 1. p50 of `tether run -- true` (the real CLI, a fresh process each time) with the default
//    SQLite ledger vs `--no-ledger`, interleaved in one run (target: ≤ 1 ms added). It records
//    through the ledger's spool (docs/ledger.md, "The spool"); the median of the paired
//    differences is printed beside the difference of the medians.
// 2. The same cost inside one process: `spawn('true', { ledger })` vs `spawn('true')`, interleaved.
// 3. `recover()` over 100 dead sessions (their supervisor gone, nothing left running).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from '../dist/index.js';
import { Ledger } from '../dist/ledger/index.js';
import { currentSupervisor } from '../dist/ledger/supervisor.js';
import { createTag } from '../dist/proc/tag.js';
import { recover } from '../dist/recover/index.js';
import { fmt, log, median, quantile, ROOT } from './lib.js';

const CLI_REPS = Number(process.env.BENCH_LEDGER_CLI_REPS ?? 101);
const LIB_REPS = Number(process.env.BENCH_LEDGER_LIB_REPS ?? 201);
const DEAD = Number(process.env.BENCH_LEDGER_DEAD ?? 100);
const TARGET_MS = 1;

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-ledger-'));
const env = { ...process.env, XDG_STATE_HOME: dir, TETHER_LEDGER: '' };
const cli = join(ROOT, 'bin/tether.cjs');

function timeCli(args) {
  const t = performance.now();
  execFileSync(process.execPath, [cli, 'run', ...args, '--', 'true'], { env, stdio: 'ignore' });
  return performance.now() - t;
}

// 1. The CLI, interleaved so that drift in machine load hits both sides alike.
timeCli([]); // creates the ledger file and its schema: not measured
const cliWith = [];
const cliWithout = [];
for (let i = 0; i < CLI_REPS; i++) {
  cliWith.push(timeCli([]));
  cliWithout.push(timeCli(['--no-ledger']));
}
const cliAdded = median(cliWith) - median(cliWithout);
const cliPaired = median(cliWith.map((w, i) => w - cliWithout[i]));

// 2. In one process: the same session with and without a ledger.
const ledger = await Ledger.open(join(dir, 'lib.db'));
const libWith = [];
const libWithout = [];
for (let i = 0; i < LIB_REPS; i++) {
  let t = performance.now();
  await spawn('true', [], { ledger });
  libWith.push(performance.now() - t);
  t = performance.now();
  await spawn('true', []);
  libWithout.push(performance.now() - t);
}
await ledger.close();
const libAdded = median(libWith) - median(libWithout);

// 3. recover over DEAD sessions whose supervisor is gone (a process that ran and exited).
const deadLedger = await Ledger.open(join(dir, 'dead.db'));
const gone = execFileSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
  encoding: 'utf8',
});
const supervisor = { ...currentSupervisor(), pid: Number(gone), startTime: 1 };
for (let i = 0; i < DEAD; i++)
  await deadLedger.begin({
    tag: createTag().name,
    command: ['true'],
    location: { kind: 'local' },
    supervisor,
  });
const t = performance.now();
const result = await recover({ ledger: deadLedger });
const recoverMs = performance.now() - t;
const recovered = result.sessions.filter((s) => s.outcome === 'recovered').length;
await deadLedger.close();
rmSync(dir, { recursive: true, force: true });

const row = (name, xs) =>
  `${name.padEnd(34)} p50 ${fmt(median(xs)).padStart(7)} ms   p90 ${fmt(quantile(xs, 0.9)).padStart(7)} ms`;
log(`tether run -- true, ${CLI_REPS} runs each, interleaved:`);
log(`  ${row('default SQLite ledger', cliWith)}`);
log(`  ${row('--no-ledger', cliWithout)}`);
log(
  `  added by the ledger: ${fmt(cliAdded)} ms at p50 (target ≤ ${TARGET_MS} ms); median of the paired differences ${fmt(cliPaired)} ms`,
);
log(`spawn('true') in one process, ${LIB_REPS} each, interleaved:`);
log(`  ${row('{ ledger } (SQLite)', libWith)}`);
log(`  ${row('no ledger', libWithout)}`);
log(`  added by the ledger: ${fmt(libAdded)} ms at p50`);
log(
  `recover() over ${DEAD} dead sessions: ${fmt(recoverMs)} ms (${recovered} recovered, settled ${result.settled})`,
);
