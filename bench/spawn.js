// Cost of a default spawn (docs/sessions.md, "Who reads what"): `await spawn('sh', ['-c',
// 'echo hi'])` from dist/ with default options, next to a bare `child_process.execFile` of the
// same command and to `spawn` with containment ['env-tag'] only (no helper, no cgroup), in one
// run, interleaved (one of each per round, the order rotated), p50/p90 over N rounds, and the
// ratios to execFile. Run with `npm run bench:spawn` (builds dist/ first), or as part of
// `npm run bench`. `BENCH_SPAWN_RUNS` sets N (default 200).
//
// Where the default spawn's time goes, in the same rounds: a `session()` whose command is
// `sh -c 'echo hi'`, timed from `spawn` to the command's exit (`exited`: the helper's start, the
// cgroup, the command) and then from that exit to `end()`'s report (the sweep: one walk, the
// cgroup's `populated 0`, the helper asked and released).
//
// `BENCH_SPAWN_BEFORE=<dir>` adds an older build's default `spawn` (`<dir>/dist/index.js`, e.g.
// a worktree of an earlier commit, built) as one more contender: before and after in one run.
//
// Every result is checked: stdout 'hi\n' (tether's 'hi': its final newline stripped, as
// execa's), exit 0, outputTimedOut false, and (for tether) a complete report that stopped
// nothing. Raw figures go to build/bench-spawn.json.
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { session, spawn } from '../dist/index.js';
import { cpuBusy, fmt, gitDescribe, log, machineInfo, quantile, ROOT, withTimeout } from './lib.js';

const RUNS = Number(process.env.BENCH_SPAWN_RUNS ?? 200);
const WARMUP = 10;
const ARGS = ['-c', 'echo hi'];
const run = promisify(execFile);
const BEFORE = process.env.BENCH_SPAWN_BEFORE;
const before = BEFORE ? await import(join(BEFORE, 'dist/index.js')) : undefined;
/** The phases of the session contenders, per build and round: spawn → exit, exit → end()'s report. */
const phases = { this: { toExit: [], toEnd: [] }, ...(before ? { before: { toExit: [], toEnd: [] } } : {}) };

// A session whose command is `sh -c 'echo hi'`, timed by phase into `into`.
const sessionContender = (make, into) => async () => {
  const s = make();
  const t0 = performance.now();
  const end = await s.spawn('sh', ARGS).exited;
  const t1 = performance.now();
  const report = await s.end();
  into.toExit.push(t1 - t0);
  into.toEnd.push(performance.now() - t1);
  if (end.exitCode !== 0 || end.stdout !== 'hi\n' || !report.complete || report.stopped.length)
    throw new Error(`session: unexpected ${JSON.stringify({ exitCode: end.exitCode, stdout: end.stdout })}`);
};

const contenders = {
  execFile: async () => {
    const { stdout } = await run('sh', ARGS);
    if (stdout !== 'hi\n') throw new Error(`execFile: stdout ${JSON.stringify(stdout)}`);
  },
  'spawn (default)': async () => check('spawn (default)', await spawn('sh', ARGS)),
  "spawn (containment ['env-tag'])": async () =>
    check("spawn (containment ['env-tag'])", await spawn('sh', ARGS, { containment: ['env-tag'] })),
  'session().spawn, then end()': sessionContender(session, phases.this),
};
if (before) {
  contenders[`spawn (default), ${BEFORE}`] = async () => {
    const r = await before.spawn('sh', ARGS);
    check('before', { ...r, stdout: r.stdout.replace(/\n$/, '') });
  };
  contenders[`session().spawn, then end(), ${BEFORE}`] = sessionContender(before.session, phases.before);
}

function check(name, r) {
  if (
    r.stdout !== 'hi' ||
    r.exitCode !== 0 ||
    r.outputTimedOut ||
    !r.report.complete ||
    r.report.stopped.length
  )
    throw new Error(
      `${name}: unexpected result ${JSON.stringify({ stdout: r.stdout, exitCode: r.exitCode, outputTimedOut: r.outputTimedOut, complete: r.report.complete, stopped: r.report.stopped.length })}`,
    );
}

async function time(fn) {
  const t = performance.now();
  await withTimeout(fn(), 30_000, 'one spawn');
  return performance.now() - t;
}

async function main() {
  const busy = await cpuBusy(500);
  const names = Object.keys(contenders);
  for (let i = 0; i < WARMUP; i++) for (const n of names) await time(contenders[n]);
  const samples = Object.fromEntries(names.map((n) => [n, []]));
  for (let i = 0; i < RUNS; i++) {
    for (let j = 0; j < names.length; j++) {
      const n = names[(i + j) % names.length];
      samples[n].push(await time(contenders[n]));
    }
  }
  const base = { p50: quantile(samples.execFile, 0.5), p90: quantile(samples.execFile, 0.9) };
  const rows = names.map((n) => {
    const p50 = quantile(samples[n], 0.5);
    const p90 = quantile(samples[n], 0.9);
    return { name: n, p50, p90, ratioP50: p50 / base.p50, ratioP90: p90 / base.p90 };
  });
  const res = {
    runs: RUNS,
    commit: gitDescribe(),
    machine: machineInfo(),
    cpuBusyAtStart: busy,
    rows,
    samples,
  };
  const phaseRows = Object.entries(phases).flatMap(([build, byPhase]) =>
    Object.entries(byPhase).map(([k, v]) => {
      v.splice(0, WARMUP);
      return {
        phase: `${build === 'this' ? '' : 'before: '}${k}`,
        p50: quantile(v, 0.5),
        p90: quantile(v, 0.9),
      };
    }),
  );
  res.phases = phaseRows;
  mkdirSync(join(ROOT, 'build'), { recursive: true });
  writeFileSync(join(ROOT, 'build/bench-spawn.json'), `${JSON.stringify(res, null, 2)}\n`);
  const out = [
    `spawn('sh', ['-c', 'echo hi']) to its result, ${RUNS} rounds interleaved (ms)`,
    '',
    '| contender | p50 | p90 | p50 / execFile | p90 / execFile |',
    '|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.name} | ${fmt(r.p50)} | ${fmt(r.p90)} | ${r.ratioP50.toFixed(2)}× | ${r.ratioP90.toFixed(2)}× |`,
    ),
    '',
    "the session contender by phase: spawn → the command exited (`exited`), then → end()'s report",
    ...phaseRows.map((r) => `  ${r.phase}: p50 ${fmt(r.p50)} ms, p90 ${fmt(r.p90)} ms`),
    '',
    `commit ${res.commit}; CPU ${(busy * 100).toFixed(0)}% busy before the run; raw figures in build/bench-spawn.json`,
  ];
  process.stdout.write(`${out.join('\n')}\n`);
  log('spawn: done');
}

await main();
