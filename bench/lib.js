// Small helpers shared by the benchmarks (bench/run.js, bench/containment.js).
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

export const median = (xs) => quantile(xs, 0.5);
export function quantile(xs, q) {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const i = (s.length - 1) * q;
  const lo = Math.floor(i);
  const hi = Math.ceil(i);
  return s[lo] + (s[hi] - s[lo]) * (i - lo);
}
export const fmt = (ms) => (ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2));
export const log = (msg) => process.stderr.write(`[bench] ${msg}\n`);

/** Rejects after `ms` unless `promise` settles first; the timer is always cleared. */
export async function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Raises pid_max (root only) so that pids are not recycled within a run. */
export function raisePidMax() {
  const path = '/proc/sys/kernel/pid_max';
  try {
    const current = Number(readFileSync(path, 'latin1'));
    if (current < 4194304) {
      writeFileSync(path, '4194304');
      log(`pid_max ${current} -> 4194304`);
    }
  } catch (error) {
    log(`pid_max left as is (${error.code ?? error.message})`);
  }
}

/** Share of CPU time not idle over `ms`, from /proc/stat: other work on the machine. */
export async function cpuBusy(ms) {
  const sample = () => {
    const f = readFileSync('/proc/stat', 'latin1').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const idle = f[3] + f[4]; // idle + iowait
    return { idle, total: f.reduce((a, b) => a + b, 0) };
  };
  const a = sample();
  await delay(ms);
  const b = sample();
  return 1 - (b.idle - a.idle) / Math.max(1, b.total - a.total);
}

/** The commit measured, with `-dirty` when src/ has uncommitted changes (dist/ is built from it). */
export function gitDescribe() {
  try {
    const opts = { cwd: ROOT, encoding: 'latin1', timeout: 10_000 };
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], opts).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src'], opts).trim();
    return dirty ? `${head}-dirty` : head;
  } catch {
    return 'unknown';
  }
}

/** The machine a run measured: cores, CPU model, kernel, Node, memory (GiB), environ (bytes). */
export function machineInfo() {
  return {
    cores: os.cpus().length,
    cpu: os.cpus()[0]?.model,
    kernel: os.release(),
    node: process.version,
    memGiB: +(os.totalmem() / 2 ** 30).toFixed(1),
    environBytes: Object.entries(process.env).reduce((a, [k, v]) => a + k.length + (v?.length ?? 0) + 2, 0),
  };
}
