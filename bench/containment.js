// Benchmarks of the containment layers (docs/benchmarks.md, second table). Run with
// `npm run bench:containment` (builds dist/ and the helper first), or as part of `npm run bench`.
//
// 1. Clean end: `end()` of a session whose command (`true`) exited and left nothing, with the
//    default containment (helper + cgroup: one scan and the kernel's proof) next to the env tag
//    alone (two scans 50 ms apart), interleaved.
// 2. Spawn overhead: spawn-to-exit of `true` through the helper vs a bare
//    `child_process.spawn`, interleaved; and the synchronous part of `spawn()`.
// 3. The helper's resident memory (VmRSS, VmHWM of /proc/<pid>/status) while its command runs.
// 4. 50 sessions ending at once, 20 setsid'd leftovers each: time until every leftover is gone
//    (ground truth: pid + start time no longer alive), and process-table walks per round.
// Every process here is started through tether sessions; each session is ended before the next
// measurement, and the run checks ground truth after each.
import { spawn as spawnChild } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isAlive } from '../dist/proc/identity.js';
import { snapshotCount, takeSnapshot } from '../dist/proc/snapshot.js';
import { session } from '../dist/session/session.js';
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
  withTimeout,
} from './lib.js';

const REPS = Number(process.env.BENCH_CONTAINMENT_REPS ?? 31);
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 50);
const PER_SESSION = Number(process.env.BENCH_LEFTOVERS_EACH ?? 20);
const AUTO = 'auto';
const ENV_ONLY = ['env-tag'];

const stats = (xs) => ({ p50: median(xs), p90: quantile(xs, 0.9), n: xs.length });

/** Runs `true` in a fresh session and times its `end()`; checks the end found nothing. */
async function cleanEndOnce(containment) {
  const s = session({ containment });
  const p = s.spawn('true', [], { stdio: 'ignore' });
  const exit = await withTimeout(p.exited, 10_000, 'true to exit');
  if (exit.exitCode !== 0) throw new Error(`true exited ${exit.exitCode}`);
  await new Promise((r) => setImmediate(r)); // a fresh turn: no walk shared with a previous end
  const t0 = performance.now();
  const report = await s.end();
  const ms = performance.now() - t0;
  if (!report.ok || report.stopped.length)
    throw new Error(`clean end found something: ${JSON.stringify(report)}`);
  return { ms, proof: report.proof, layers: report.layers, scans: report.timings.scans };
}

async function cleanEnd() {
  const out = { auto: [], envOnly: [], proofs: new Set(), layers: null, scansAuto: 0, scansEnv: 0 };
  for (let r = 0; r < REPS; r++) {
    const a = await cleanEndOnce(AUTO);
    const e = await cleanEndOnce(ENV_ONLY);
    out.auto.push(a.ms);
    out.envOnly.push(e.ms);
    out.proofs.add(a.proof);
    out.layers = a.layers;
    out.scansAuto = a.scans;
    out.scansEnv = e.scans;
  }
  const res = {
    auto: stats(out.auto),
    envOnly: stats(out.envOnly),
    proofs: [...out.proofs],
    layers: out.layers,
    scansAuto: out.scansAuto,
    scansEnv: out.scansEnv,
  };
  log(`clean end: auto p50 ${fmt(res.auto.p50)} ms (${res.proofs}), env tag p50 ${fmt(res.envOnly.p50)} ms`);
  return res;
}

/** Spawn-to-exit of `true`: bare child_process.spawn vs a session's spawn through the helper. */
async function spawnOverhead() {
  const bare = [];
  const helped = [];
  const helperOnly = [];
  const envOnly = [];
  const syncPart = [];
  const bareOnce = () =>
    new Promise((resolve, reject) => {
      const t0 = performance.now();
      const child = spawnChild('true', [], { stdio: 'ignore' });
      child.once('error', reject);
      child.once('exit', () => resolve(performance.now() - t0));
    });
  const sessionOnce = async (containment, sync) => {
    const s = session({ containment });
    const t0 = performance.now();
    const p = s.spawn('true', [], { stdio: 'ignore' });
    const t1 = performance.now();
    await withTimeout(p.exited, 10_000, 'true to exit');
    const ms = performance.now() - t0;
    sync?.push(t1 - t0);
    await s.end();
    return ms;
  };
  // Warm-up: JIT, koffi, page cache of the helper binary.
  for (let i = 0; i < 3; i++) {
    await bareOnce();
    await sessionOnce(AUTO);
  }
  for (let r = 0; r < REPS; r++) {
    bare.push(await bareOnce());
    helperOnly.push(await sessionOnce(['subreaper'], syncPart));
    helped.push(await sessionOnce(AUTO));
    envOnly.push(await sessionOnce(ENV_ONLY));
  }
  const res = {
    bare: stats(bare),
    helperOnly: stats(helperOnly),
    helped: stats(helped),
    envOnly: stats(envOnly),
    syncPart: stats(syncPart),
  };
  log(
    `spawn to exit: bare p50 ${fmt(res.bare.p50)} ms, helper ${fmt(res.helperOnly.p50)} ms, helper + new cgroup ${fmt(res.helped.p50)} ms, env tag only ${fmt(res.envOnly.p50)} ms`,
  );
  return res;
}

function statusKb(pid, field) {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
  return m ? Number(m[1]) : Number.NaN;
}

/** VmRSS / VmHWM of the helper (and of a PID namespace's init) while `sleep` runs under it. */
async function helperMemory() {
  const res = {};
  for (const [name, containment] of [
    ['helper', AUTO],
    ['helper + pid namespace', ['env-tag', 'subreaper', 'pid-namespace']],
  ]) {
    const s = session({ containment });
    const p = s.spawn('sleep', ['1000'], { stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 200));
    const helperPid = p.child.pid;
    const row = { rssKb: statusKb(helperPid, 'VmRSS'), hwmKb: statusKb(helperPid, 'VmHWM') };
    const initPid = takeSnapshot()
      .children.get(helperPid)
      ?.find((c) => c !== p.pid);
    if (initPid) row.initRssKb = statusKb(initPid, 'VmRSS');
    res[name] = row;
    p.child.kill('SIGTERM');
    await s.end();
    log(
      `${name}: VmRSS ${row.rssKb} kB, VmHWM ${row.hwmKb} kB${initPid ? `, init VmRSS ${row.initRssKb} kB` : ''}`,
    );
  }
  return res;
}

/** VmRSS of a Node process that only waits: the floor of an FFI-based (Node) helper. */
async function nodeFloor() {
  const child = spawnChild(process.execPath, ['-e', 'setTimeout(() => {}, 5000)'], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 500));
  const rssKb = statusKb(child.pid, 'VmRSS');
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));
  log(`a waiting Node process: VmRSS ${rssKb} kB`);
  return { rssKb };
}

const LEAVE = `i=0; while [ $i -lt "$1" ]; do setsid sleep 1000 </dev/null >/dev/null 2>&1 & i=$((i + 1)); done`;

/** 50 sessions, each leaving 20 leftovers, all ended at once. */
async function manySessions(containment) {
  const sessions = [];
  for (let i = 0; i < SESSIONS; i++) {
    const s = session({ containment });
    const p = s.spawn('sh', ['-c', LEAVE, 'sh', String(PER_SESSION)], { stdio: 'ignore' });
    sessions.push({ s, p });
  }
  await withTimeout(Promise.all(sessions.map(({ p }) => p.exited)), 30_000, 'the 50 payloads to exit');
  // Ground truth, recorded before the end: every sleep that carries a session's tag.
  const leftovers = [];
  const deadline = performance.now() + 10_000;
  for (;;) {
    leftovers.length = 0;
    const snap = takeSnapshot();
    for (const stat of snap.processes.values()) {
      if (stat.comm !== 'sleep' || stat.state === 'Z') continue;
      let environ = '';
      try {
        environ = readFileSync(`/proc/${stat.pid}/environ`, 'latin1');
      } catch {
        continue;
      }
      if (sessions.some(({ s }) => environ.includes(`${s.tagVariable.entry}\0`))) {
        leftovers.push({ pid: stat.pid, startTime: stat.startTime });
      }
    }
    if (leftovers.length >= SESSIONS * PER_SESSION || performance.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  if (leftovers.length !== SESSIONS * PER_SESSION) {
    throw new Error(`expected ${SESSIONS * PER_SESSION} leftovers, found ${leftovers.length}`);
  }
  const walks0 = snapshotCount();
  const t0 = performance.now();
  const reports = await Promise.all(sessions.map(({ s }) => s.end()));
  const endedMs = performance.now() - t0;
  const walks = snapshotCount() - walks0;
  const alive = leftovers.filter((id) => isAlive(id));
  const rounds = reports.reduce((a, r) => a + r.timings.scans, 0);
  const lastGoneMs = Math.max(
    ...reports.map((r) => {
      const term = r.phases[0];
      return term ? term.startedMs + term.durationMs : 0;
    }),
  );
  const stopped = reports.reduce((a, r) => a + r.stopped.length, 0);
  const res = {
    containment,
    leftovers: leftovers.length,
    stopped,
    alive: alive.length,
    endedMs,
    lastGoneMs,
    rounds,
    walks,
    proofs: [...new Set(reports.map((r) => r.proof))],
    allOk: reports.every((r) => r.ok),
  };
  log(
    `${SESSIONS} sessions x ${PER_SESSION} (${JSON.stringify(containment)}): all ended in ${fmt(endedMs)} ms, ` +
      `${alive.length} alive after, ${rounds} rounds on ${walks} process-table walks, proofs ${res.proofs}`,
  );
  if (alive.length) throw new Error(`${alive.length} leftovers survived the sweeps`);
  return res;
}

function table(res) {
  const c = res.cleanEnd;
  const sp = res.spawn;
  const mem = res.memory;
  const m = res.many;
  const lines = [
    '| # | what | measured | reference, same run | target |',
    '|---|---|---|---|---|',
    `| C1 | clean end, default containment (${c.layers.join(' + ')}) | p50 **${fmt(c.auto.p50)} ms** (p90 ${fmt(c.auto.p90)}), ${c.scansAuto} scan, proof ${c.proofs.join('/')} | env tag alone: p50 ${fmt(c.envOnly.p50)} ms (p90 ${fmt(c.envOnly.p90)}), ${c.scansEnv} scans | ≤ 5 ms p50: ${c.auto.p50 <= 5 ? 'met' : 'missed'} |`,
    `| C2 | spawn → exit of \`true\` through the helper (\`['subreaper']\`) | p50 **${fmt(sp.helperOnly.p50)} ms** (p90 ${fmt(sp.helperOnly.p90)}) | bare \`child_process.spawn\`: p50 ${fmt(sp.bare.p50)} ms (p90 ${fmt(sp.bare.p90)}); a session with the env tag alone: ${fmt(sp.envOnly.p50)} ms | overhead **${fmt(sp.helperOnly.p50 - sp.bare.p50)} ms** (≤ 3 ms p50: ${sp.helperOnly.p50 - sp.bare.p50 <= 3 ? 'met' : 'missed'}) |`,
    `| C2a | the same with the default containment: the helper, and the session's cgroup created (mkdir) and joined before exec | p50 ${fmt(sp.helped.p50)} ms (p90 ${fmt(sp.helped.p90)}) | bare: ${fmt(sp.bare.p50)} ms | +${fmt(sp.helped.p50 - sp.bare.p50)} ms |`,
    `| C2b | synchronous part of \`spawn()\` with the helper (until the payload's pid is known) | p50 ${fmt(sp.syncPart.p50)} ms (p90 ${fmt(sp.syncPart.p90)}) | — | — |`,
    ...Object.entries(mem).map(
      ([name, r]) =>
        `| C3 | resident memory, ${name} | VmRSS **${r.rssKb} kB** (VmHWM ${r.hwmKb} kB)${r.initRssKb ? `; its init ${r.initRssKb} kB` : ''} | — | ≤ 2 MiB: ${Math.max(r.hwmKb, r.initRssKb ?? 0) <= 2048 ? 'met' : 'missed'} |`,
    ),
    `| C3a | resident memory of a Node process that only waits (the floor of an FFI-based helper) | VmRSS ${res.nodeFloor.rssKb} kB | — | why the helper is native |`,
    ...m.map(
      (x) =>
        `| C4 | ${SESSIONS} sessions × ${PER_SESSION} leftovers ended at once, ${JSON.stringify(x.containment)} | all ${x.leftovers} gone; ends resolved in **${fmt(x.endedMs)} ms** (TERM phase of the slowest: ${fmt(x.lastGoneMs)} ms) | ${x.rounds} rounds on **${x.walks}** process-table walks; proofs ${x.proofs.join('/')} | ≤ 1 s: ${x.endedMs <= 1000 ? 'met' : 'missed'} |`,
    ),
  ];
  return lines.join('\n');
}

async function main() {
  raisePidMax();
  const res = {
    machine: machineInfo(),
    date: new Date().toISOString(),
    commit: gitDescribe(),
    loadavgStart: readFileSync('/proc/loadavg', 'latin1').trim(),
  };
  const probe = session({ containment: AUTO });
  const p = probe.spawn('true', [], { stdio: 'ignore' });
  await p.exited;
  const first = await probe.end();
  if (!first.layers.includes('subreaper')) {
    throw new Error(`the helper is not in use (${JSON.stringify(first.warnings)}): run npm run build`);
  }
  res.cpuBusyAtStart = await cpuBusy(1000);
  res.cleanEnd = await cleanEnd();
  res.spawn = await spawnOverhead();
  res.memory = await helperMemory();
  res.nodeFloor = await nodeFloor();
  res.many = [await manySessions(AUTO), await manySessions(ENV_ONLY)];
  res.loadavgEnd = readFileSync('/proc/loadavg', 'latin1').trim();
  mkdirSync(join(ROOT, 'build'), { recursive: true });
  writeFileSync(join(ROOT, 'build/bench-containment.json'), `${JSON.stringify(res, null, 2)}\n`);
  process.stdout.write(`\n${table(res)}\n\n`);
  process.stdout.write(
    `machine: ${res.machine.cores} cores (${res.machine.cpu}), kernel ${res.machine.kernel}, node ${res.machine.node}; ` +
      `commit ${res.commit}; CPU ${(res.cpuBusyAtStart * 100).toFixed(0)}% busy before the run; loadavg ${res.loadavgStart} at start, ${res.loadavgEnd} at end; raw figures in build/bench-containment.json\n`,
  );
}

main().catch((error) => {
  process.stderr.write(`[bench] failed: ${error.stack ?? error}\n`);
  process.exitCode = 1;
});
