// Many sessions in one process, and fd exhaustion at every step of one (docs/sessions.md).
//   node stress/run.js sessions   (SEQUENTIAL=10000, then WAVES=3 waves of CONCURRENT=500 at once)
//   SEQUENTIAL=500 CONCURRENT=50 node stress/sessions.stress.js
// Each session runs a short command that leaves one detached leftover. Checks, against ground
// truth read from /proc: every leftover's pid + start time is gone, this process's fds
// (/proc/self/fd), its live helper children and its RSS end near where they began (the bounds
// below); under fd exhaustion (at spawn, mid-session, at end) nothing crashes, and each
// leftover is ended or the report says why. Exits 1 when a check fails; prints its figures.
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { isAlive, session, spawn } from '../dist/index.js';

const SEQUENTIAL = Number(process.env.SEQUENTIAL ?? 10_000);
const CONCURRENT = Number(process.env.CONCURRENT ?? 500);
/** Bounds on growth from the first to the last sample. */
const MAX_FD_GROWTH = 8;
const MAX_HELPER_GROWTH = 1;
const MAX_RSS_GROWTH_MB = 64;
const OPTIONS = { graceMs: 500, killAfterMs: 1000, outputCapMs: 500 };
const LEFTOVER = ['-c', `setsid sleep 60 >/dev/null 2>&1 & echo "$! $(cut -d' ' -f22 /proc/$!/stat)"`];

const failures = [];
const check = (ok, message) => {
  if (!ok) failures.push(message);
};

function fds() {
  return readdirSync('/proc/self/fd').length;
}

// Live (not zombie) children of this process running the helper.
function helpers() {
  let n = 0;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'latin1');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(rest[1]) === process.pid && rest[0] !== 'Z' && stat.includes('(tether-helper)')) n += 1;
    } catch {
      // gone
    }
  }
  return n;
}

function rssMb() {
  globalThis.gc?.();
  return process.memoryUsage().rss / 2 ** 20;
}

function heapMb() {
  return process.memoryUsage().heapUsed / 2 ** 20;
}

function sample() {
  return { fds: fds(), helpers: helpers(), rssMb: rssMb() };
}

function identityFrom(text) {
  const [pid, startTime] = text.trim().split(' ').map(Number);
  return pid > 1 && startTime > 0 ? { pid, startTime } : undefined;
}

// One session: a command leaving a leftover; returns the leftover's identity and the report.
async function oneSession() {
  const sub = spawn('sh', LEFTOVER, { ...OPTIONS, stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  sub.stdout?.on('data', (d) => {
    out += d;
  });
  const result = await sub;
  return { leftover: identityFrom(out), report: result.report };
}

function judge(label, runs) {
  let alive = 0;
  let notOk = 0;
  let missing = 0;
  for (const { leftover, report } of runs) {
    if (!leftover) missing += 1;
    else if (isAlive(leftover)) alive += 1;
    if (!report.ok) notOk += 1;
  }
  check(alive === 0, `${label}: ${alive} leftovers still alive after their session ended`);
  check(notOk === 0, `${label}: ${notOk} reports not ok`);
  check(missing === 0, `${label}: ${missing} commands did not print their leftover`);
  return { alive, notOk, missing };
}

function growth(label, before, after, peak) {
  console.log(
    `${label}: fds ${before.fds} → ${after.fds} (peak ${peak.fds}), helpers ${before.helpers} → ${after.helpers} (peak ${peak.helpers}), RSS ${before.rssMb.toFixed(1)} → ${after.rssMb.toFixed(1)} MB (peak ${peak.rssMb.toFixed(1)})`,
  );
  check(after.fds - before.fds <= MAX_FD_GROWTH, `${label}: fds grew ${before.fds} → ${after.fds}`);
  check(
    after.helpers - before.helpers <= MAX_HELPER_GROWTH,
    `${label}: helpers grew ${before.helpers} → ${after.helpers}`,
  );
  check(
    after.rssMb - before.rssMb <= MAX_RSS_GROWTH_MB,
    `${label}: RSS grew ${before.rssMb.toFixed(1)} → ${after.rssMb.toFixed(1)} MB`,
  );
}

const peakOf = (peak, s) => ({
  fds: Math.max(peak.fds, s.fds),
  helpers: Math.max(peak.helpers, s.helpers),
  rssMb: Math.max(peak.rssMb, s.rssMb),
});

async function waitHelpersGone(before) {
  for (let i = 0; i < 100 && helpers() > before; i++) await new Promise((r) => setTimeout(r, 20));
}

// 1. Sequential.
await oneSession(); // warm-up: koffi, the helper's path, the cgroup parent
let before = sample();
let peak = before;
let t0 = performance.now();
const bad = [];
for (let i = 0; i < SEQUENTIAL; i++) {
  const run = await oneSession();
  if (!run.leftover || isAlive(run.leftover) || !run.report.ok) bad.push(run);
  if (i % 250 === 0) peak = peakOf(peak, sample());
}
await waitHelpersGone(before.helpers);
let after = sample();
const seqMs = performance.now() - t0;
console.log(
  `sequential: ${SEQUENTIAL} sessions in ${(seqMs / 1000).toFixed(1)} s (${(seqMs / SEQUENTIAL).toFixed(2)} ms each)`,
);
judge('sequential', bad);
check(bad.length === 0, `sequential: ${bad.length} sessions left a leftover, lost it or reported not ok`);
growth('sequential', before, after, peakOf(peak, after));

// 2. Concurrent, in waves. The first wave sets the high-water mark of memory (500 sessions,
// their helpers and pipes at once: malloc keeps what it grew to); the later waves must not
// grow past it. A leak grows with every wave; a high-water mark does not.
const WAVES = Number(process.env.WAVES ?? 3);
const waves = [];
for (let wave = 0; wave < WAVES; wave++) {
  before = sample();
  peak = before;
  t0 = performance.now();
  const pending = [];
  for (let i = 0; i < CONCURRENT; i++) pending.push(oneSession());
  const sampler = setInterval(() => {
    peak = peakOf(peak, sample());
  }, 200);
  const concurrent = await Promise.all(pending);
  clearInterval(sampler);
  await waitHelpersGone(before.helpers);
  after = sample();
  const conMs = performance.now() - t0;
  console.log(
    `concurrent wave ${wave + 1}: ${CONCURRENT} sessions at once in ${(conMs / 1000).toFixed(1)} s`,
  );
  judge(`concurrent wave ${wave + 1}`, concurrent);
  const p = peakOf(peak, after);
  console.log(
    `concurrent wave ${wave + 1}: fds ${before.fds} → ${after.fds} (peak ${p.fds}), helpers ${before.helpers} → ${after.helpers} (peak ${p.helpers}), RSS ${before.rssMb.toFixed(1)} → ${after.rssMb.toFixed(1)} MB (peak ${p.rssMb.toFixed(1)}), JS heap ${heapMb().toFixed(1)} MB`,
  );
  check(
    after.fds - before.fds <= MAX_FD_GROWTH,
    `concurrent wave ${wave + 1}: fds grew ${before.fds} → ${after.fds}`,
  );
  check(
    after.helpers - before.helpers <= MAX_HELPER_GROWTH,
    `concurrent wave ${wave + 1}: helpers grew ${before.helpers} → ${after.helpers}`,
  );
  waves.push(after);
}
if (waves.length > 1) {
  const first = waves[0];
  const last = waves.at(-1);
  check(
    last.rssMb - first.rssMb <= MAX_RSS_GROWTH_MB,
    `concurrent: RSS grew from wave 1 to wave ${waves.length}: ${first.rssMb.toFixed(1)} → ${last.rssMb.toFixed(1)} MB`,
  );
}

// 3. fd exhaustion at every step: spawn, mid-session (a second command), end.
const held = [];
const fill = (leave) => {
  try {
    for (;;) held.push(openSync('/dev/null', 'r'));
  } catch {
    // the table is full
  }
  for (let i = 0; i < leave && held.length; i++) closeSync(held.pop());
};
const free = () => {
  for (const fd of held.splice(0)) closeSync(fd);
};
const exhaustion = [];
for (const step of ['spawn', 'mid-session', 'end']) {
  for (const leave of [0, 2, 4, 6, 8, 10, 12]) {
    const s = session(OPTIONS);
    const leftovers = [];
    let crash;
    try {
      const run = async () => {
        const p = s.spawn('sh', LEFTOVER, { stdio: ['ignore', 'pipe', 'ignore'] });
        let out = '';
        p.stdout?.on('data', (d) => {
          out += d;
        });
        const r = await p;
        const id = identityFrom(out);
        if (id) leftovers.push(id);
        return r;
      };
      if (step !== 'spawn') await run();
      if (step === 'spawn' || step === 'mid-session') fill(leave);
      const second = step === 'end' ? undefined : await run();
      if (step !== 'end') free();
      if (step === 'end') fill(leave);
      const report = await s.end();
      free();
      const alive = leftovers.filter((id) => isAlive(id));
      const said = report.warnings.map((w) => w.code);
      exhaustion.push({ step, leave, alive: alive.length, layers: report.layers, warnings: said });
      // A leftover may live only if the report says the sweep could not do its work.
      check(
        alive.length === 0 || !report.complete,
        `fd exhaustion at ${step} (${leave} fds free): ${alive.length} leftovers alive and the report says complete`,
      );
      check(
        report.layers.includes('subreaper') || said.includes('NO_HELPER') || second?.error !== undefined,
        `fd exhaustion at ${step} (${leave} fds free): no helper, and no NO_HELPER warning`,
      );
      for (const id of alive) {
        failures.push(
          `fd exhaustion at ${step} (${leave} fds free): leftover ${id.pid} alive (${said.join(', ')})`,
        );
        process.kill(id.pid, 'SIGKILL');
      }
    } catch (error) {
      crash = error;
      free();
      failures.push(`fd exhaustion at ${step} (${leave} fds free): threw ${error?.stack ?? error}`);
    }
    if (crash) await s.end().catch(() => undefined);
  }
}
for (const e of exhaustion) {
  console.log(
    `fd exhaustion at ${e.step.padEnd(11)} ${String(e.leave).padStart(2)} free: layers ${e.layers.join('+')}, warnings [${e.warnings.join(', ')}], leftovers alive ${e.alive}`,
  );
}

if (failures.length) {
  console.error(`FAILED:\n  ${failures.slice(0, 30).join('\n  ')}`);
  process.exitCode = 1;
} else console.log('sessions stress: every check passed');
