// The guard as init, as PID 1 of a real PID namespace (`unshare --pid --fork --mount-proc`):
// it reaps the orphans that exit, forwards signals to the command, passes its status through,
// stops orphans older than min-age while the command runs and spares the command's children,
// and sweeps everything left when the command exits — before it exits itself. Ground truth is
// the namespace's own procfs, read from here through the init's root (`/proc/<init>/root/proc`,
// parsed by test/support/proc.ts): each process the command records by its pid there is named by
// pid + start time while it runs, and only the namespace's processes are walked. Every process
// here lives in the test's namespace, which dies with its init; the init pauses after its work
// (until the test releases it), so that what is gone by then was ended by the init, not by the
// namespace's end.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTag } from '../../src/proc/tag.js';
import { FIXTURES } from '../support/paths.js';
import {
  childrenOf,
  isAlive,
  isDeadZombie,
  type ProcessId,
  parseStatLine,
  readStat,
  type Stat,
} from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { inPidNamespace } from './support.js';

const RUNNER = join(FIXTURES, 'node/guard-init.mjs');
const TICKS_PER_SECOND = 100;

/** A process the command recorded: its label and its identity in the run's procfs (`Run.proc`). */
interface Recorded {
  label: string;
  id: ProcessId;
}

interface Run {
  dir: string;
  /** Lines "<ns pid> <label>" the command's processes append. */
  pidfile: string;
  unshare: ChildProcess;
  /** The init (node, PID 1 of the namespace), as seen from here. */
  init: ProcessId;
  /** unshare's exit status (the init's), once it has exited. */
  exited: Promise<number | null>;
  output: () => string;
  /** Whether the init is PID 1 of a namespace of its own. */
  namespace: boolean;
  /** The procfs the init sees: the namespace's (`/proc/<init>/root/proc`), or `/proc`. */
  proc: string;
  /** The init's pid there: 1 in its namespace. */
  initPid: number;
}

const runs: Run[] = [];

afterEach(() => {
  for (const run of runs.splice(0)) {
    writeFileSync(join(run.dir, 'result.json.release'), '');
    // The namespace dies with its init: SIGKILL to unshare (--kill-child) ends the init we
    // started, and the kernel whatever is left in the namespace. Outside a namespace, what is
    // left below the init (ours: it is a subreaper) is killed first.
    if (!run.namespace && isAlive(run.init)) {
      for (const p of treeIn(run)) process.kill(p.pid, 'SIGKILL');
    }
    if (run.unshare.exitCode === null && run.unshare.signalCode === null) run.unshare.kill('SIGKILL');
    rmSync(run.dir, { recursive: true, force: true });
  }
});

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `check` every 20 ms until it returns a value other than undefined, at most `ms`. */
async function until<T>(what: string, ms: number, check: () => T | undefined, detail = () => ''): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const value = check();
    if (value !== undefined) return value;
    if (performance.now() > deadline)
      throw new Error(`timed out after ${ms} ms waiting for ${what} ${detail()}`);
    await sleep(20);
  }
}

/** Clock ticks since boot now (/proc/uptime), the unit of a start time. */
function ticksNow(): number {
  return Math.floor(Number.parseFloat(readFileSync('/proc/uptime', 'latin1')) * TICKS_PER_SECOND);
}

/** `<proc>/<pid>/stat` in the run's procfs, or undefined once gone. */
function statIn(run: Run, pid: number): Stat | undefined {
  try {
    return parseStatLine(readFileSync(`${run.proc}/${pid}/stat`, 'latin1'));
  } catch {
    return undefined;
  }
}

/** True while that very process (pid and start time, in the run's procfs) exists and is not a dead zombie. */
function aliveIn(run: Run, id: ProcessId): boolean {
  const stat = statIn(run, id.pid);
  return stat !== undefined && stat.startTime === id.startTime && !isDeadZombie(stat);
}

function stateIn(run: Run, pid: number): string {
  return statIn(run, pid)?.state ?? 'gone';
}

/** Every process below the init now (zombies included), from one walk of the run's procfs. */
function treeIn(run: Run): Stat[] {
  const children = new Map<number, Stat[]>();
  for (const name of readdirSync(run.proc)) {
    if (!/^\d+$/.test(name)) continue;
    const stat = statIn(run, Number(name));
    if (stat) children.set(stat.ppid, [...(children.get(stat.ppid) ?? []), stat]);
  }
  const out: Stat[] = [];
  const queue = [...(children.get(run.initPid) ?? [])];
  for (let p = queue.pop(); p !== undefined; p = queue.pop()) {
    out.push(p);
    queue.push(...(children.get(p.pid) ?? []));
  }
  return out;
}

/** What is left below the init, as "pid state comm". */
function leftIn(run: Run): string[] {
  return treeIn(run).map((s) => `${s.pid} ${s.state} ${s.comm}`);
}

/**
 * Starts the init as PID 1 of a new PID namespace (or, with `namespace: false`, as a plain child
 * of this worker: a subreaper, its processes tagged for the suite guard) with `script` (sh -c)
 * as its command and the startInit options given; the script gets the pidfile as $1. Resolves
 * once the init is seen.
 */
async function startRun(script: string, options: Record<string, number>, namespace = true): Promise<Run> {
  const dir = testDir('tether-guard-init-');
  const pidfile = join(dir, 'pids');
  const runner = [RUNNER, join(dir, 'result.json'), '--', 'sh', '-c', script, 'sh', pidfile];
  // --kill-child: if unshare is killed (the cleanup), the kernel kills the init, and with it the namespace.
  const [file, args] = namespace ? inPidNamespace([process.execPath, ...runner]) : [process.execPath, runner];
  const env: NodeJS.ProcessEnv = { ...process.env, GUARD_INIT_OPTIONS: JSON.stringify(options) };
  if (!namespace) env[createTag().name] = '1'; // outside a namespace of ours: the suite guard sees leftovers
  const unshare = spawn(file, args as string[], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let out = '';
  unshare.stdout?.on('data', (d) => (out += d));
  unshare.stderr?.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => unshare.on('exit', (code) => resolve(code)));
  const output = () => out;
  const run: Run = {
    dir,
    pidfile,
    unshare,
    init: { pid: 0, startTime: 0 },
    exited,
    output,
    namespace,
    proc: '/proc',
    initPid: 0,
  };
  runs.push(run);
  const unsharePid = unshare.pid as number;
  run.init = await until('the init (node)', 10_000, () => {
    const node = namespace ? initOf(unsharePid) : readStat(unsharePid);
    return node ? { pid: node.pid, startTime: node.startTime } : undefined;
  });
  run.proc = namespace ? `/proc/${run.init.pid}/root/proc` : '/proc';
  run.initPid = namespace ? 1 : run.init.pid;
  if (namespace) {
    await until('the init to be PID 1 of its procfs', 10_000, () =>
      statIn(run, 1)?.comm === 'node' ? true : undefined,
    );
  }
  return run;
}

/**
 * unshare's child once it runs node: looked for among the next pids first (unshare forks it
 * at once), so that no walk of a crowded /proc is needed; the whole /proc otherwise.
 */
function initOf(unsharePid: number): Stat | undefined {
  const isInit = (s: Stat | undefined) => s?.ppid === unsharePid && s.comm === 'node' && s.state !== 'Z';
  for (let pid = unsharePid + 1; pid < unsharePid + 200; pid++) {
    const stat = readStat(pid);
    if (isInit(stat)) return stat;
  }
  return childrenOf(unsharePid).find(isInit);
}

/** The records "<pid> <label>" of the pidfile (pids as the init sees them), other lines (logs) left out. */
function pidLines(run: Run): [number, string][] {
  if (!existsSync(run.pidfile)) return [];
  return readFileSync(run.pidfile, 'latin1')
    .split('\n')
    .filter((l) => /^\d+ \S+$/.test(l))
    .map((l) => {
      const [pid, label] = l.split(' ');
      return [Number(pid), label as string];
    });
}

/** Waits until the command recorded `labels`, naming each by pid + start time as soon as it is seen. */
async function recorded(run: Run, labels: string[]): Promise<Map<string, Recorded>> {
  const found = new Map<string, Recorded>();
  return until(
    `the command to record ${labels.join(', ')}`,
    10_000,
    () => {
      for (const [pid, label] of pidLines(run)) {
        const stat = found.has(label) ? undefined : statIn(run, pid);
        if (stat) found.set(label, { label, id: { pid, startTime: stat.startTime } });
      }
      return labels.every((label) => found.has(label)) ? found : undefined;
    },
    () =>
      `(pidfile: ${JSON.stringify(pidLines(run))}; named: ${[...found.keys()].join(', ')}; output: ${run.output()})`,
  );
}

/** The init's result, once it has ended the command and swept the rest (it then waits). */
// biome-ignore lint/suspicious/noExplicitAny: the runner's JSON (InitResult with the tick reports).
async function result(run: Run, ms = 20_000): Promise<any> {
  const file = join(run.dir, 'result.json');
  return until(
    'the init to write its result',
    ms,
    () => (existsSync(file) ? JSON.parse(readFileSync(file, 'latin1')) : undefined),
    () => `(output: ${run.output()})`,
  );
}

function release(run: Run): Promise<number | null> {
  writeFileSync(join(run.dir, 'result.json.release'), '');
  return run.exited;
}

describe('guard as init, PID 1 of a PID namespace', () => {
  it('reaps the orphans that exit: none is left a zombie under PID 1', async () => {
    // Eight orphans (their subshell exits at once) that end by themselves after 2 s; the command
    // runs on for 6 s, so that only the init's reaping can take their zombies away in time.
    const script = `
      for i in 1 2 3 4 5 6 7 8; do
        ( sh -c 'echo $$ orphan-'$i' >> "$0"; exec sleep 2' "$1" & )
      done
      sleep 6`;
    const run = await startRun(script, { startupDelayMs: 60_000, minAgeMs: 60_000 });
    const labels = [1, 2, 3, 4, 5, 6, 7, 8].map((i) => `orphan-${i}`);
    const orphans = [...(await recorded(run, labels)).values()];
    for (const o of orphans) {
      expect(statIn(run, o.id.pid)?.ppid, `premise broken: ${o.label} was not reparented to the init`).toBe(
        run.initPid,
      );
    }
    // Each ends after 2 s; a zombie nobody reaps keeps its pid and start time in /proc as Z.
    await until(
      'every orphan to be reaped (gone from /proc, not a zombie)',
      5_000,
      () => (orphans.every((o) => statIn(run, o.id.pid)?.startTime !== o.id.startTime) ? true : undefined),
      () => orphans.map((o) => `${o.label} pid ${o.id.pid}: ${stateIn(run, o.id.pid)}`).join(', '),
    );
    expect(
      treeIn(run)
        .filter((s) => s.ppid === run.initPid)
        .map((s) => `${s.pid} ${s.state} ${s.comm}`),
    ).toEqual([
      expect.stringMatching(/ sh$/), // the command, still running: what reaped them is the init
    ]);
    const r = await result(run);
    expect(r.status).toBe(0);
    expect(r.subreaper.mode).toBe('pid-1');
    expect(r.reaped).toBeGreaterThanOrEqual(8);
    expect(await release(run)).toBe(0);
  });

  it("passes the command's exit status through (3), while its orphans die at the same moment", async () => {
    // Twenty orphans that end together with the command: their zombies are reaped around the
    // command's own exit, which libuv must still see.
    const script = `
      for i in $(seq 20); do ( sleep 0.5 & ); done
      sleep 0.5
      exit 3`;
    const run = await startRun(script, {
      startupDelayMs: 60_000,
      minAgeMs: 60_000,
      graceMs: 500,
      killAfterMs: 500,
    });
    const r = await result(run);
    expect({ status: r.status, code: r.code, signal: r.signal }).toEqual({
      status: 3,
      code: 3,
      signal: null,
    });
    expect(leftIn(run), 'processes left under the init after its end').toEqual([]);
    expect(await release(run), "unshare's exit status (the init's)").toBe(3);
  });

  it('forwards HUP, INT, QUIT, USR1 and USR2 to the command; a forwarded TERM ends it and the init exits 143', async () => {
    const script = `
      for s in HUP INT QUIT USR1 USR2; do trap "echo got-$s >> \\"$1\\"" $s; done
      echo $$ command >> "$1"
      while :; do sleep 0.05; done`;
    const run = await startRun(script, {
      startupDelayMs: 60_000,
      minAgeMs: 60_000,
      graceMs: 500,
      killAfterMs: 500,
    });
    const command = (await recorded(run, ['command'])).get('command') as Recorded;
    expect(statIn(run, command.id.pid)?.ppid, "premise broken: the command is not the init's child").toBe(
      run.initPid,
    );
    for (const signal of ['SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'] as const) {
      process.kill(run.init.pid, signal);
      const line = `got-${signal.slice(3)}`;
      await until(`the command to log ${line}`, 5_000, () =>
        readFileSync(run.pidfile, 'latin1').split('\n').includes(line) ? true : undefined,
      );
      expect(isAlive(run.init), `the init did not survive ${signal}`).toBe(true);
    }
    process.kill(run.init.pid, 'SIGTERM');
    const r = await result(run);
    expect({ status: r.status, code: r.code, signal: r.signal }).toEqual({
      status: 143,
      code: null,
      signal: 'SIGTERM',
    });
    expect(aliveIn(run, command.id), 'the command survived the forwarded TERM').toBe(false);
    expect(await release(run)).toBe(143);
  });

  it("stops an orphan older than min-age while the command runs (TERM, then KILL after the grace), and spares the command's children", async () => {
    const script = `
      P=$1
      sh -c 'echo $$ child >> "$0"; exec sleep 30' "$P" &
      sh -c 'echo $$ grandchild-parent >> "$0"; sh -c "echo \\$\\$ grandchild >> $0; exec sleep 30" & wait' "$P" &
      ( sh -c 'echo $$ orphan >> "$0"; trap "echo got-TERM-orphan >> $0; exit 0" TERM; while :; do sleep 0.05; done' "$P" & )
      ( sh -c 'echo $$ stubborn >> "$0"; trap "" TERM; exec sleep 30' "$P" & )
      ( setsid sh -c 'echo $$ orphan-parent >> "$0"; sh -c "echo \\$\\$ orphan-child >> $0; exec sleep 30" & wait' "$P" & )
      while :; do sleep 0.05; done`;
    const minAgeMs = 1000;
    const run = await startRun(script, {
      startupDelayMs: 200,
      intervalMs: 200,
      minAgeMs,
      graceMs: 2000,
      killAfterMs: 500,
    });
    const found = await recorded(run, [
      'child',
      'grandchild-parent',
      'grandchild',
      'orphan',
      'stubborn',
      'orphan-parent',
      'orphan-child',
    ]);
    const get = (label: string) => found.get(label) as Recorded;
    const orphans = ['orphan', 'stubborn', 'orphan-parent', 'orphan-child'].map(get);
    const spared = ['child', 'grandchild-parent', 'grandchild'].map(get);
    for (const label of ['orphan', 'stubborn', 'orphan-parent']) {
      expect(statIn(run, get(label).id.pid)?.ppid, `premise broken: ${label} is not the init's child`).toBe(
        run.initPid,
      );
    }
    // Younger than min-age: left running by every tick so far (one runs every 200 ms).
    const oldest = Math.min(...orphans.map((o) => o.id.startTime));
    await until('the orphans to be 600 ms old', 5_000, () => (ticksNow() - oldest >= 60 ? true : undefined));
    for (const o of orphans) {
      if (ticksNow() - o.id.startTime < (minAgeMs / 1000) * TICKS_PER_SECOND - 10) {
        expect(aliveIn(run, o.id), `${o.label} was stopped before it was ${minAgeMs} ms old`).toBe(true);
      }
    }
    // Older than min-age: the next tick stops each, TERM first (KILL after the 2 s grace for one that ignores it).
    await until(
      'every orphan (and the orphan-child) to be stopped',
      10_000,
      () => (orphans.every((o) => !aliveIn(run, o.id)) ? true : undefined),
      () => orphans.map((o) => `${o.label} pid ${o.id.pid}: ${stateIn(run, o.id.pid)}`).join(', '),
    );
    expect(readFileSync(run.pidfile, 'latin1'), 'the TERM-trapping orphan did not get TERM').toContain(
      'got-TERM-orphan',
    );
    // Two more ticks: the command and its children are still spared.
    await sleep(500);
    for (const s of spared)
      expect(aliveIn(run, s.id), `the command's ${s.label} (pid ${s.id.pid}) was stopped`).toBe(true);

    process.kill(run.init.pid, 'SIGTERM');
    const r = await result(run);
    expect(r.status).toBe(143);
    // What the ticks said: each orphan stopped, the stubborn one by KILL after the grace.
    const stopped = r.ticks.flatMap(
      (t: { report: { stopped: unknown[] } | null }) => t.report?.stopped ?? [],
    );
    const endedBy = (label: string) =>
      stopped.find((p: { pid: number }) => p.pid === get(label).id.pid)?.endedBy ?? 'not stopped by a tick';
    expect(
      Object.fromEntries(
        ['orphan', 'stubborn', 'orphan-parent', 'orphan-child', 'child'].map((l) => [l, endedBy(l)]),
      ),
    ).toEqual({
      orphan: 'SIGTERM',
      stubborn: 'SIGKILL',
      'orphan-parent': 'SIGTERM',
      'orphan-child': 'SIGTERM',
      child: 'not stopped by a tick',
    });
    // The command's children, orphaned by its end, were swept by the init before it exited.
    for (const s of spared)
      expect(aliveIn(run, s.id), `${s.label} outlived the init's last sweep`).toBe(false);
    expect(leftIn(run)).toEqual([]);
    expect(await release(run)).toBe(143);
  });

  it('when the command exits, sweeps everything left (TERM → grace → KILL) before the init exits', async () => {
    const script = `
      P=$1
      sh -c 'echo $$ term-logger >> "$0"; trap "echo got-TERM-logger >> $0; exit 0" TERM; while :; do sleep 0.05; done' "$P" &
      sh -c 'echo $$ stubborn >> "$0"; trap "" TERM; exec sleep 30' "$P" &
      ( setsid sh -c 'echo $$ daemon >> "$0"; exec sleep 30' "$P" & )
      sh -c 'echo $$ stopped >> "$0"; kill -STOP $$; exec sleep 30' "$P" &
      while [ ! -e "$P.go" ]; do sleep 0.05; done
      exit 0`;
    const run = await startRun(script, {
      startupDelayMs: 60_000,
      minAgeMs: 60_000,
      graceMs: 2000,
      killAfterMs: 500,
    });
    const found = await recorded(run, ['term-logger', 'stubborn', 'daemon', 'stopped']);
    expect(
      stateIn(run, found.get('stopped')?.id.pid ?? 0),
      'premise broken: the stopped child is not stopped',
    ).toBe('T');
    writeFileSync(`${run.pidfile}.go`, ''); // the command exits now
    const r = await result(run);
    // The init is still running (it waits for the release): what is gone, it ended.
    expect(isAlive(run.init), 'premise broken: the init exited before the test looked').toBe(true);
    for (const p of found.values())
      expect(aliveIn(run, p.id), `${p.label} (pid ${p.id.pid}) outlived the command's end`).toBe(false);
    expect(leftIn(run), 'left under the init (zombies included)').toEqual([]);
    expect(readFileSync(run.pidfile, 'latin1'), 'the TERM-trapping child did not get TERM').toContain(
      'got-TERM-logger',
    );
    const endedBy = Object.fromEntries(
      [...found.values()].map((p) => [
        p.label,
        r.finalSweep.stopped.find((s: { pid: number }) => s.pid === p.id.pid)?.endedBy ?? 'not in the report',
      ]),
    );
    expect(endedBy).toEqual({
      'term-logger': 'SIGTERM',
      stubborn: 'SIGKILL',
      daemon: 'SIGTERM',
      stopped: 'SIGTERM',
    });
    expect(r.finalSweep.ok).toBe(true);
    expect(r.status).toBe(0);
    expect(await release(run)).toBe(0);
  });

  it("not PID 1: becomes a subreaper, so the command's orphans are reparented to it, reaped, and swept at its end", async () => {
    const script = `
      ( sh -c 'echo $$ orphan >> "$0"; exec sleep 2' "$1" & )
      ( sh -c 'echo $$ daemon >> "$0"; exec sleep 30' "$1" & )
      while [ ! -e "$1.go" ]; do sleep 0.05; done`;
    const run = await startRun(
      script,
      { startupDelayMs: 60_000, minAgeMs: 60_000, graceMs: 2000, killAfterMs: 500 },
      false,
    );
    const found = await recorded(run, ['orphan', 'daemon']);
    for (const p of found.values()) {
      expect(statIn(run, p.id.pid)?.ppid, `${p.label} was not reparented to the init (no subreaper)`).toBe(
        run.initPid,
      );
    }
    const orphan = found.get('orphan') as Recorded;
    await until(
      'the orphan to be reaped',
      5_000,
      () => (statIn(run, orphan.id.pid)?.startTime !== orphan.id.startTime ? true : undefined),
      () => `(state ${stateIn(run, orphan.id.pid)})`,
    );
    writeFileSync(`${run.pidfile}.go`, '');
    const r = await result(run);
    expect(r.subreaper).toEqual({ mode: 'subreaper' });
    expect(
      aliveIn(run, (found.get('daemon') as Recorded).id),
      "the daemon outlived the init's last sweep",
    ).toBe(false);
    expect(leftIn(run)).toEqual([]);
    expect(await release(run)).toBe(0);
  });

  it('exits 127 when the command cannot be found, with nothing started', async () => {
    const dir = testDir('tether-guard-init-');
    try {
      const child = spawn(
        'unshare',
        [
          '--pid',
          '--fork',
          '--mount-proc',
          process.execPath,
          RUNNER,
          join(dir, 'result.json'),
          '--',
          '/nonexistent/cmd',
        ],
        { stdio: 'ignore' },
      );
      writeFileSync(join(dir, 'result.json.release'), '');
      const code = await new Promise((resolve) => child.on('exit', resolve));
      const r = JSON.parse(readFileSync(join(dir, 'result.json'), 'latin1'));
      expect({ code, status: r.status, spawnError: r.spawnError }).toEqual({
        code: 127,
        status: 127,
        spawnError: 'ENOENT',
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
