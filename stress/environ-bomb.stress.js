// The environ bomb: a bystander (uid 65534 when run as root) points its environ and cmdline at
// 4 GiB of untouched memory (prctl PR_SET_MM_MAP) while a session with a tagged leftover ends.
// Checks that the supervisor's memory stays flat (RSS and peak RSS grow by at most LIMIT_MIB),
// that the sweep completes and stops the leftover, and that the bystander is left running and
// named `unreadable` (`oversized`). Prints the figures. Exits 1 when a check fails.
import { execFileSync, spawn as spawnChild } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { session } from '../dist/index.js';
import { sharedBuffer } from '../dist/proc/read.js';

const BOMB_MIB = 4096;
const LIMIT_MIB = 8;
const MIB = 1024 * 1024;
const here = dirname(fileURLToPath(import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'tether-environ-bomb-'));
const bomb = join(dir, 'environ-bomb');
execFileSync('gcc', ['-O1', '-Wall', '-o', bomb, join(here, '../test/fixtures/c/environ-bomb.c')], {
  stdio: 'inherit',
});

/** Fields of /proc/<pid>/stat after the comm (0 = state, 19 = start time, 47/48 = env_start/end). */
function stat(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}
const alive = (id) => {
  const f = stat(id.pid);
  return f !== undefined && f[0] !== 'Z' && Number(f[19]) === id.startTime;
};
/** Everything this script started, killed at the end whatever happened (pid and start time checked). */
const started = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssMiB = () => process.memoryUsage().rss / MIB;
const maxRssMiB = () => process.resourceUsage().maxRSS / 1024;
const settle = async () => {
  globalThis.gc?.();
  await sleep(50);
  globalThis.gc?.();
};

/** A session whose command leaves a tagged `sleep 300`; the bystander starts after the session. */
async function run(withBomb) {
  const s = session({ graceMs: 2000, killAfterMs: 1000 });
  let bystander;
  if (withBomb) {
    const uid = process.getuid?.() === 0 ? '65534' : '-';
    const child = spawnChild(bomb, [String(BOMB_MIB), join(dir, 'pids'), uid, 'fg'], { stdio: 'ignore' });
    const f = stat(child.pid);
    bystander = { pid: child.pid, startTime: Number(f?.[19]), child };
    started.push(bystander);
    for (let i = 0; i < 250; i++) {
      const g = stat(child.pid);
      if (g && Number(g[48]) - Number(g[47]) === BOMB_MIB * MIB) break;
      await sleep(20);
    }
    const g = stat(child.pid);
    if (!g || Number(g[48]) - Number(g[47]) !== BOMB_MIB * MIB) {
      throw new Error(
        `premise broken: the bystander ${child.pid} did not move its environ to ${BOMB_MIB} MiB`,
      );
    }
  }
  const p = s.spawn('sh', ['-c', 'sleep 300 </dev/null >/dev/null 2>&1 & echo $!']);
  let out = '';
  p.stdout?.on('data', (d) => {
    out += d;
  });
  await p;
  const pid = Number(out.trim());
  const leftover = { pid, startTime: Number(stat(pid)?.[19]) };
  started.push(leftover);
  const t0 = performance.now();
  const report = await s.end();
  const durationMs = performance.now() - t0;
  return { report, durationMs, leftover, bystander };
}

let failed = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failed += 1;
};

try {
  await run(false); // warm-up: modules, JIT, the helper's first start
  await settle();
  const rssBefore = rssMiB();
  const maxBefore = maxRssMiB();
  const { report, durationMs, leftover, bystander } = await run(true);
  await settle();
  const rssAfter = rssMiB();
  const maxAfter = maxRssMiB();
  const named = report.unreadable.find((u) => u.pid === bystander.pid);

  console.log(
    `bystander: ${BOMB_MIB} MiB environ and cmdline, uid ${process.getuid?.() === 0 ? 65534 : 'ours'}`,
  );
  console.log(`sweep: ${durationMs.toFixed(1)} ms, ${report.timings.scans} scans, proof ${report.proof}`);
  console.log(
    `rss: ${rssBefore.toFixed(1)} -> ${rssAfter.toFixed(1)} MiB (${(rssAfter - rssBefore).toFixed(1)})`,
  );
  console.log(
    `peak rss: ${maxBefore.toFixed(1)} -> ${maxAfter.toFixed(1)} MiB (${(maxAfter - maxBefore).toFixed(1)})`,
  );
  console.log(`shared buffer: ${sharedBuffer().length} bytes`);
  check(report.complete && !report.warnings.some((w) => w.code === 'SCAN_FAILED'), 'the sweep completed');
  check(!alive(leftover), `the tagged leftover sleep ${leftover.pid} ended`);
  check(alive(bystander), `the bystander ${bystander.pid} was left running`);
  check(
    named?.reason === 'oversized',
    `the bystander is named unreadable, oversized (reason ${named?.reason}, uid ${named?.uid}, cmdline of ${named?.cmdline.length} characters)`,
  );
  check(rssAfter - rssBefore <= LIMIT_MIB, `RSS grew by at most ${LIMIT_MIB} MiB`);
  check(maxAfter - maxBefore <= LIMIT_MIB, `peak RSS grew by at most ${LIMIT_MIB} MiB`);
} finally {
  for (const id of started) if (alive(id)) process.kill(id.pid, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
process.exitCode = failed ? 1 : 0;
