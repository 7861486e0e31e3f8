// Cost of sandbox mode over an exec channel (docs/sandbox.md), in a real container: a PID and
// mount namespace made by `unshare --pid --mount --fork --mount-proc`, whose init is a sleep
// loop, entered through `nsenter -t INIT -a` (as test/sandbox/container.ts makes one), its /tmp
// a private tmpfs (the pushed helper never lands in the host's /tmp). From dist/, interleaved
// (one of each per round, the order rotated), p50/p90 over N rounds and the ratios to the bare
// client:
//
//   - the bare client: `nsenter -t INIT -a true`, spawned as the channel spawns every exec;
//   - the bare client running `sh -c true`: the floor of anything the target's shell runs;
//   - `sandbox.exec(channel, ['true'])`;
//   - `sandbox.run(channel, ['true'], { helper: false })`, with its end sweep (the env tag alone);
//   - `sandbox.run(channel, ['true'], { helper: true })`, the helper already pushed, through the
//     same channel object: a session there takes the helper an earlier one checked, with no
//     check exec (its wrapper hashes it at its exec);
//   - the same through a new channel object per call, as a new process (the CLI) runs it: the
//     check exec finds the helper and reuses it; the push itself (the first call on a fresh
//     /tmp, through a new channel object) is measured apart, K times, each on a fresh tmpfs
//     stacked over /tmp;
//   - `pushHelper(channel)` alone once pushed (the hash check in the container).
//
// Every call goes through a counting channel: how many execs each makes, of which program, and
// how long each took (spawn to the client's exit) — where the time goes; a run's end sweep also
// says how long its program took in the container and how many scans it made (50 ms apart). Every result is checked:
// exit 0, empty output, a complete report that stopped nothing, the helper pushed or reused as
// expected. The targets (sandbox.exec ≤ 1.3× the bare client, sandbox.run with its end sweep
// ≤ 2.3× one bare exec, at p50) are printed met or not. Run with `npm run bench:sandbox`
// (builds dist/ first; root: it makes namespaces), or as part of `npm run bench`.
// `BENCH_SANDBOX_RUNS` sets N (default 100), `BENCH_SANDBOX_PUSHES` K (default 10). Raw figures
// go to build/bench-sandbox.json.
import { execFileSync, spawn as spawnChild } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { sandbox } from '../dist/index.js';
import { pushHelper } from '../dist/sandbox/helper-push.js';
import { cpuBusy, fmt, gitDescribe, log, machineInfo, quantile, ROOT, withTimeout } from './lib.js';

const RUNS = Number(process.env.BENCH_SANDBOX_RUNS ?? 100);
const PUSHES = Number(process.env.BENCH_SANDBOX_PUSHES ?? 10);
const WARMUP = 5;
const LIFETIME_S = 900; // the container's init ends by itself after this, whatever happens to us
const TARGET_EXEC = 1.3;
const TARGET_RUN = 2.3;

/** The container: its init's host pid, the unshare process, the channel's prefix. */
async function startContainer() {
  const loops = LIFETIME_S * 4;
  const child = spawnChild(
    'unshare',
    [
      '--pid',
      '--mount',
      '--fork',
      '--mount-proc',
      '--kill-child',
      'sh',
      '-c',
      `i=0; while [ $i -lt ${loops} ]; do sleep 0.25; i=$((i+1)); done`,
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise((r) => child.once('exit', r));
  let init = 0;
  for (let i = 0; i < 100 && !init; i++) {
    try {
      const kids = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'latin1').trim();
      if (kids) init = Number(kids.split(' ')[0]);
    } catch {
      // not yet
    }
    if (!init) await delay(20);
  }
  const initStart = () => {
    try {
      return readFileSync(`/proc/${init}/stat`, 'latin1').split(') ')[1].split(' ')[19];
    } catch {
      return null;
    }
  };
  const started = init ? initStart() : null;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); // --kill-child
    await Promise.race([exited, delay(5000)]);
    // The init ends a moment after unshare (its parent-death signal): wait until it is gone.
    for (let i = 0; i < 250 && init && initStart() === started; i++) {
      const state = readFileSync(`/proc/${init}/stat`, 'latin1').split(') ')[1]?.[0];
      if (state === 'Z' || state === 'X') break;
      await delay(20);
    }
  };
  if (!init) {
    await stop();
    throw new Error('premise broken: the container init did not start');
  }
  return { init, prefix: ['nsenter', '-t', String(init), '-a'], stop };
}

/** A fresh tmpfs on the container's /tmp, stacked over the last (in its own mount namespace). */
function freshTmp(init) {
  execFileSync(
    'nsenter',
    ['-t', String(init), '-m', 'mount', '-t', 'tmpfs', '-o', 'mode=1777,size=16m', 'tether-bench', '/tmp'],
    { timeout: 10_000 },
  );
}

/**
 * The channel, counting: each exec's program (the word after `-c PROGRAM`: tether-wrap,
 * tether-sweep, tether-helper-check, tether-write; `true` for the bare client) and its time from
 * the spawn to the client's exit, into `calls` while `current` is set.
 */
function counting(inner) {
  let current = null;
  return {
    describe: inner.describe,
    argv: inner.argv,
    begin() {
      current = [];
    },
    end() {
      const c = current;
      current = null;
      return c;
    },
    exec(argv) {
      const c = inner.exec(argv);
      const i = argv.indexOf('-c');
      const name =
        i >= 0 && argv[i + 2] ? argv[i + 2] : argv[1] === '--call' ? 'tether-call' : argv.join(' ');
      const t = performance.now();
      const list = current;
      c.exited.then(() => list?.push({ name, ms: performance.now() - t }));
      return c;
    },
  };
}

/** One bare exec through the channel (`true`), its stdin closed, to its exit and streams' end. */
async function bare(channel, argv = ['true']) {
  const c = channel.exec(argv);
  let out = '';
  c.stdout.on('data', (d) => {
    out += d;
  });
  c.stderr.on('data', (d) => {
    out += d;
  });
  const closed = (s) => new Promise((r) => (s.destroyed || s.closed ? r() : s.once('close', r)));
  c.stdin.end();
  const [exit] = await Promise.all([c.exited, closed(c.stdout), closed(c.stderr)]);
  if (exit.status !== 0 || exit.signal || out !== '')
    throw new Error(`bare client ${argv.join(' ')}: ${JSON.stringify({ ...exit, out })}`);
}

function checkReport(name, report) {
  if (!report?.complete || report.stopped.length)
    throw new Error(
      `${name}: report ${JSON.stringify({ complete: report?.complete, stopped: report?.stopped })}`,
    );
}

function checkExec(name, r) {
  if (
    !r.ok ||
    r.exitCode !== 0 ||
    r.clientStatus !== 0 ||
    r.stoppedBy !== null ||
    r.streamHeld ||
    r.stdout !== '' ||
    r.stderr !== ''
  )
    throw new Error(
      `${name}: unexpected result ${JSON.stringify({ ok: r.ok, exitCode: r.exitCode, clientStatus: r.clientStatus, stoppedBy: r.stoppedBy, streamHeld: r.streamHeld, stdout: r.stdout, stderr: r.stderr })}`,
    );
  if (r.report) checkReport(name, r.report);
}

// Checks a run's result; returns its sweep's own timings (the program's, in the container).
function checkRun(name, r, how) {
  checkExec(name, r);
  checkReport(name, r.report);
  if (how) {
    const note = r.report.notes.find((n) => n.startsWith('the commands ran under the helper '));
    if (!note?.includes(`(${how};`))
      throw new Error(`${name}: not under the helper ${how}: notes ${JSON.stringify(r.report.notes)}`);
  }
  const { durationMs, scans } = r.report.timings;
  return { durationMs, scans, proof: r.report.proof };
}

async function main() {
  const busy = await cpuBusy(500);
  const loadStart = readFileSync('/proc/loadavg', 'latin1').trim();
  const started = performance.now();
  const box = await startContainer();
  log(`container init ${box.init}`);
  try {
    freshTmp(box.init);
    const channel = counting(sandbox.commandChannel(box.prefix));
    const res = await measure(channel, box);
    res.busy = busy;
    res.loadStart = loadStart;
    res.loadEnd = readFileSync('/proc/loadavg', 'latin1').trim();
    res.totalMs = performance.now() - started;
    report(res);
  } finally {
    await box.stop();
    log('container stopped');
  }
}

async function measure(channel, box) {
  // The helper's first push, K times, each on a fresh /tmp (the bare client beside each).
  const probe = await pushHelper(channel);
  const helper = !('unavailable' in probe);
  if (!helper && probe.code !== 'no-prebuilt') throw new Error(`pushHelper: ${probe.unavailable}`);
  if (!helper) log(`helper rows skipped: ${probe.unavailable}`);
  const expected = helper ? probe : null;

  // The channel a contender runs through: `fn(ch)`; a fresh one for each call where the contender
  // must not find a helper an earlier session checked through the same channel object
  // (session-helper.ts, knownHelper), as a new process (the CLI) never does.
  const time = async (name, fn, fresh = false) => {
    const ch = fresh ? counting(sandbox.commandChannel(box.prefix)) : channel;
    ch.begin();
    const t = performance.now();
    const sweep = await withTimeout(fn(ch), 60_000, name);
    const ms = performance.now() - t;
    await delay(0); // the last exec's `exited` listener has run
    return { ms, execs: ch.end(), ...(sweep ? { sweep } : {}) };
  };

  const contenders = {
    bare: () => bare(channel),
    'bare, sh -c true': () => bare(channel, ['sh', '-c', 'true']),
    'sandbox.exec': async () => checkExec('sandbox.exec', await sandbox.exec(channel, ['true'])),
    'sandbox.run': async () =>
      checkRun('sandbox.run', await sandbox.run(channel, ['true'], { helper: false })),
  };
  if (helper) {
    // The resident helper (docs/sandbox.md, "The resident helper"): its server started by the
    // first call (the warm-up round), each measured call one exec of its client.
    contenders['sandbox.exec, resident'] = async () => {
      const r = await sandbox.exec(channel, ['true'], { resident: true });
      if (r.blindSpots.some((b) => b.startsWith('the end line rests on the session')))
        throw new Error('sandbox.exec, resident: ran under the wrapper (no server)');
      checkExec('sandbox.exec, resident', r);
    };
    // One exec per sandbox.run (docs/sandbox.md, "One exec per sandbox.run"): the command and
    // the session's sweep in one call of the same server.
    contenders['sandbox.run, resident'] = async () => {
      const r = await sandbox.run(channel, ['true'], { resident: true });
      if (!r.report.notes.some((n) => n.startsWith("the command and the session's sweep ran in one call")))
        throw new Error(`sandbox.run, resident: not in one call: notes ${JSON.stringify(r.report.notes)}`);
      return checkRun('sandbox.run, resident', r);
    };
    contenders['sandbox.run helper (reused)'] = async () =>
      checkRun('sandbox.run helper', await sandbox.run(channel, ['true'], { helper: true }), 'reused');
    contenders['sandbox.run helper (reused, new channel)'] = async (ch) =>
      checkRun(
        'sandbox.run helper, new channel',
        await sandbox.run(ch, ['true'], { helper: true }),
        'reused',
      );
    contenders['pushHelper (pushed: the check)'] = async () => {
      const r = await pushHelper(channel);
      if (
        'unavailable' in r ||
        r.pushed ||
        r.replaced ||
        r.sha256 !== expected.sha256 ||
        r.path !== expected.path
      )
        throw new Error(`pushHelper: ${JSON.stringify(r)}`);
    };
  }
  const first = [];
  const firstBare = [];
  if (helper) {
    for (let i = 0; i < PUSHES; i++) {
      freshTmp(box.init);
      firstBare.push(await time('bare', contenders.bare));
      first.push(
        await time(
          'first push',
          async (ch) =>
            checkRun(
              'sandbox.run helper (first)',
              await sandbox.run(ch, ['true'], { helper: true }),
              'pushed by this session',
            ),
          true,
        ),
      );
    }
  }

  const names = Object.keys(contenders);
  for (let i = 0; i < WARMUP; i++)
    for (const n of names) await time(n, contenders[n], n.endsWith('new channel)'));
  const samples = Object.fromEntries(names.map((n) => [n, []]));
  for (let i = 0; i < RUNS; i++) {
    for (let j = 0; j < names.length; j++) {
      const n = names[(i + j) % names.length];
      samples[n].push(await time(n, contenders[n], n.endsWith('new channel)')));
    }
  }
  if (helper) samples['sandbox.run helper (first: pushes)'] = first;
  return { helper: helper ? expected : probe, samples, firstBare };
}

// Per contender: p50/p90, the execs each call made (by program), each program's p50 time.
function summarize(samples) {
  const base = quantile(
    samples.bare.map((s) => s.ms),
    0.5,
  );
  const base90 = quantile(
    samples.bare.map((s) => s.ms),
    0.9,
  );
  return Object.entries(samples).map(([name, xs]) => {
    const ms = xs.map((s) => s.ms);
    const p50 = quantile(ms, 0.5);
    const p90 = quantile(ms, 0.9);
    const shapes = new Set(xs.map((s) => s.execs.map((e) => e.name).join(' + ')));
    const byProgram = {};
    for (const s of xs) {
      for (const e of s.execs) {
        byProgram[e.name] ??= [];
        byProgram[e.name].push(e.ms);
      }
    }
    const execP50 = Object.fromEntries(Object.entries(byProgram).map(([k, v]) => [k, quantile(v, 0.5)]));
    const inExecs = quantile(
      xs.map((s) => s.execs.reduce((a, e) => a + e.ms, 0)),
      0.5,
    );
    const swept = xs.filter((s) => s.sweep).map((s) => s.sweep);
    const sweep = swept.length
      ? {
          durationP50: quantile(
            swept.map((w) => w.durationMs),
            0.5,
          ),
          scans: [...new Set(swept.map((w) => w.scans))].sort((a, b) => a - b),
          proofs: [...new Set(swept.map((w) => w.proof))],
        }
      : null;
    return {
      name,
      n: xs.length,
      sweep,
      p50,
      p90,
      ratioP50: p50 / base,
      ratioP90: p90 / base90,
      execs: [...shapes],
      execP50,
      inExecsP50: inExecs,
    };
  });
}

function report(res) {
  const rows = summarize(res.samples);
  const row = (n) => rows.find((r) => r.name === n);
  const exec = row('sandbox.exec');
  const run = row('sandbox.run');
  const targets = [
    {
      what: `sandbox.exec p50 ≤ ${TARGET_EXEC}× the bare client`,
      ratio: exec.ratioP50,
      met: exec.ratioP50 <= TARGET_EXEC,
    },
    {
      what: `sandbox.run (with its end sweep, helper: false) p50 ≤ ${TARGET_RUN}× one bare exec`,
      ratio: run.ratioP50,
      met: run.ratioP50 <= TARGET_RUN,
    },
  ];
  const resident = row('sandbox.exec, resident');
  if (resident)
    targets.push({
      what: `sandbox.exec (resident) p50 ≤ ${TARGET_EXEC}× the bare client`,
      ratio: resident.ratioP50,
      met: resident.ratioP50 <= TARGET_EXEC,
    });
  // The library's default runs under the helper: through a channel a session used before (the
  // helper known), and through a new one (a new process: the CLI).
  for (const [name, how] of [
    ['sandbox.run, resident', 'resident: one exec'],
    ['sandbox.run helper (reused)', 'the default, the helper known'],
    ['sandbox.run helper (reused, new channel)', 'the default, a new channel: the CLI'],
  ]) {
    const r = row(name);
    if (r)
      targets.push({
        what: `sandbox.run (${how}) p50 ≤ ${TARGET_RUN}× one bare exec`,
        ratio: r.ratioP50,
        met: r.ratioP50 <= TARGET_RUN,
      });
  }
  const machine = machineInfo();
  const commit = gitDescribe();
  const out = {
    runs: RUNS,
    pushes: PUSHES,
    commit,
    machine,
    cpuBusyAtStart: res.busy,
    loadavgStart: res.loadStart,
    loadavgEnd: res.loadEnd,
    totalMs: res.totalMs,
    helper: res.helper,
    rows,
    targets,
    firstPushBareP50: res.firstBare.length
      ? quantile(
          res.firstBare.map((s) => s.ms),
          0.5,
        )
      : null,
    samples: res.samples,
  };
  mkdirSync(join(ROOT, 'build'), { recursive: true });
  writeFileSync(join(ROOT, 'build/bench-sandbox.json'), `${JSON.stringify(out, null, 2)}\n`);
  const execsOf = (r) =>
    r.execs.length === 1
      ? `${r.execs[0].split(' + ').length}: ${r.execs[0]}`
      : `varied: ${r.execs.join(' | ')}`;
  const lines = [
    `\`true\` in a container over \`nsenter -t INIT -a\`, ${RUNS} rounds interleaved (ms; the first push ${res.samples['sandbox.run helper (first: pushes)']?.length ?? 0} times apart, each on a fresh /tmp)`,
    '',
    '| contender | p50 | p90 | p50 / bare | p90 / bare | execs per call | in execs (p50) |',
    '|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.name} | ${fmt(r.p50)} | ${fmt(r.p90)} | ${r.ratioP50.toFixed(2)}× | ${r.ratioP90.toFixed(2)}× | ${execsOf(r)} | ${fmt(r.inExecsP50)} |`,
    ),
    '',
    'each program’s exec, p50 (spawn to the client’s exit), per contender:',
    ...rows.map(
      (r) =>
        `  ${r.name}: ${Object.entries(r.execP50)
          .map(([k, v]) => `${k} ${fmt(v)}`)
          .join(', ')}`,
    ),
    '',
    "the end sweep as its program timed itself in the container (p50; the sweep program reads /proc/uptime, 10 ms steps; the helper's sweep CLOCK_MONOTONIC, ms):",
    ...rows
      .filter((r) => r.sweep)
      .map(
        (r) =>
          `  ${r.name}: ${fmt(r.sweep.durationP50)} ms, ${r.sweep.scans.join(' or ')} scans, proof ${r.sweep.proofs.join(' / ')}`,
      ),
    '',
    ...targets.map((t) => `target: ${t.what}: ${t.ratio.toFixed(2)}× — ${t.met ? 'met' : 'NOT met'}`),
    '',
    `machine: ${machine.cores} cores (${machine.cpu}), kernel ${machine.kernel}, node ${machine.node}; ` +
      `commit ${commit}; CPU ${(res.busy * 100).toFixed(0)}% busy before the run; loadavg ${res.loadStart} at start, ${res.loadEnd} at end; ` +
      `run took ${(res.totalMs / 1000).toFixed(1)} s; raw figures in build/bench-sandbox.json`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  log('sandbox: done');
}

main().catch((error) => {
  process.stderr.write(`[bench] failed: ${error.stack ?? error}\n`);
  process.exitCode = 1;
});
