// Benchmarks of the sweep (docs/benchmarks.md). Run with `npm run bench` (builds dist/ first).
//
// 1. Scan cost at ~1,000 and ~10,000 processes, as a ratio to a C open/read/close loop over
//    /proc/*/environ measured in the same run (bench/environ-loop.c).
// 2. Time for 1,000 TERM-obeying, setsid'd, tagged leftovers to be gone via sweep().
// 3. Overhead of a clean end: sweep() with nothing to find.
//
// Every process is started by bench/spawner.c (the Spawner of bench/lib.js), which stays their parent and reaps them, and
// kills + reaps whatever is left when its stdin closes (end of run, error, ^C, our death).
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ticksNow } from '../dist/proc/identity.js';
import { ancestorsOf, takeSnapshot } from '../dist/proc/snapshot.js';
import { createTag } from '../dist/proc/tag.js';
import { sweep } from '../dist/sweep/loop.js';
import { scanSession } from '../dist/sweep/scan.js';
import {
  cpuBusy,
  fmt,
  gitDescribe,
  log,
  machineInfo,
  median,
  quantile,
  raisePidMax,
  Spawner,
} from './lib.js';

// Which scan path dist/ uses (src/proc/native.ts): `native` (the C scan loop) or `js`.
const nativeModule = await import('../dist/proc/native.js').catch(() => undefined);
const scanPath = () => (nativeModule?.nativeProc?.() ? 'native' : 'js');

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const BUILD = join(ROOT, 'build');
const SLEEP_SECONDS = '1000'; // far beyond any timer of ours: the VM fast-forwards idle clocks
const SCAN_REPS = Number(process.env.BENCH_SCAN_REPS ?? 21);
const SWEEP_REPS = Number(process.env.BENCH_SWEEP_REPS ?? 9);
const CLEAN_REPS = Number(process.env.BENCH_CLEAN_REPS ?? 21);
const LEVELS = (process.env.BENCH_LEVELS ?? '1000,10000').split(',').map(Number);
const LEFTOVERS = Number(process.env.BENCH_LEFTOVERS ?? 1000);
/** Targets of the two ratios: a full scan vs the C stat+environ loop; leftovers vs the floor. */
const SCAN_TARGET = 1.15;
const FLOOR_TARGET = 1.3;

// ---------------------------------------------------------------------------------------------
// Helpers

function compile(name) {
  const out = join(BUILD, name);
  execFileSync('cc', ['-O2', '-o', out, join(ROOT, 'bench', `${name}.c`)], {
    stdio: 'inherit',
    timeout: 60_000,
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Measurements

/** One pass of the C loop (the second of two, so that the first warms the dentry caches). */
function cLoop(bin, entry, mode) {
  const out = execFileSync(bin, ['2', entry, mode], { encoding: 'latin1', timeout: 60_000 });
  const last = out.trim().split('\n').at(-1).split(' ').map(Number);
  return { ms: last[0], files: last[1], bytes: last[2], matches: last[3] };
}

function scanContext(tag, notBefore) {
  return {
    procRoot: '/proc',
    entry: tag.entry,
    notBefore,
    excluded: new Set(ancestorsOf('/proc', process.pid)),
    known: new Map(),
    uid: process.getuid(),
    roots: [],
  };
}

function timeScan(tag, notBefore) {
  const ctx = scanContext(tag, notBefore); // a fresh context: no earlier finds to lean on
  const t0 = performance.now();
  const result = scanSession(ctx);
  const ms = performance.now() - t0;
  return { ms, members: result.members.length, processes: result.snapshot.processes.size };
}

function timeSnapshot() {
  const t0 = performance.now();
  const snap = takeSnapshot();
  return { ms: performance.now() - t0, processes: snap.processes.size };
}

/** Scan rows at one level: `n` sleeps, the untagged half started before the session began. */
async function scanLevel(sp, bins, tag, n) {
  log(`level ${n}: starting ${n / 2} untagged sleeps`);
  const t0 = performance.now();
  const older = await sp.start(n / 2, { tagged: false, setsid: false });
  await delay(30); // the next clock tick (10 ms): the older half starts strictly before notBefore
  const notBefore = ticksNow();
  await delay(30);
  log(`level ${n}: starting ${n / 2} tagged sleeps`);
  const newer = await sp.start(n / 2, { tagged: true, setsid: false });
  const startMs = performance.now() - t0;
  log(`level ${n}: ${n} sleeps started in ${fmt(startMs)} ms`);
  // A sleep forked a moment ago may still be in its exec (no readable environ): look again, up
  // to 2 s, before the rows below call the C loop's count short.
  for (let i = 0; i < 40 && cLoop(bins.environLoop, tag.entry, 'environ').matches !== n / 2; i++)
    await delay(50);

  // Warm-up: JIT, dentry and inode caches.
  for (let i = 0; i < 2; i++) {
    timeScan(tag, undefined);
    timeScan(tag, notBefore);
    timeSnapshot();
  }
  const rows = { c: [], cStat: [], full: [], filtered: [], snapshot: [] };
  let info;
  for (let r = 0; r < SCAN_REPS; r++) {
    // Interleaved so that drift hits every column alike.
    const c = cLoop(bins.environLoop, tag.entry, 'environ');
    const cs = cLoop(bins.environLoop, tag.entry, 'stat');
    const full = timeScan(tag, undefined);
    const filtered = timeScan(tag, notBefore);
    const snap = timeSnapshot();
    rows.c.push(c.ms);
    rows.cStat.push(cs.ms);
    rows.full.push(full.ms);
    rows.filtered.push(filtered.ms);
    rows.snapshot.push(snap.ms);
    info = { c, full, filtered, snap };
    if (full.members !== n / 2 || filtered.members !== n / 2) {
      throw new Error(`scan found ${full.members}/${filtered.members} members, expected ${n / 2}`);
    }
    if (c.matches !== n / 2) throw new Error(`C loop matched ${c.matches}, expected ${n / 2}`);
  }
  const m = Object.fromEntries(Object.entries(rows).map(([k, v]) => [k, median(v)]));
  const result = {
    n,
    processes: info.full.processes,
    environFiles: info.c.files,
    environBytesAvg: info.c.bytes / info.c.files,
    startMs,
    medians: m,
    samples: rows,
    ratioFull: m.full / m.c,
    ratioFiltered: m.filtered / m.c,
    ratioFullVsCStat: m.full / m.cStat,
    scanPath: scanPath(),
  };
  log(
    `level ${n}: C environ ${fmt(m.c)} ms, C stat+environ ${fmt(m.cStat)} ms, ` +
      `scan ${fmt(m.full)} ms (${result.ratioFull.toFixed(2)}x, ${result.ratioFullVsCStat.toFixed(2)}x stat+environ, ${result.scanPath}), ` +
      `scan notBefore ${fmt(m.filtered)} ms, snapshot ${fmt(m.snapshot)} ms`,
  );
  result.cleanEnd = await cleanEnd(n);
  await sp.kill(older.batch);
  await sp.kill(newer.batch);
  return result;
}

/** Clean end: a sweep that finds nothing (fresh tag, the session began just now). */
async function cleanEnd(level) {
  const times = [];
  let last;
  for (let r = 0; r < CLEAN_REPS; r++) {
    const tag = createTag();
    const notBefore = ticksNow();
    // A fresh turn of the event loop: sweeps in one turn share a walk (src/sweep/shared-walk.ts), and
    // this sweep must not start on the previous one's last snapshot.
    await new Promise((r) => setImmediate(r));
    const t0 = performance.now();
    last = await sweep({ tag, notBefore });
    times.push(performance.now() - t0);
    if (!last.ok || last.stopped.length !== 0) throw new Error('clean end found something');
  }
  const perScan = last.timings.scanMs / last.timings.scans;
  const res = {
    level,
    p50: median(times),
    p90: quantile(times, 0.9),
    scans: last.timings.scans,
    scanMsEach: perScan,
    proof: last.proof,
    samples: times,
  };
  log(
    `clean end at ${level}: p50 ${fmt(res.p50)} ms, p90 ${fmt(res.p90)} ms, ` +
      `${res.scans} scans of ~${fmt(perScan)} ms`,
  );
  return res;
}

/**
 * Starts `LEFTOVERS` setsid'd sleeps carrying `tag` and checks that each carries it (C loop over
 * /proc). A sleep the spawner forked a moment ago may still be in its setsid + exec (no readable
 * environ then): look again, up to 2 s, before calling the batch short.
 */
async function startCarriers(sp, bins, tag) {
  const notBefore = ticksNow();
  const { batch, pids } = await sp.start(LEFTOVERS, { tagged: true, setsid: true });
  let c = cLoop(bins.environLoop, tag.entry, 'environ');
  for (let i = 0; i < 40 && c.matches !== LEFTOVERS; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    c = cLoop(bins.environLoop, tag.entry, 'environ');
  }
  if (c.matches !== LEFTOVERS) {
    throw new Error(`expected ${LEFTOVERS} carriers of the tag, C loop saw ${c.matches}`);
  }
  return { batch, pids, notBefore };
}

/**
 * The physical floor of the same work (bench/floor.c): one C scan (stat + environ per pid) and
 * a pidfd SIGTERM to each carrier, no report. Timed from the floor program's own start
 * (CLOCK_MONOTONIC, which it prints) to the spawner's last reap of the batch.
 */
async function floorRep(sp, bins, tag, r) {
  const { batch } = await startCarriers(sp, bins, tag);
  const out = execFileSync(bins.floor, [tag.entry], { encoding: 'latin1', timeout: 60_000 });
  const [startNs, carriers, signalled] = out.trim().split(' ');
  const goneNs = await sp.gone(batch, 10_000).catch(() => undefined);
  const rep = {
    goneMs: goneNs === undefined ? null : Number(goneNs - BigInt(startNs)) / 1e6,
    carriers: Number(carriers),
    signalled: Number(signalled),
  };
  log(
    `floor ${r + 1}/${SWEEP_REPS}: all gone ${rep.goneMs === null ? 'NO' : `${fmt(rep.goneMs)} ms`}, ` +
      `${rep.signalled}/${rep.carriers} carriers signalled`,
  );
  await sp.kill(batch);
  if (rep.carriers !== LEFTOVERS)
    throw new Error(`the floor found ${rep.carriers} carriers, expected ${LEFTOVERS}`);
  return rep;
}

/**
 * The sweep of `LEFTOVERS` setsid'd sleeps carrying `tag` (the spawner's tag), `SWEEP_REPS`
 * times, each after a floor run of the same size; each batch is gone before the next starts,
 * so the tag can be reused.
 */
async function sweepLeftovers(sp, bins, tag) {
  const reps = [];
  const floors = [];
  for (let r = 0; r < SWEEP_REPS; r++) {
    // The floor first, on its own batch (interleaved with the sweeps: drift hits both alike).
    floors.push(await floorRep(sp, bins, tag, r));
    const { batch, pids, notBefore } = await startCarriers(sp, bins, tag);
    const startNs = process.hrtime.bigint();
    const t0 = performance.now();
    let firstEmptyMs;
    let firstRoundMs;
    const report = await sweep({
      tag,
      notBefore,
      onProgress: (p) => {
        if (firstRoundMs === undefined) firstRoundMs = performance.now() - t0;
        if (p.waiting === 0 && firstEmptyMs === undefined) firstEmptyMs = performance.now() - t0;
      },
    });
    const wallMs = performance.now() - t0;
    const goneNs = await sp.gone(batch, 10_000).catch(() => undefined);
    const stillThere = pids.filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
        return !/\) [ZX] /.test(stat);
      } catch {
        return false;
      }
    });
    const rep = {
      goneMs: goneNs === undefined ? null : Number(goneNs - startNs) / 1e6,
      durationMs: report.timings.durationMs,
      wallMs,
      firstRoundMs, // begin() + round 1: scan, read each found one's details, TERM each
      firstEmptyRoundMs: firstEmptyMs,
      scans: report.timings.scans,
      scanMs: report.timings.scanMs,
      stopped: report.stopped.length,
      endedByTerm: report.stopped.filter((p) => p.endedBy === 'SIGTERM').length,
      survivors: report.survivors.length,
      proof: report.proof,
      phases: report.phases.map((p) => `${p.signal}:${p.rounds}:${p.endedBy}`).join(','),
      signalling: report.signalling,
      stillAlive: stillThere.length,
      allGone: goneNs !== undefined && stillThere.length === 0,
    };
    reps.push(rep);
    log(
      `sweep ${r + 1}/${SWEEP_REPS}: all gone ${rep.goneMs === null ? 'NO' : `${fmt(rep.goneMs)} ms`}, ` +
        `durationMs ${fmt(rep.durationMs)}, first round ${fmt(rep.firstRoundMs)} ms, stopped ${rep.stopped} (${rep.endedByTerm} by TERM), ` +
        `survivors ${rep.survivors}, ${rep.scans} scans (${fmt(rep.scanMs)} ms), ${rep.signalling}`,
    );
    await sp.kill(batch); // nothing left normally; otherwise KILL + reap before the next rep
  }
  const goneP50 = median(reps.map((r) => r.goneMs ?? Number.POSITIVE_INFINITY));
  const floorP50 = median(floors.map((r) => r.goneMs ?? Number.POSITIVE_INFINITY));
  return {
    n: LEFTOVERS,
    goneP50,
    floorP50,
    ratioFloor: goneP50 / floorP50,
    floors,
    durationP50: median(reps.map((r) => r.durationMs)),
    firstRoundP50: median(reps.map((r) => r.firstRoundMs)),
    allGone: reps.every((r) => r.allGone),
    reps,
  };
}

// ---------------------------------------------------------------------------------------------

function table(res) {
  const lines = [];
  lines.push('| row | measured (median) | reference | ratio / target |');
  lines.push('|---|---|---|---|');
  for (const l of res.levels) {
    const m = l.medians;
    const label = `${l.n.toLocaleString('en')} sleeps (${l.processes} processes)`;
    lines.push(
      `| 1. full scan, ${label} | ${fmt(m.full)} ms | C environ loop ${fmt(m.c)} ms | ` +
        `**${l.ratioFull.toFixed(2)}×** (target ≤ 1.3×) |`,
    );
    lines.push(
      `| 1a. same scan vs C stat+environ loop (like for like) | ${fmt(m.full)} ms | C stat+environ ${fmt(m.cStat)} ms | ` +
        `**${l.ratioFullVsCStat.toFixed(2)}×** (target ≤ ${SCAN_TARGET}×; scan path ${l.scanPath}) |`,
    );
    lines.push(
      `| 1b. scan with notBefore, ${label} | ${fmt(m.filtered)} ms | C environ loop ${fmt(m.c)} ms | ` +
        `${l.ratioFiltered.toFixed(2)}× |`,
    );
    lines.push(`| 1c. takeSnapshot alone, ${label} | ${fmt(m.snapshot)} ms | — | — |`);
  }
  const s = res.sweep;
  lines.push(
    `| 2. ${s.n.toLocaleString('en')} TERM-obeying leftovers gone (last reaped) | ${fmt(s.goneP50)} ms | ` +
      `sweep durationMs ${fmt(s.durationP50)} ms (first round ${fmt(s.firstRoundP50)} ms) | target ≤ 250 ms; all gone: ${s.allGone ? 'yes' : 'NO'} |`,
  );
  lines.push(
    `| 2a. same leftovers vs the floor (C scan + pidfd SIGTERM each, no report) | ${fmt(s.goneP50)} ms | ` +
      `floor ${fmt(s.floorP50)} ms | **${s.ratioFloor.toFixed(2)}×** (target ≤ ${FLOOR_TARGET}×) |`,
  );
  for (const c of res.cleanEnds) {
    const expect = 50 + 2 * c.scanMsEach;
    lines.push(
      `| 3. clean end, ${c.level.toLocaleString('en')} extra sleeps | p50 ${fmt(c.p50)} ms (p90 ${fmt(c.p90)}) | ` +
        `decisions.md D3: two scans 50 ms apart ≈ ${fmt(expect)} ms | ${c.scans} scans, proof ${c.proof} |`,
    );
  }
  return lines.join('\n');
}

async function main() {
  mkdirSync(BUILD, { recursive: true });
  raisePidMax();
  const bins = { environLoop: compile('environ-loop'), spawner: compile('spawner'), floor: compile('floor') };
  log(`compiled ${bins.environLoop}, ${bins.spawner} and ${bins.floor}`);
  const runTag = createTag();
  const sp = new Spawner(bins.spawner, runTag.entry, SLEEP_SECONDS);
  let stopping = false;
  const onSignal = (sig) => {
    if (stopping) return;
    stopping = true;
    log(`${sig}: stopping, killing every benchmark process`);
    sp.close().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const started = performance.now();
  try {
    const res = {
      machine: machineInfo(),
      date: new Date().toISOString(),
      commit: gitDescribe(),
      // Other work on the machine skews every row: recorded so that a noisy run shows as one.
      loadavgStart: readFileSync('/proc/loadavg', 'latin1').trim(),
      processesAtStart: takeSnapshot().processes.size,
      cleanEnds: [],
      levels: [],
    };
    // A warm-up sweep loads koffi (pidfd) once.
    await sweep({ tag: createTag(), notBefore: ticksNow() });
    res.cpuBusyAtStart = await cpuBusy(1000);
    if (res.cpuBusyAtStart > 0.2) {
      log(
        `warning: CPU ${(res.cpuBusyAtStart * 100).toFixed(0)}% busy before the run: figures will be noisy`,
      );
    }
    res.cleanEnds.push(await cleanEnd(0));
    for (const n of LEVELS) {
      const level = await scanLevel(sp, bins, runTag, n);
      res.levels.push(level);
      res.cleanEnds.push(level.cleanEnd);
    }
    res.sweep = await sweepLeftovers(sp, bins, runTag);
    res.totalMs = performance.now() - started;
    res.targets = {
      scanVsCStat: SCAN_TARGET,
      leftoversVsFloor: FLOOR_TARGET,
      met: {
        scan: res.levels.every((l) => l.ratioFullVsCStat <= SCAN_TARGET),
        leftovers: res.sweep.ratioFloor <= FLOOR_TARGET,
      },
    };
    res.loadavgEnd = readFileSync('/proc/loadavg', 'latin1').trim();
    writeFileSync(join(BUILD, 'bench-results.json'), `${JSON.stringify(res, null, 2)}\n`);
    process.stdout.write(`\n${table(res)}\n\n`);
    process.stdout.write(
      `machine: ${res.machine.cores} cores (${res.machine.cpu}), kernel ${res.machine.kernel}, ` +
        `node ${res.machine.node}; commit ${res.commit}; environ ~${Math.round(res.levels[0]?.environBytesAvg ?? 0)} B per process; ` +
        `run took ${(res.totalMs / 1000).toFixed(1)} s; ${res.processesAtStart} processes before the run; ` +
        `CPU ${(res.cpuBusyAtStart * 100).toFixed(0)}% busy before the run; loadavg ${res.loadavgStart} at start, ${res.loadavgEnd} at end; raw figures in build/bench-results.json\n`,
    );
  } finally {
    await sp.close();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

main().catch((error) => {
  process.stderr.write(`[bench] failed: ${error.stack ?? error}\n`);
  process.exitCode = 1;
});
