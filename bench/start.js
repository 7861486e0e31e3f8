// A fresh `tether` process's start (docs/cli.md, "Start-up"): `npm run bench:start` (builds
// dist/ first), or `node bench/start.js`.
//
// Each command started fresh, three ways interleaved in one run: the ES modules
// (TETHER_CLI_BUNDLE=0), the bundle compiled from its source (TETHER_CLI_BUNDLE=no-cache) and
// the bundle from its code cache (the default); beside `node -e 0`, Node's own start. Two
// commands: `--version` (the start alone) and `run --no-ledger -- true` (a whole session).
// Prints each p50, and each way's ratio to the modules. Writes build/bench-start.json.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fmt, log, median, quantile, ROOT } from './lib.js';

const REPS = Number(process.env.BENCH_START_REPS ?? 41);
const cli = join(ROOT, 'bin/tether.cjs');
const state = mkdtempSync(join(tmpdir(), 'tether-bench-start-'));
const WAYS = [
  ['ES modules (TETHER_CLI_BUNDLE=0)', '0'],
  ['bundle, no code cache', 'no-cache'],
  ['bundle + code cache (default)', '1'],
];
const COMMANDS = [
  ['--version', ['--version']],
  ['run --no-ledger -- true', ['run', '--no-ledger', '--', 'true']],
];

function time(args, bundle) {
  const env = { ...process.env, XDG_STATE_HOME: state, TETHER_CLI_BUNDLE: bundle };
  const t = performance.now();
  execFileSync(process.execPath, args, { env, stdio: 'ignore' });
  return performance.now() - t;
}

const results = { reps: REPS, node: [], commands: {} };
for (const [name] of COMMANDS) results.commands[name] = Object.fromEntries(WAYS.map(([w]) => [w, []]));
for (const [, args] of COMMANDS) for (const [, b] of WAYS) time([cli, ...args], b); // warm the page cache
for (let i = 0; i < REPS; i++) {
  results.node.push(time(['-e', '0'], '1'));
  for (const [name, args] of COMMANDS)
    for (const [way, b] of WAYS) results.commands[name][way].push(time([cli, ...args], b));
}
rmSync(state, { recursive: true, force: true });

log(`a fresh process, ${REPS} runs each, interleaved:`);
log(`  node -e 0                                   p50 ${fmt(median(results.node)).padStart(6)} ms`);
for (const [name] of COMMANDS) {
  log(`tether ${name}:`);
  const base = median(results.commands[name][WAYS[0][0]]);
  for (const [way] of WAYS) {
    const xs = results.commands[name][way];
    const p50 = median(xs);
    log(
      `  ${way.padEnd(40)}  p50 ${fmt(p50).padStart(6)} ms   p90 ${fmt(quantile(xs, 0.9)).padStart(6)} ms   ×${(p50 / base).toFixed(2)}`,
    );
  }
}
mkdirSync(join(ROOT, 'build'), { recursive: true });
writeFileSync(join(ROOT, 'build/bench-start.json'), `${JSON.stringify(results, null, 2)}\n`);
