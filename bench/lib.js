// Small helpers shared by the benchmarks (bench/run.js, bench/containment.js, bench/guard.js).
import { execFileSync, spawn } from 'node:child_process';
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

/**
 * The spawner (bench/spawner.c): a benchmark's single long-lived child, parent and reaper of every
 * process it starts (`sleep SECONDS`, untagged or carrying ENTRY). Closing it (`close()`, or our
 * death closing its stdin) kills and reaps them all.
 */
export class Spawner {
  constructor(path, entry, sleepSeconds) {
    this.child = spawn(path, [entry, '/usr/bin/sleep', sleepSeconds], {
      stdio: ['pipe', 'pipe', 'inherit'],
      detached: true, // its own process group: ^C reaches us, and we close its stdin
    });
    this.nextBatch = 0;
    this.waiters = new Map(); // "S3" / "G3" -> resolve
    this.replies = new Map(); // replies that arrived before anyone waited
    this.goneNs = new Map(); // batch -> CLOCK_MONOTONIC ns of its last reap
    this.live = new Set(); // batches not yet seen gone
    this.exited = new Promise((resolve) => this.child.once('exit', resolve));
    let pending = '';
    this.child.stdout.setEncoding('latin1');
    this.child.stdout.on('data', (chunk) => {
      pending += chunk;
      for (let nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n')) {
        this.onLine(pending.slice(0, nl));
        pending = pending.slice(nl + 1);
      }
    });
  }

  onLine(line) {
    const [kind, batch, ...rest] = line.split(' ');
    const key = `${kind}${batch}`;
    let value = rest;
    if (kind === 'G') {
      value = BigInt(rest[0]);
      this.goneNs.set(Number(batch), value);
      this.live.delete(Number(batch));
    } else {
      value = rest.map(Number);
    }
    const waiter = this.waiters.get(key);
    if (waiter) {
      this.waiters.delete(key);
      waiter(value);
    } else {
      this.replies.set(key, value);
    }
  }

  reply(key, ms) {
    if (this.replies.has(key)) {
      const value = this.replies.get(key);
      this.replies.delete(key);
      return Promise.resolve(value);
    }
    return withTimeout(new Promise((resolve) => this.waiters.set(key, resolve)), ms, `spawner reply ${key}`);
  }

  /** Starts `n` sleeps; resolves to { batch, pids }. */
  async start(n, { tagged, setsid }) {
    const batch = this.nextBatch++;
    this.live.add(batch);
    this.child.stdin.write(`S ${batch} ${n} ${tagged ? 1 : 0} ${setsid ? 1 : 0}\n`);
    const pids = await this.reply(`S${batch}`, 120_000);
    if (pids.length !== n) throw new Error(`spawner started ${pids.length} of ${n}`);
    return { batch, pids };
  }

  /** Resolves to the CLOCK_MONOTONIC ns at which the batch's last process was reaped. */
  gone(batch, ms = 30_000) {
    if (this.goneNs.has(batch)) {
      this.replies.delete(`G${batch}`);
      return Promise.resolve(this.goneNs.get(batch));
    }
    return this.reply(`G${batch}`, ms);
  }

  /** SIGKILLs what is left of a batch and waits until all of it is reaped. */
  async kill(batch) {
    if (!this.live.has(batch)) return;
    this.child.stdin.write(`K ${batch}\n`);
    await this.gone(batch);
  }

  /** Closes stdin: the spawner kills and reaps everything left, then exits; we reap it. */
  async close() {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.stdin.end();
    try {
      await withTimeout(this.exited, 30_000, 'spawner exit');
    } catch (error) {
      log(`${error.message}: SIGKILL to the spawner ${this.child.pid}`);
      this.child.kill('SIGKILL');
      await withTimeout(this.exited, 5_000, 'spawner exit after SIGKILL').catch(() => {});
    }
  }
}
