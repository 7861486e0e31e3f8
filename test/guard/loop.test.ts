// startGuard's loop (AbortSignal, `await using`), the metrics endpoint and the CLI's option
// checks. The guards here are dry runs over a cgroup the test made, holding only a process the
// test started: nothing is signalled.
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startGuard, type TickResult } from '../../src/guard/guard.js';
import { serveMetrics } from '../../src/guard/metrics.js';
import { forLog } from '../../src/guard/tick-log.js';
import { isAlive, readStat } from '../support/proc.js';
import { canRun, cgroupMount, TETHER, until } from './support.js';

let cgroup: string;
let sleeper: { pid: number; startTime: number };

// An orphan (its shell exited), moved into the test's cgroup. The test worker is a subreaper
// (test/support/reaper.ts): the orphan's parent is the worker, outside the target, so the guard
// spares it as an exec entry (docs/guard.md) — these tests check the loop, not what it stops.
beforeEach(() => {
  if (!canRun) return;
  cgroup = join(cgroupMount() as string, `tether-guard-loop-${process.pid}-${Date.now()}`);
  mkdirSync(cgroup);
  const pid = Number(
    execFileSync('sh', ['-c', 'sleep 400 >/dev/null 2>&1 & echo $!'], { encoding: 'utf8' }).trim(),
  );
  writeFileSync(join(cgroup, 'cgroup.procs'), String(pid));
  sleeper = { pid, startTime: readStat(pid)?.startTime ?? -1 };
});

afterEach(async () => {
  if (!canRun) return;
  writeFileSync(join(cgroup, 'cgroup.kill'), '1'); // only the test's orphan is in it
  await until(() => {
    try {
      rmdirSync(cgroup);
      return true;
    } catch {
      return false;
    }
  }, 5000);
});

function tether(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [TETHER, ...args],
      { env: { ...process.env, ...env }, timeout: 20_000 },
      (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe.skipIf(!canRun)('startGuard', () => {
  it('ticks after the startup delay, every interval, until its AbortSignal aborts; dry runs list and touch nothing; metrics are served', async () => {
    const ticks: TickResult[] = [];
    const metrics = await serveMetrics('127.0.0.1', 0);
    const stop = new AbortController();
    const started = Date.now();
    const guard = startGuard({
      cgroup,
      dryRun: true,
      minAgeMs: 0,
      intervalMs: 100,
      startupDelayMs: 200,
      signal: stop.signal,
      log: () => {},
      onTick: (r) => {
        ticks.push(r);
        metrics.observe(r);
      },
    });
    await until(() => ticks.length >= 3, 10_000);
    stop.abort();
    await guard.done;
    const after = ticks.length;
    await new Promise((r) => setTimeout(r, 300));
    expect(ticks.length, 'no tick after the abort').toBe(after);
    expect(
      new Date(ticks[0]?.startedAt as string).getTime() - started,
      'the startup delay',
    ).toBeGreaterThanOrEqual(190);
    expect(ticks[0]?.target.processes).toBe(1);
    expect(ticks.every((t) => t.spared['exec-entry'] === 1 && t.wouldStop.length === 0)).toBe(true);
    expect(isAlive(sleeper)).toBe(true);
    expect(guard.counters.ticks).toBe(after);
    expect(guard.counters.spared['exec-entry']).toBe(after);
    const text = await (await fetch(`http://127.0.0.1:${metrics.address.port}/metrics`)).text();
    expect(text).toContain(`tether_guard_ticks_total ${after}`);
    expect(text).toContain(`tether_guard_spared_total{rule="exec-entry"} ${after}`);
    expect(text).toContain(`tether_guard_tick_duration_seconds_count ${after}`);
    expect(text).toContain('tether_guard_spared_total{rule="min-age"} 0');
    expect((await fetch(`http://127.0.0.1:${metrics.address.port}/other`)).status).toBe(404);
    await metrics.close();
  });

  it('ends at the end of an `await using` block', async () => {
    const ticks: TickResult[] = [];
    let counters: { ticks: number } | undefined;
    {
      await using guard = startGuard({
        cgroup,
        dryRun: true,
        intervalMs: 50,
        startupDelayMs: 0,
        log: () => {},
        onTick: (r) => ticks.push(r),
      });
      counters = guard.counters;
      await until(() => ticks.length >= 2, 10_000);
    }
    const n = ticks.length;
    await new Promise((r) => setTimeout(r, 200));
    expect(ticks.length).toBe(n);
    expect(counters?.ticks).toBe(n);
  });
});

describe('the guard CLI', () => {
  it('names a bad option or variable and the accepted values (exit 125)', async () => {
    const bad = await tether(['guard', '--once', '--interval', 'soon']);
    expect(bad.code).toBe(125);
    expect(bad.stderr).toContain(
      'invalid --interval "soon": expected a duration such as 500ms, 5s, 1.5s, 2m',
    );
    const env = await tether(['guard', '--once'], { TETHER_GUARD_MIN_AGE: 'x' });
    expect(env.code).toBe(125);
    expect(env.stderr).toContain('invalid TETHER_GUARD_MIN_AGE "x"');
    const dry = await tether(['guard', '--once'], { TETHER_GUARD_DRY_RUN: 'maybe' });
    expect(dry.code).toBe(125);
    expect(dry.stderr).toContain('expected 1, true, yes, on, 0, false, no or off');
    const metrics = await tether(['guard', '--once', '--metrics', 'nowhere']);
    expect(metrics.code).toBe(125);
    expect(metrics.stderr).toContain('expected HOST:PORT');
    const cg = await tether(['guard', '--once', '--cgroup', '/no/such/cgroup']);
    expect(cg.code).toBe(125);
    expect(cg.stderr).toContain('not a cgroup v2 directory');
    const ttl = await tether(['guard', 'allow', '123']);
    expect(ttl.code).toBe(125);
    expect(ttl.stderr).toContain('missing --ttl');
  });

  it.skipIf(!canRun)(
    'a flag wins over its TETHER_GUARD_ variable; --json prints one document a tick',
    async () => {
      const r = await tether(['guard', '--once', '--json', '--cgroup', cgroup, '--min-age', '0'], {
        TETHER_GUARD_DRY_RUN: '1',
        TETHER_GUARD_MIN_AGE: 'not a duration', // the flag wins: the variable is never read
      });
      expect(r.code, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout) as TickResult;
      expect(doc.dryRun).toBe(true);
      expect(doc.target).toMatchObject({ kind: 'cgroup', cgroup, processes: 1 });
      expect(isAlive(sleeper)).toBe(true);
    },
  );

  it.skipIf(!canRun)(
    '--metrics loads the metrics endpoint when asked (prom-client is loaded only then)',
    async () => {
      const r = await tether(['guard', '--once', '--cgroup', cgroup, '--metrics', '127.0.0.1:0'], {
        TETHER_GUARD_DRY_RUN: '1',
      });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toMatch(/tether guard: metrics at http:\/\/127\.0\.0\.1:\d+\/metrics/);
      expect(isAlive(sleeper)).toBe(true);
    },
  );
});

describe('forLog', () => {
  it('redacts URL credentials and caps at 200 bytes on a character boundary', () => {
    expect(forLog('git clone https://user:s3cret@github.com/a/b ftp://tok@x')).toBe(
      'git clone https://***@github.com/a/b ftp://***@x',
    );
    const long = forLog(`x ${'é'.repeat(300)}`);
    expect(Buffer.byteLength(long.slice(0, -1))).toBeLessThanOrEqual(200);
    expect(long.endsWith('\u2026')).toBe(true);
    expect(long).not.toContain('\ufffd');
  });
});
