// A session started with few fds left, from none upward (counted from what the Node process
// itself holds open: the table is filled, then `leave` fds closed): it never hangs, every
// leftover is gone or named as alive, and nothing is named a survivor that was not alive after
// its KILL. Ground truth: each leftover's pid + start time read from /proc, found by its argv.
import { spawn as spawnChild, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ROOT } from '../support/paths.js';
import { testDir } from '../support/temp.js';

const DIST = join(ROOT, 'dist/index.js');
const BIN = join(ROOT, 'bin/tether.cjs');
// The leftovers' argv: `sleep BASE.LEAVE`, unique to this run of the file.
const BASE = `${process.pid}${Math.floor(Math.random() * 1000)}`; // with the worker's pid: no other run has it
const LEAVES = [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 28, 32];

// This file's leftovers still alive (`sleep BASE.*`), by pid and start time.
function ours(): { pid: number; startTime: number }[] {
  const found: { pid: number; startTime: number }[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, 'latin1').split('\0');
      if (argv[0] !== 'sleep' || !argv[1]?.startsWith(`${BASE}.`)) continue;
      const stat = readFileSync(`/proc/${name}/stat`, 'latin1');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] !== 'Z') found.push({ pid: Number(name), startTime: Number(fields[19]) });
    } catch {
      // gone
    }
  }
  return found;
}

afterEach(() => {
  for (const { pid } of ours()) process.kill(pid, 'SIGKILL');
});

/** Runs a Node ESM program (bounded at `ms`) and parses its last stdout line as JSON. */
function runProgram(program: string, ms: number): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawnChild(process.execPath, ['--input-type=module', '-e', program], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), ms);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(stdout.trim().split('\n').at(-1) ?? ''));
      } catch {
        reject(
          new Error(
            `the program ended (${code ?? signal}) without a JSON line (a hang?); stdout: ${stdout}; stderr: ${stderr}`,
          ),
        );
      }
    });
  });
}

interface Run {
  leave: number;
  /** What spawn threw or its result's error code, or 'HANG' past the bound. */
  failure: string | null;
  /** Whether the command ran (any leftover seen, or the report names one). */
  ran: boolean;
  survivors: { pid: number; startTime: number; signals: string[] }[];
  /** Named survivors that were not alive right after the report. */
  namedDead: number[];
  /** Leftovers alive after the report and not named in it. */
  unnamedAlive: number[];
  stopped: number;
  warnings: string[];
}

describe('a session with few descriptors left', () => {
  it('from no fd left upward, never hangs, ends or names every leftover, and names no dead survivor', async () => {
    const program = `import { openSync, closeSync, readFileSync, readdirSync } from 'node:fs';
const held = [];
const fill = (leave) => { try { for (;;) held.push(openSync('/dev/null', 'r')); } catch {} for (let i = 0; i < leave; i++) closeSync(held.pop()); };
const free = () => { for (const fd of held.splice(0)) closeSync(fd); };
const { spawn } = await import(${JSON.stringify(DIST)});
await spawn('true'); // koffi, the helper's path and the native library are loaded while fds are free
const startOf = (pid) => { try { const t = readFileSync('/proc/' + pid + '/stat', 'latin1'); const f = t.slice(t.lastIndexOf(')') + 2).split(' '); return f[0] === 'Z' ? null : Number(f[19]); } catch { return null; } };
const leftovers = (arg) => readdirSync('/proc').filter((n) => /^\\d+$/.test(n)).filter((n) => { try { return readFileSync('/proc/' + n + '/cmdline', 'latin1') === 'sleep\\0' + arg + '\\0'; } catch { return false; } }).map(Number).filter((pid) => startOf(pid) !== null);
const runs = [];
for (const leave of ${JSON.stringify(LEAVES)}) {
  const arg = '${BASE}.' + leave;
  const script = 'for i in 1 2 3 4 5; do setsid sleep ' + arg + ' >/dev/null 2>&1 & done; sleep 0.3';
  fill(leave);
  let r, failure = null;
  let timer;
  const bound = new Promise((_, reject) => { timer = setTimeout(() => reject(Object.assign(new Error('no result in 20 s'), { code: 'HANG' })), 20000); });
  try { r = await Promise.race([spawn('sh', ['-c', script], { graceMs: 300, killAfterMs: 1000, stdio: 'ignore' }), bound]); } catch (e) { r = e; failure = String(e?.code ?? '') + ': ' + String(e?.message); }
  clearTimeout(timer);
  free();
  if (!failure && r?.error) failure = String(r.error.code) + ': ' + r.error.message;
  const report = r?.report;
  const survivors = (report?.survivors ?? []).map((s) => ({ pid: s.pid, startTime: s.startTime, signals: s.signals }));
  const namedDead = survivors.filter((s) => startOf(s.pid) !== s.startTime).map((s) => s.pid);
  const alive = leftovers(arg);
  const unnamedAlive = alive.filter((pid) => !survivors.some((s) => s.pid === pid));
  const ran = alive.length > 0 || (report?.stopped ?? []).some((p) => p.cmdline === 'sleep ' + arg) || survivors.length > 0;
  for (const pid of alive) try { process.kill(pid, 'SIGKILL'); } catch {}
  runs.push({ leave, failure, ran, survivors, namedDead, unnamedAlive, stopped: report?.stopped?.length ?? 0, warnings: (report?.warnings ?? []).map((w) => w.code + ': ' + w.message) });
}
console.log(JSON.stringify({ runs }));`;
    const out = await runProgram(program, 100_000);
    const runs = out.runs as Run[];
    const hangs = runs.filter((r) => r.failure?.startsWith('HANG'));
    expect(
      hangs.map((r) => `${r.leave} fds free: ${r.failure}`),
      'a session hung',
    ).toEqual([]);
    const lies = runs.flatMap((r) => [
      ...r.unnamedAlive.map(
        (pid) =>
          `${r.leave} fds free: leftover ${pid} alive and not named (${r.failure ?? 'no failure'}; ${r.warnings.join(' | ')})`,
      ),
      ...r.namedDead.map(
        (pid) =>
          `${r.leave} fds free: ${pid} named a survivor, but it was not alive (${r.warnings.join(' | ')})`,
      ),
    ]);
    expect(lies).toEqual([]);
    // Every refusal before the command ran says why (no internal error, no bare crash).
    const refused = runs.filter((r) => !r.ran);
    expect(
      refused.filter((r) => !/EMFILE|ENFILE/.test(r.failure ?? '')).map((r) => `${r.leave}: ${r.failure}`),
      'a session that did not run its command did not say it lacked fds',
    ).toEqual([]);
    expect(refused.length, 'premise broken: every fd budget ran the command').toBeGreaterThan(0);
    expect(runs.at(-1)?.ran, 'premise broken: with fds free the command ran').toBe(true);
    expect(runs.at(-1)?.stopped, 'premise broken: the sweep stopped the five leftovers').toBe(5);
  }, 120_000);
});

describe('a sweep that runs out of descriptors', () => {
  it('with more leftovers than the reserve and no fd left at end(), names only what it saw alive after its KILL, and every leftover is gone or named', async () => {
    const results: string[] = [];
    for (const containment of ['auto', ['env-tag']] as const) {
      const arg = `${BASE}.${containment === 'auto' ? 901 : 902}`;
      const program = `import { openSync, closeSync, readFileSync, readdirSync } from 'node:fs';
const held = [];
const fill = (leave) => { try { for (;;) held.push(openSync('/dev/null', 'r')); } catch {} for (let i = 0; i < leave; i++) closeSync(held.pop()); };
const free = () => { for (const fd of held.splice(0)) closeSync(fd); };
const { session } = await import(${JSON.stringify(DIST)});
const startOf = (pid) => { try { const t = readFileSync('/proc/' + pid + '/stat', 'latin1'); const f = t.slice(t.lastIndexOf(')') + 2).split(' '); return f[0] === 'Z' ? null : Number(f[19]); } catch { return null; } };
const s = session({ containment: ${JSON.stringify(containment)}, graceMs: 300, killAfterMs: 1000 });
await s.spawn('sh', ['-c', 'i=0; while [ $i -lt 40 ]; do setsid sleep ${arg} >/dev/null 2>&1 & i=$((i+1)); done; sleep 0.5'], { stdio: 'ignore' }).exited;
fill(0);
let timer;
const bound = new Promise((resolve) => { timer = setTimeout(() => resolve(null), 20000); });
const report = await Promise.race([s.end(), bound]);
clearTimeout(timer);
free();
const survivors = (report?.survivors ?? []).map((p) => ({ pid: p.pid, startTime: p.startTime, signals: p.signals }));
const namedDead = survivors.filter((p) => startOf(p.pid) !== p.startTime).map((p) => p.pid + ' ' + p.signals.join(','));
const alive = readdirSync('/proc').filter((n) => /^\\d+$/.test(n)).filter((n) => { try { return readFileSync('/proc/' + n + '/cmdline', 'latin1') === 'sleep\\x00${arg}\\x00'; } catch { return false; } }).map(Number).filter((pid) => startOf(pid) !== null);
const unnamedAlive = alive.filter((pid) => !survivors.some((p) => p.pid === pid));
for (const pid of alive) try { process.kill(pid, 'SIGKILL'); } catch {}
console.log(JSON.stringify({ hang: report === null, namedDead, unnamedAlive, survivors: survivors.length, stopped: report?.stopped?.length ?? 0, warnings: (report?.warnings ?? []).map((w) => w.code + ': ' + w.message) }));`;
      const out = await runProgram(program, 60_000);
      const warnings = (out.warnings as string[]).join(' | ');
      if (out.hang) results.push(`${containment}: end() did not settle in 20 s`);
      for (const p of out.unnamedAlive as number[])
        results.push(`${containment}: leftover ${p} alive and not named (${warnings})`);
      for (const p of out.namedDead as string[])
        results.push(`${containment}: ${p} named a survivor, not alive (${warnings})`);
      if (!/no fd left/.test(warnings) && (out.stopped as number) < 40)
        results.push(
          `${containment}: fewer than 40 stopped and no warning says no fd was left (${warnings})`,
        );
    }
    expect(results).toEqual([]);
  }, 150_000);
});

describe('tether run under ulimit -n', () => {
  it('from what a bare node holds open upward: never hangs, exits 126 naming EMFILE before anything runs or ends every leftover, names no dead survivor', () => {
    // What a bare node process holds open: the limits are counted from it.
    const base = Number(
      spawnSync(process.execPath, ['-e', "console.log(require('fs').readdirSync('/proc/self/fd').length)"], {
        encoding: 'utf8',
      }).stdout.trim(),
    );
    expect(base, 'premise broken: a bare node holds no fd').toBeGreaterThan(3);
    const dir = testDir('tether-fds-');
    const problems: string[] = [];
    let ran = 0;
    let refused = 0;
    try {
      for (let extra = 0; extra <= 44; extra += 4) {
        const limit = base + extra;
        const arg = `${BASE}.${2000 + extra}`;
        const report = join(dir, `report-${extra}.json`);
        const script = `for i in 1 2 3 4 5; do setsid sleep ${arg} >/dev/null 2>&1 & done; sleep 0.3`;
        const r = spawnSync(
          'sh',
          [
            '-c',
            `ulimit -n ${limit} && exec "$0" "$@"`,
            process.execPath,
            BIN,
            'run',
            '--no-ledger',
            '--grace',
            '300ms',
            '--report-file',
            report,
            '--',
            'sh',
            '-c',
            script,
          ],
          { encoding: 'utf8', timeout: 20_000, killSignal: 'SIGKILL' },
        );
        const where = `ulimit -n ${limit} (node's ${base} + ${extra})`;
        if (r.error || r.signal)
          problems.push(`${where}: tether did not end within 20 s (${r.error?.message ?? r.signal})`);
        let parsed: { survivors: { pid: number; startTime: number }[] } | undefined;
        try {
          parsed = JSON.parse(readFileSync(report, 'utf8'));
        } catch {
          parsed = undefined;
        }
        const survivors = parsed?.survivors ?? [];
        const alive = ours().filter((p) => p.pid > 0);
        const mine = alive.filter((p) => {
          try {
            return readFileSync(`/proc/${p.pid}/cmdline`, 'latin1') === `sleep\x00${arg}\x00`;
          } catch {
            return false;
          }
        });
        for (const p of mine)
          if (!survivors.some((s) => s.pid === p.pid))
            problems.push(
              `${where}: leftover ${p.pid} alive and not named (status ${r.status}; ${r.stderr.trim().split('\n').slice(-3).join(' | ')})`,
            );
        for (const s of survivors)
          if (!mine.some((p) => p.pid === s.pid && p.startTime === s.startTime))
            problems.push(`${where}: ${s.pid} named a survivor, not alive`);
        if (/internal error/.test(r.stderr)) problems.push(`${where}: ${r.stderr.trim().split('\n')[0]}`);
        if (r.status === 126 && /EMFILE/.test(r.stderr)) refused++;
        else if (r.status === 0) ran++;
        for (const p of mine) process.kill(p.pid, 'SIGKILL');
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(problems).toEqual([]);
    expect(refused, 'premise broken: no limit refused the command').toBeGreaterThan(0);
    expect(ran, 'premise broken: no limit ran the command').toBeGreaterThan(0);
  }, 120_000);
});
