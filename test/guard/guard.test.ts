// The guard in a real PID namespace and a cgroup v2 made by the test (test/guard/support.ts):
// what it stops, what it spares and why, checked against /proc (pid + start time gone or alive),
// not only against its own report.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { GuardProcess, TickResult } from '../../src/guard/guard.js';
import { cmdlineOf, isAlive, type ProcessId, ppidOf, readStat } from '../support/proc.js';
import { allGone, canRun, type Scenario, startScenario, until } from './support.js';

let scenario: Scenario | undefined;
afterEach(async () => {
  await scenario?.end();
  scenario = undefined;
});

async function start(script: string): Promise<Scenario> {
  scenario = await startScenario(script);
  return scenario;
}

// The record of a tick's process by its start time and cmdline (its pid is the namespace's).
function byCmdline(list: GuardProcess[], cmdline: string): GuardProcess | undefined {
  return list.find((p) => p.cmdline === cmdline);
}

function only(s: Scenario, name: string, count?: number): ProcessId[] {
  const found = s.find(name);
  if (count !== undefined) expect(found, `premise: ${count} processes marked ${name}`).toHaveLength(count);
  return found;
}

async function lastTick(s: Scenario, runs = 1): Promise<TickResult> {
  await until(() => s.ticks().length >= runs, 30_000);
  await s.waitFile('rc');
  await until(() => (s.ticks().length >= runs ? s.ticks() : undefined), 5000);
  const ticks = s.ticks();
  expect(ticks.length, `no tick result: ${s.stderr()}`).toBeGreaterThanOrEqual(runs);
  return ticks[runs - 1] as TickResult;
}

describe.skipIf(!canRun)('tether guard in a PID namespace and a test cgroup', () => {
  it('stops an env -i + setsid orphan with TERM and a TERM-trapping one with KILL after the grace, within one interval; never what is outside the target or hidden', async () => {
    const s = await start(`
      env GUARD_MARK="outside.$RUN" sh -c 'echo 0 > "$MOUNT/cgroup.procs"; exec sleep 303' &
      guard --interval 200ms --startup-delay 0 --min-age 300ms -k 500ms --kill-budget 1s --json
      ready
      mark envi env -i GUARD_MARK="envi.$RUN" setsid sh -c 'sleep 300 & sleep 301 & exit 0'
      mark trap setsid sh -c '(trap "" TERM; exec sleep 302) & exit 0'
      echo ok > "$OUT/orphans"
      park`);
    await s.waitFile('ready');
    // A process of the host (outside the namespace) in the target cgroup: it reads as pid 0 there.
    const hidden = spawn('sleep', ['304'], {
      stdio: 'ignore',
      env: { ...process.env, GUARD_MARK: `hidden.${s.run}` },
    });
    writeFileSync(join(s.cgroup, 'cgroup.procs'), String(hidden.pid));
    await until(() => s.ticks().length >= 1, 20_000); // the guard is ticking
    const outside = only(s, 'outside', 1);
    s.go();
    await s.waitFile('orphans');
    const started = performance.now();
    const envi = only(s, 'envi', 2);
    const trap = only(s, 'trap', 1);
    // Premise: both are orphans of the namespace's init, in new sessions.
    for (const id of [...envi, ...trap]) expect(ppidOf(id.pid)).toBe(s.initPid());
    expect(await allGone([...envi, ...trap], 15_000), s.stderr()).toBe(true);
    const took = performance.now() - started;
    // At most: the age it must reach, one interval, the grace, the KILL phase, and slack for a loaded VM.
    expect(took).toBeLessThan(300 + 200 + 500 + 1000 + 3000);
    // The tick's result is printed once its sweep has ended.
    const stoppedNow = () => s.ticks().flatMap((t) => t.stopped);
    await until(() => byCmdline(stoppedNow(), 'sleep 302'), 10_000);
    const stopped = stoppedNow();
    const term = byCmdline(stopped, 'sleep 300');
    expect(term, JSON.stringify(stopped)).toMatchObject({ signals: ['SIGTERM'], endedBy: 'SIGTERM' });
    expect(byCmdline(stopped, 'sleep 302')).toMatchObject({
      signals: ['SIGTERM', 'SIGKILL'],
      endedBy: 'SIGKILL',
    });
    expect(s.stderr()).toMatch(
      /stopped pid=\d+ start=\d+ comm="sleep" signal=SIGKILL reason="no rule spares it[^"]*" cmdline="sleep 302"/,
    );
    // Outside the target cgroup, and hidden (pid 0 in the namespace): never signalled.
    expect(outside.every(isAlive)).toBe(true);
    expect(
      isAlive({ pid: hidden.pid as number, startTime: readStat(hidden.pid as number)?.startTime ?? -1 }),
    ).toBe(true);
    expect(s.ticks().at(-1)?.target.hidden).toBe(1);
    expect(stopped.some((p) => p.cmdline === 'sleep 303' || p.cmdline === 'sleep 304')).toBe(false);
    hidden.kill('SIGKILL');
  });

  it('spares a live session whose supervisor was orphaned to PID 1, with its helper, children and orphaned carriers (trinity #857/#912); stops the carriers of a dead one', async () => {
    const s = await start(`
      cat > "$OUT/sup.mjs" <<'EOS'
      const { spawn } = await import(process.env.DIST);
      const { writeFileSync } = await import('node:fs');
      spawn('sh', ['-c', 'sleep 310 & exec sleep 311'], { containment: ['env-tag', 'subreaper'] });
      spawn('sh', ['-c', 'setsid sh -c "sleep 312 & exit 0"; exec sleep 313'], { containment: ['env-tag'] });
      setTimeout(() => writeFileSync(process.env.OUT + '/sup-ready', ''), 500);
      setInterval(() => {}, 1000);
      EOS
      cat > "$OUT/dead.mjs" <<'EOS'
      const { spawn } = await import(process.env.DIST);
      const { writeFileSync } = await import('node:fs');
      spawn('sh', ['-c', 'setsid sh -c "sleep 314 & exit 0"; exec sleep 315'], { containment: ['env-tag'] });
      setTimeout(() => { writeFileSync(process.env.OUT + '/dead-ready', ''); process.kill(process.pid, 'SIGKILL'); }, 500);
      EOS
      mark sup setsid sh -c '"$NODE" "$OUT/sup.mjs" & exit 0'
      mark dead setsid sh -c '"$NODE" "$OUT/dead.mjs" & exit 0'
      while [ ! -e "$OUT/sup-ready" ] || [ ! -e "$OUT/dead-ready" ]; do sleep 0.02; done
      sleep 0.3
      ready
      guard --once --min-age 0 --grace 1s --json
      park`);
    await s.waitFile('ready');
    const sup = only(s, 'sup');
    const dead = only(s, 'dead');
    const init = s.initPid();
    const supervisor = sup.find((id) => readStat(id.pid)?.comm === 'node');
    expect(supervisor, 'premise: the supervisor runs').toBeDefined();
    expect(ppidOf((supervisor as ProcessId).pid), 'premise: the supervisor is orphaned to PID 1').toBe(init);
    expect(
      sup.some((id) => readStat(id.pid)?.comm === 'tether-helper'),
      'premise: a helper',
    ).toBe(true);
    // node, helper, sleep 310, 311, 312 (a carrier orphaned to PID 1), 313.
    expect(sup.length).toBeGreaterThanOrEqual(6);
    expect(dead.map((id) => readStat(id.pid)?.comm)).toEqual(['sleep', 'sleep']);
    expect(
      dead.every((id) => ppidOf(id.pid) === init),
      'premise: the dead session left orphans',
    ).toBe(true);
    s.go();
    const tick = await lastTick(s);
    expect(
      sup.filter((id) => !isAlive(id)),
      JSON.stringify(tick.stopped),
    ).toEqual([]);
    expect(await allGone(dead, 5000)).toBe(true);
    expect(tick.spared['live-session']).toBeGreaterThanOrEqual(sup.length);
    expect(tick.stopped.map((p) => p.cmdline).sort()).toEqual(['sleep 314', 'sleep 315']);
  });

  it('spares an exec entry made with nsenter and its child (trinity #1153); stops an orphan beside it', async () => {
    const s = await start(`
      mark orphan setsid sh -c 'sleep 322 & exit 0'
      ready
      guard --once --min-age 0 --grace 1s --json
      park`);
    await s.waitFile('ready');
    const entry = spawn(
      'nsenter',
      [
        '--target',
        String(s.initPid()),
        '--pid',
        '--mount',
        '--',
        'sh',
        '-c',
        'echo 0 > "$CG/cgroup.procs"; sleep 320 & exec sleep 321',
      ],
      { stdio: 'ignore', env: { ...process.env, CG: s.cgroup, GUARD_MARK: `exec.${s.run}` } },
    );
    const entered = await until(
      () =>
        s.find('exec').filter((id) => readStat(id.pid)?.comm === 'sleep').length === 2
          ? s.find('exec')
          : undefined,
      10_000,
    );
    expect(entered, 'premise: the entry and its child run').toBeDefined();
    const orphan = only(s, 'orphan', 1);
    s.go();
    const tick = await lastTick(s);
    expect((entered as ProcessId[]).filter((id) => !isAlive(id))).toEqual([]);
    expect(tick.spared['exec-entry']).toBeGreaterThanOrEqual(2);
    expect(await allGone(orphan, 5000)).toBe(true);
    expect(tick.stopped.map((p) => p.cmdline)).toEqual(['sleep 322']);
    entry.kill('SIGKILL');
  });

  it('spares a process younger than --min-age and its child (trinity #1501); stops an older orphan', async () => {
    const s = await start(`
      mark old setsid sh -c 'sleep 330 & exit 0'
      sleep 6.5
      mark young setsid sh -c 'sh -c "sleep 331 & exec sleep 332" & exit 0'
      ready
      guard --once --min-age 6s --grace 1s --json
      park`);
    await s.waitFile('ready');
    const old = only(s, 'old', 1);
    const young = only(s, 'young', 2);
    s.go();
    const tick = await lastTick(s);
    expect(young.filter((id) => !isAlive(id))).toEqual([]);
    expect(await allGone(old, 5000)).toBe(true);
    expect(tick.spared['min-age']).toBeGreaterThanOrEqual(2);
    expect(tick.stopped.map((p) => p.cmdline)).toEqual(['sleep 330']);
  });

  it('a pattern protects a daemon and its children; a corrupt allow file is reported line by line and the rest applies', async () => {
    const s = await start(`
      printf 'sleep 341 & sleep 342 & wait\\n' > "$OUT/guard-daemon-$RUN.sh"
      printf 'sleep 344\\n' > "$OUT/patterned-$RUN.sh"
      printf '# daemons this container keeps\\n*guard-daemon-%s*\\n\\n*[broken\\n*\\n' "$RUN" > "$OUT/allow"
      mark daemon setsid sh -c 'sh "$OUT/guard-daemon-$RUN.sh" & exit 0'
      mark patterned setsid sh -c 'sh "$OUT/patterned-$RUN.sh" & exit 0'
      mark orphan setsid sh -c 'sleep 343 & exit 0'
      ready
      guard --once --min-age 0 --grace 1s --json --allow "$OUT/allow" --allow-pattern "*patterned-$RUN*"
      park`);
    await s.waitFile('ready');
    const daemon = only(s, 'daemon', 3);
    const patterned = only(s, 'patterned', 2);
    const orphan = only(s, 'orphan', 1);
    s.go();
    const tick = await lastTick(s);
    expect([...daemon, ...patterned].filter((id) => !isAlive(id))).toEqual([]);
    expect(tick.spared.pattern).toBe(5);
    expect(await allGone(orphan, 5000)).toBe(true);
    expect(tick.stopped.map((p) => p.cmdline)).toEqual(['sleep 343']);
    const file = join(s.out, 'allow');
    expect(tick.problems).toEqual([
      { source: file, line: 4, message: expect.stringContaining('bad pattern "*[broken"') },
      { source: file, line: 5, message: expect.stringContaining('matches every command line') },
    ]);
    expect(s.stderr()).toContain(`${file}:4: bad pattern`);
  });

  it('a transient registration spares until it expires; a pid-reused entry does not spare; a corrupt registration line is reported and the rest applies', async () => {
    const s = await start(`
      mark reg setsid sh -c 'sleep 350 & echo $! > "$OUT/reg.pid"; exit 0'
      mark reused setsid sh -c 'sleep 351 & echo $! > "$OUT/reused.pid"; exit 0'
      mark kept setsid sh -c 'sleep 352 & echo $! > "$OUT/kept.pid"; exit 0'
      "$NODE" "$TETHER" guard allow --ttl 8s "$(cat "$OUT/reg.pid")" > /dev/null
      "$NODE" "$TETHER" guard allow --ttl 1h "$(cat "$OUT/kept.pid")" > /dev/null
      echo "$(cat "$OUT/reused.pid") 1 9999999999999" >> "$TETHER_GUARD_STATE/guard-allow"
      echo "this is not a registration" >> "$TETHER_GUARD_STATE/guard-allow"
      ready
      guard --once --min-age 0 --grace 1s --json
      guard_wait
      sleep 8.5
      guard --once --min-age 0 --grace 1s --json
      park`);
    await s.waitFile('ready');
    const reg = only(s, 'reg', 1);
    const reused = only(s, 'reused', 1);
    const kept = only(s, 'kept', 1);
    s.go();
    const first = await lastTick(s, 1);
    expect(reg.every(isAlive), 'a live registration spares').toBe(true);
    expect(kept.every(isAlive)).toBe(true);
    expect(await allGone(reused, 5000), 'a registration with another start time does not spare').toBe(true);
    expect(first.spared.registered).toBe(2);
    expect(first.problems).toEqual([
      {
        source: join(s.out, 'state/guard-allow'),
        line: 5,
        message: expect.stringContaining('bad registration "this is not a registration"'),
      },
    ]);
    const second = await lastTick(s, 2);
    expect(await allGone(reg, 5000), 'an expired registration does not spare').toBe(true);
    expect(kept.every(isAlive)).toBe(true);
    expect(second.stopped.map((p) => p.cmdline)).toEqual(['sleep 350']);
  });

  it('never touches itself, its descendants, its ancestors or PID 1', async () => {
    const s = await start(`
      cat > "$OUT/lib-guard.mjs" <<'EOS'
      const { createGuard } = await import(process.env.DIST);
      const { spawn } = await import('node:child_process');
      const { writeFileSync } = await import('node:fs');
      spawn('sleep', ['360'], { stdio: 'ignore', env: { ...process.env, GUARD_MARK: 'child.' + process.env.RUN } });
      await new Promise((r) => setTimeout(r, 300));
      const g = createGuard({ cgroup: process.env.CG, minAgeMs: 0, graceMs: 1000, log: () => {} });
      const r = await g.tick();
      writeFileSync(process.env.OUT + '/lib.json', JSON.stringify({ r, counters: g.counters }));
      EOS
      ready
      guard --once --min-age 0 --grace 1s --json
      guard_wait
      env GUARD_MARK="libguard.$RUN" sh -c '"$NODE" "$OUT/lib-guard.mjs"; exec sleep 600' &
      park`);
    await s.waitFile('ready');
    const init = { pid: s.initPid(), startTime: readStat(s.initPid())?.startTime ?? -1 };
    s.go();
    const cli = await lastTick(s);
    // Its ancestor shell ran on after it and wrote the status: it was not signalled.
    expect((await s.waitFile('rc')).trim()).toBe('0');
    expect(cli.spared['pid-1']).toBe(1);
    expect(cli.spared['guard-ancestor']).toBe(1);
    expect(cli.spared.guard).toBe(1);
    expect(cli.stopped).toEqual([]);
    const lib = JSON.parse(await s.waitFile('lib.json'));
    expect(lib.r.spared.guard, 'the guard and its child').toBe(2);
    expect(lib.r.spared['guard-ancestor']).toBe(1);
    expect(lib.r.stopped).toEqual([]);
    expect(lib.counters.ticks).toBe(1);
    expect(isAlive(init)).toBe(true);
    expect(only(s, 'child', 1).every(isAlive)).toBe(true);
    // The library guard's ancestor shell (a child of the init), alive after the tick.
    expect(only(s, 'libguard').filter((id) => ppidOf(id.pid) === init.pid)).toHaveLength(1);
  });

  it('--dry-run stops nothing and logs what it would stop, URL credentials redacted', async () => {
    const s = await start(`
      mark orphan setsid sh -c 'sleep 370 & sleep 371 & exit 0'
      mark cred setsid sh -c 'sh -c "sleep 372; : https://user:hunter2@example.com/repo" & exit 0'
      ready
      guard --once --dry-run --min-age 0 --json
      park`);
    await s.waitFile('ready');
    // \`mark\` returns once its setsid sh has exited, not once what that sh started runs: the
    // inner sh may not have forked sleep 372 yet, and a forked child reads as its parent's sh
    // until it execs. Set up means every orphan is what the tick must report.
    const started = [
      'sh -c sleep 372; : https://user:hunter2@example.com/repo',
      'sleep 370',
      'sleep 371',
      'sleep 372',
    ];
    const cmdlines = () => [...s.find('orphan'), ...s.find('cred')].map((id) => cmdlineOf(id.pid)).sort();
    await until(() => JSON.stringify(cmdlines()) === JSON.stringify(started), 10_000);
    expect(cmdlines(), 'premise: the orphans, started').toEqual(started);
    const ids = [...only(s, 'orphan', 2), ...only(s, 'cred', 2)];
    s.go();
    const tick = await lastTick(s);
    // Given time to act, had it sent anything.
    await new Promise((r) => setTimeout(r, 300));
    expect(ids.filter((id) => !isAlive(id))).toEqual([]);
    expect(tick.dryRun).toBe(true);
    expect(tick.stopped).toEqual([]);
    expect(tick.wouldStop.map((p) => p.cmdline).sort()).toEqual([
      'sh -c sleep 372; : https://***@example.com/repo',
      'sleep 370',
      'sleep 371',
      'sleep 372',
    ]);
    expect(s.stderr()).toMatch(
      /would stop pid=\d+ start=\d+ comm="sleep" signal=none reason="no rule spares it/,
    );
    expect(s.stderr()).not.toContain('hunter2');
    expect(s.stderr()).toContain('https://***@example.com/repo');
  });
});
