// Benchmark of the guard (docs/guard.md, docs/benchmarks.md). Run with `npm run bench:guard`
// (builds dist/ first), or as part of `npm run bench`.
//
// One tick (`createGuard(…).tick()`) at 1,000 processes in the target, its CPU time
// (process.cpuUsage() across the tick: user + system, every thread of this process) as a ratio
// to a C loop reading the same files for the same pids in the same run (bench/guard-loop.c,
// CLOCK_PROCESS_CPUTIME_ID), interleaved, median of BENCH_GUARD_REPS (≥ 9).
//
// Where: as root, in a PID namespace of its own (`unshare --pid --fork --mount-proc`, this file
// run again inside it, as its PID 1), so that /proc holds the benchmark's processes alone (a
// container's view) and not whatever else the machine runs: a tick reads the stat and environ
// of every process of its PID namespace, the target's and the others'. BENCH_GUARD_NS=host
// runs it in the caller's namespace instead.
//
// The target: a cgroup v2 directory made here under the v2 mount (/proc/self/mountinfo). The
// spawner (bench/spawner.c, the Spawner of bench/lib.js) is moved into it before it forks, so
// its 1,000 sleeps are born there; it stays their parent and reaps them.
//
// What the tick does with them: every sleep is spared by a user pattern (`sleep 1000`), the
// spawner by `guard` (it is the guard's child) or `exec-entry` (its parent, outside the
// target). That is the full
// decision of a tick: the snapshot, every environ (live sessions), the cgroup walk, the
// registrations, and every target's cmdline read and matched — and nothing to stop, which is a
// guard's steady state. `dryRun` is set too, so that a rule that did not spare a sleep could
// not stop it: the run checks every tick spared exactly the 1,000 by pattern and would stop
// none. (A dry run without the pattern measures less: the sleeps are then spared through the
// spawner, by ancestry, and no cmdline is read.)
//
// At the end, on an error and on ^C: the spawner kills and reaps every sleep, and the cgroup is
// removed.
import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { createGuard } from '../dist/index.js';
import { findCgroup2Mount } from '../dist/proc/cgroup.js';
import { takeSnapshot } from '../dist/proc/snapshot.js';
import { createTag } from '../dist/proc/tag.js';
import {
  cpuBusy,
  fmt,
  gitDescribe,
  log,
  machineInfo,
  median,
  quantile,
  ROOT,
  raisePidMax,
  Spawner,
} from './lib.js';

const BUILD = join(ROOT, 'build');
const SLEEP_SECONDS = '1000'; // far beyond any timer of ours: the VM fast-forwards idle clocks
const N = Number(process.env.BENCH_GUARD_PROCESSES ?? 1000);
const REPS = Math.max(9, Number(process.env.BENCH_GUARD_REPS ?? 15));
const WARMUP = 3;
/** Targets: tick CPU time vs the C loop's, and the tick's CPU time itself (ms). */
const RATIO_TARGET = 1.5;
const CPU_TARGET_MS = 20;
const PATTERN = `sleep ${SLEEP_SECONDS}`;
/** `own`: this run is PID 1 of a namespace made for it; `host`: the caller's namespace. */
const NAMESPACE = process.env.BENCH_GUARD_NS === 'own' && process.pid === 1 ? 'own' : 'host';

/**
 * Runs this file again as PID 1 of a new PID namespace with its own /proc; resolves to its exit
 * status. ^C reaches both (one process group): the inner run cleans up, this one waits for it.
 */
function runInNamespace() {
  const child = spawn(
    'unshare',
    [
      '--pid',
      '--fork',
      '--mount-proc',
      process.execPath,
      ...process.execArgv,
      fileURLToPath(import.meta.url),
    ],
    { stdio: 'inherit', env: { ...process.env, BENCH_GUARD_NS: 'own' } },
  );
  const ignore = () => {};
  process.on('SIGINT', ignore);
  process.on('SIGTERM', (sig) => child.kill(sig));
  return new Promise((resolve) => {
    child.once('error', (error) => {
      log(`unshare: ${error.message}`);
      resolve(1);
    });
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

function compile(name) {
  const out = join(BUILD, name);
  execFileSync('cc', ['-O2', '-o', out, join(ROOT, 'bench', `${name}.c`)], {
    stdio: 'inherit',
    timeout: 60_000,
  });
  return out;
}

/** One run of the C loop: two passes, the second kept (the first warms the dentry caches). */
function cLoop(bin, cgroup, stateFile, skipPid) {
  const out = execFileSync(bin, ['2', cgroup, stateFile, String(skipPid)], {
    encoding: 'latin1',
    timeout: 60_000,
  });
  const [cpuMs, wallMs, stats, environs, cgroupPids, cmdlines] = out
    .trim()
    .split('\n')
    .at(-1)
    .split(' ')
    .map(Number);
  return { cpuMs, wallMs, stats, environs, cgroupPids, cmdlines };
}

/** One tick: CPU (user + system, ms) and wall time around it, and what it decided. */
async function timeTick(guard) {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const result = await guard.tick();
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  return {
    cpuMs: (cpu.user + cpu.system) / 1000,
    userMs: cpu.user / 1000,
    systemMs: cpu.system / 1000,
    wallMs,
    result,
  };
}

/** Throws unless the tick saw the spawner and its N sleeps, spared them all, and stopped nothing. */
function checkTick(result) {
  const bad = [];
  if (!result.complete) bad.push(`incomplete (${result.warnings.map((w) => w.code).join(', ')})`);
  if (result.target.processes !== N + 1)
    bad.push(`${result.target.processes} target processes, not ${N + 1}`);
  if (result.spared.pattern !== N) bad.push(`${result.spared.pattern} spared by pattern, not ${N}`);
  const spawner = result.spared['exec-entry'] + result.spared.guard;
  if (spawner !== 1) bad.push(`${spawner} spared by exec-entry or guard (the spawner), not 1`);
  if (result.wouldStop.length || result.stopped.length || result.survived.length) {
    bad.push(`would stop ${result.wouldStop.length}, stopped ${result.stopped.length}`);
  }
  if (result.problems.length) bad.push(`problems: ${result.problems.map((p) => p.message).join('; ')}`);
  if (bad.length) throw new Error(`tick ${result.tick}: ${bad.join('; ')}`);
}

/** Removes the cgroup once its last process (the spawner, reaped by now) has left it. */
async function removeCgroupDir(dir) {
  for (let i = 0; i < 40; i++) {
    try {
      rmdirSync(dir);
      return true;
    } catch (error) {
      if (error.code === 'ENOENT') return true;
      if (error.code !== 'EBUSY') throw error;
      await delay(50);
    }
  }
  log(`could not remove ${dir} (still busy after 2 s)`);
  return false;
}

async function measure(sp, bins, cgroup) {
  const stateDir = join(BUILD, `guard-state-${randomUUID().slice(0, 8)}`); // never created: no registrations
  const stateFile = join(stateDir, 'guard-allow');
  const spawnerPid = sp.child.pid;
  log(`starting ${N} sleeps in ${cgroup}`);
  const t0 = performance.now();
  await sp.start(N, { tagged: false, setsid: false });
  log(`${N} sleeps started in ${fmt(performance.now() - t0)} ms`);
  const guard = createGuard({
    cgroup,
    allowPatterns: [PATTERN],
    minAgeMs: 0, // the sleeps are a moment old: min-age must not spare them before the pattern
    dryRun: true,
    stateDir,
    log: (line) => log(`guard: ${line}`), // nothing is expected: any line is shown
  });
  // A sleep forked a moment ago may still be in its exec (cmdline not yet `sleep 1000`): look
  // again, up to 2 s, until a tick spares all N by pattern.
  let first = await timeTick(guard);
  for (let i = 0; i < 40 && first.result.spared.pattern !== N; i++) {
    await delay(50);
    first = await timeTick(guard);
  }
  checkTick(first.result);
  for (let i = 0; i < WARMUP; i++) checkTick((await timeTick(guard)).result);

  const samples = {
    tickCpu: [],
    tickUser: [],
    tickSystem: [],
    tickWall: [],
    tickDuration: [],
    cCpu: [],
    cWall: [],
  };
  let c;
  let tick;
  for (let r = 0; r < REPS; r++) {
    // Interleaved, so that drift hits both columns alike.
    c = cLoop(bins.guardLoop, cgroup, stateFile, spawnerPid);
    await new Promise((resolve) => setImmediate(resolve)); // the tick starts on a fresh turn
    tick = await timeTick(guard);
    checkTick(tick.result);
    if (c.cgroupPids !== N + 1 || c.cmdlines !== N) {
      throw new Error(
        `C loop read ${c.cgroupPids} cgroup pids and ${c.cmdlines} cmdlines, expected ${N + 1}, ${N}`,
      );
    }
    samples.cCpu.push(c.cpuMs);
    samples.cWall.push(c.wallMs);
    samples.tickCpu.push(tick.cpuMs);
    samples.tickUser.push(tick.userMs);
    samples.tickSystem.push(tick.systemMs);
    samples.tickWall.push(tick.wallMs);
    samples.tickDuration.push(tick.result.durationMs);
    log(
      `rep ${r + 1}/${REPS}: tick cpu ${fmt(tick.cpuMs)} ms (user ${fmt(tick.userMs)}, sys ${fmt(tick.systemMs)}), ` +
        `wall ${fmt(tick.wallMs)} ms; C loop cpu ${fmt(c.cpuMs)} ms, wall ${fmt(c.wallMs)} ms`,
    );
  }
  const m = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)]));
  await guard.stop();
  return {
    n: N,
    target: cgroup,
    mode: `every sleep spared by the pattern ${JSON.stringify(PATTERN)}, the spawner by ${tick.result.spared.guard ? 'guard' : 'exec-entry'}; dryRun set; nothing stopped`,
    pidNamespace: NAMESPACE,
    processesInTarget: tick.result.target.processes,
    processesSeen: c.stats,
    environsRead: c.environs,
    cmdlinesRead: c.cmdlines,
    spared: tick.result.spared,
    medians: m,
    p90: { tickCpu: quantile(samples.tickCpu, 0.9), cCpu: quantile(samples.cCpu, 0.9) },
    ratioCpu: m.tickCpu / m.cCpu,
    ratioWall: m.tickWall / m.cWall,
    samples,
  };
}

function table(t) {
  const m = t.medians;
  return [
    '| row | measured (median) | reference | ratio / target |',
    '|---|---|---|---|',
    `| guard tick, ${t.n.toLocaleString('en')} processes in the target (${t.processesSeen} in /proc), CPU user+sys | ` +
      `${fmt(m.tickCpu)} ms (wall ${fmt(m.tickWall)} ms) | C loop, same files ${fmt(m.cCpu)} ms (wall ${fmt(m.cWall)} ms) | ` +
      `**${t.ratioCpu.toFixed(2)}×** (target ≤ ${RATIO_TARGET}×: ${t.ratioCpu <= RATIO_TARGET ? 'met' : 'MISSED'}; ` +
      `≤ ${CPU_TARGET_MS} ms: ${m.tickCpu <= CPU_TARGET_MS ? 'met' : 'MISSED'}) |`,
  ].join('\n');
}

async function main() {
  if (process.env.BENCH_GUARD_NS !== 'host' && NAMESPACE === 'host') {
    if (process.getuid?.() !== 0) {
      log('not root: measuring in this PID namespace (every process of it is read by the tick)');
    } else {
      process.exitCode = await runInNamespace();
      return;
    }
  }
  mkdirSync(BUILD, { recursive: true });
  raisePidMax();
  const found = findCgroup2Mount();
  if (!('mount' in found)) throw new Error(`no cgroup v2 to make the target in: ${found.note}`);
  const bins = { guardLoop: compile('guard-loop'), spawner: compile('spawner') };
  log(`compiled ${bins.guardLoop} and ${bins.spawner}`);
  const cgroup = join(found.mount, `tether-bench-guard-${randomUUID().slice(0, 8)}`);
  mkdirSync(cgroup);
  const sp = new Spawner(bins.spawner, createTag().entry, SLEEP_SECONDS);
  // Into the target before any fork: every sleep is born in it.
  writeFileSync(join(cgroup, 'cgroup.procs'), String(sp.child.pid));
  let stopping = false;
  const cleanUp = async () => {
    await sp.close();
    await removeCgroupDir(cgroup);
  };
  const onSignal = (sig) => {
    if (stopping) return;
    stopping = true;
    log(`${sig}: stopping, killing every benchmark process and removing ${cgroup}`);
    cleanUp().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const started = performance.now();
  try {
    const res = {
      machine: machineInfo(),
      date: new Date().toISOString(),
      commit: gitDescribe(),
      loadavgStart: readFileSync('/proc/loadavg', 'latin1').trim(),
      processesAtStart: takeSnapshot().processes.size,
      pidNamespace: NAMESPACE,
    };
    res.cpuBusyAtStart = await cpuBusy(1000);
    if (res.cpuBusyAtStart > 0.2) {
      log(
        `warning: CPU ${(res.cpuBusyAtStart * 100).toFixed(0)}% busy before the run: figures will be noisy`,
      );
    }
    res.tick = await measure(sp, bins, cgroup);
    res.totalMs = performance.now() - started;
    res.targets = {
      ratioCpu: RATIO_TARGET,
      cpuMs: CPU_TARGET_MS,
      met: res.tick.ratioCpu <= RATIO_TARGET && res.tick.medians.tickCpu <= CPU_TARGET_MS,
    };
    res.loadavgEnd = readFileSync('/proc/loadavg', 'latin1').trim();
    writeFileSync(join(BUILD, 'bench-guard.json'), `${JSON.stringify(res, null, 2)}\n`);
    process.stdout.write(`\n${table(res.tick)}\n\n`);
    process.stdout.write(
      `mode: ${res.tick.mode}; PID namespace: ${NAMESPACE === 'own' ? 'its own (unshare)' : "the caller's"}. ${res.tick.environsRead} environs, ${res.tick.cmdlinesRead} cmdlines read per tick; ` +
        `${REPS} reps interleaved; machine: ${res.machine.cores} cores (${res.machine.cpu}), kernel ${res.machine.kernel}, ` +
        `node ${res.machine.node}; commit ${res.commit}; run took ${(res.totalMs / 1000).toFixed(1)} s; ` +
        `CPU ${(res.cpuBusyAtStart * 100).toFixed(0)}% busy before the run; loadavg ${res.loadavgStart} at start, ` +
        `${res.loadavgEnd} at end; raw figures in build/bench-guard.json\n`,
    );
  } finally {
    if (!stopping) {
      await cleanUp();
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
  }
}

main().catch((error) => {
  process.stderr.write(`[bench] failed: ${error.stack ?? error}\n`);
  process.exitCode = 1;
});
