// The helper's errnos, produced for real: its poll(2) refused (RLIMIT_NOFILE lowered below its
// fds with prlimit(1)), its /proc walk refused (no fd left), its cgroup.kill refused (EISDIR).
// The test is the helper's supervisor itself where it must watch the wire (fds 3-5, see the
// table in docs/containment.md); ground truth is /proc.
import { type ChildProcess, execFileSync, spawn as spawnChild } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { type Identity, session } from '../../src/index.js';
import { childrenOf, cmdlineOf, identityOf, isAlive } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { HELPER_EXE } from './support.js';

const started: Identity[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function readText(path: string): string {
  try {
    return readFileSync(path, 'latin1');
  } catch {
    return '';
  }
}

/** Lowers `pid`'s fd limit (soft and hard) to `n`: every new fd then fails with EMFILE, and a poll(2) of more than n fds with EINVAL. */
function limitFds(pid: number, n: number): void {
  execFileSync('prlimit', [`--pid=${pid}`, `--nofile=${n}:${n}`]);
}

/** Resolves once `pred` holds, polled every 20 ms; rejects after `ms` naming `what`. */
async function until(pred: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!pred()) {
    if (performance.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await delay(20);
  }
}

/** Closes the control pipe (the supervisor "died"), waits for the helper to end, and checks the payload ended with it. */
async function endSupervisor(raw: RawHelper): Promise<void> {
  raw.control.end(); // EOF
  await raw.closed;
  expect(
    isAlive(raw.payload),
    `the payload ${raw.payload.pid} outlived its helper's dead man's switch (the helper said: ${raw.lines.join(' | ')})`,
  ).toBe(false);
}

/** The helper started by hand: its status lines as they come, its control pipe, its payload. */
interface RawHelper {
  child: ChildProcess;
  lines: string[];
  control: Writable;
  payload: Identity;
  closed: Promise<void>;
}

/**
 * Lowers `pid`'s fd limit so that exactly `free` fd numbers are free below it (0 or 1 here): the
 * limit bounds fd numbers, so it is set `free` above the lowest number not in use.
 */
function leaveFdsFree(pid: number, free: number): void {
  const open = new Set(readdirSync(`/proc/${pid}/fd`).map(Number));
  let hole = 0;
  while (open.has(hole)) hole++;
  limitFds(pid, hole + free);
}

/**
 * `beforeGo`: runs once the helper said `started`, before the supervisor's `go`. `running`: the
 * payload's cmdline once it has exec'd (its command's words by default).
 */
async function startRaw(
  args: string[],
  cmd: string[],
  beforeGo?: (helper: number) => void,
  running = cmd.join(' '),
): Promise<RawHelper> {
  const child = spawnChild(HELPER_EXE, [...args, '--', ...cmd], {
    stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
  });
  const self = identityOf(child.pid ?? 0);
  if (self) started.push(self);
  const status = child.stdio[3] as Readable;
  const lines: string[] = [];
  let text = '';
  status.on('data', (chunk: Buffer) => {
    text += chunk.toString('latin1');
    const cut = text.lastIndexOf('\n') + 1;
    lines.push(...text.slice(0, cut).split('\n').filter(Boolean));
    text = text.slice(cut);
  });
  const closed = new Promise<void>((resolve) => status.on('close', () => resolve()));
  await until(
    () => lines.some((l) => l.startsWith('started ')),
    2000,
    `the helper said only ${JSON.stringify(lines)}`,
  );
  const [, pid, start] = (lines.find((l) => l.startsWith('started ')) as string).split(' ');
  const payload = { pid: Number(pid), startTime: Number(start) };
  started.push(payload);
  const control = child.stdio[4] as Writable;
  beforeGo?.(child.pid ?? 0);
  control.write('go\n');
  // The helper opens the payload's pidfd once it has passed the go on: the payload then execs.
  await until(
    () => cmdlineOf(payload.pid) === running,
    2000,
    `the payload ${payload.pid} to exec ${running} after its go`,
  );
  return { child, lines, control, payload, closed };
}

describe("the helper's errnos", () => {
  it('a poll(2) refused (EINVAL: fd limit below the fds it polls) is said, and the helper goes on on a 50 ms tick: HELPER_FAULT', async () => {
    const s = session({ graceMs: 300, killAfterMs: 1000, outputCapMs: 300 });
    const proc = s.spawn('sleep', ['30'], { stdio: 'ignore' });
    const helper = proc.child.pid ?? 0;
    const payload = identityOf(proc.pid ?? 0);
    if (payload) started.push(payload);
    expect(helper, 'premise broken: the command did not run under the helper').not.toBe(proc.pid);
    limitFds(helper, 1);
    // A signal from its supervisor wakes its poll; the next poll(2) of 2 fds is EINVAL.
    proc.child.kill('SIGWINCH');
    await delay(200);
    expect(isAlive(payload as Identity), 'the helper ended its command when its poll failed').toBe(true);
    // Still working: the supervisor's SIGTERM is forwarded, the payload reaped and reported.
    proc.child.kill('SIGTERM');
    const result = await proc;
    const report = await s.end();
    expect(result.signal, JSON.stringify(report.warnings)).toBe('SIGTERM');
    const fault = report.warnings.find((w) => w.code === 'HELPER_FAULT');
    expect(fault?.message, 'the failed poll was not reported').toMatch(/poll failed \(EINVAL\)/);
    expect(report.warnings.map((w) => w.code)).not.toContain('HELPER_LOST');
    await until(
      () => !isAlive(identityOf(helper) ?? { pid: helper, startTime: -1 }),
      2000,
      'the released helper exits',
    );
  });

  it('a dead man’s switch whose pidfd_open of the payload was refused too (no fd left before the go) still ends it, by kill(2) on its unreaped child', async () => {
    // A limit of 0: no fd number at all, not even once the switch has closed what it can spare.
    const raw = await startRaw(['--grace', '300', '--kill-after', '500'], ['sleep', '30'], (helper) =>
      limitFds(helper, 0),
    );
    await endSupervisor(raw);
    expect(raw.lines).toContain('warn scan 24'); // EMFILE
    expect(raw.lines).toContain('exit signal 15');
  });

  it('a dead man’s switch with no fd left for /proc still ends the payload, through the pidfd it holds, and says "warn scan"', async () => {
    const raw = await startRaw(['--grace', '300', '--kill-after', '500'], ['sleep', '30']);
    limitFds(raw.child.pid ?? 0, 0); // 0: see above
    raw.child.kill('SIGWINCH'); // wakes the poll: the next one fails (warn poll), the loop ticks
    await delay(200);
    await endSupervisor(raw);
    expect(raw.lines).toContain('warn poll 22'); // EINVAL
    expect(raw.lines).toContain('warn scan 24'); // EMFILE
    expect(raw.lines).toContain('exit signal 15');
  });

  for (const free of [1, 0]) {
    it(`a dead man’s switch with ${free === 1 ? 'exactly one fd' : 'no fd'} free ends the payload and both its children (one detached): no process skipped for EMFILE`, async () => {
      // Exactly one free fd: the walk's opendir took it, every stat then failed with EMFILE and
      // was skipped, and an "empty" walk signalled nothing — all three ran on. None free: the
      // walk failed, and only the payload was signalled. Now the switch closes the fds it can
      // spare (0-2, its pipes but the status one, its signalfd) and walks one fd at a time.
      const n = 7000 + Math.floor(Math.random() * 900);
      const script = `sleep ${n}.1 & setsid sleep ${n}.2 & exec sleep ${n}.3`;
      const raw = await startRaw(
        ['--grace', '300', '--kill-after', '500'],
        ['sh', '-c', script],
        undefined,
        `sleep ${n}.3`,
      );
      let kids: { pid: number; startTime: number }[] = [];
      await until(
        () => {
          kids = childrenOf(raw.payload.pid)
            .filter((c) => c.state !== 'Z' && /^sleep \d+\.[12]$/.test(cmdlineOf(c.pid)))
            .map((c) => ({ pid: c.pid, startTime: c.startTime }));
          return kids.length === 2;
        },
        2000,
        `the payload's two children to run (it has ${JSON.stringify(childrenOf(raw.payload.pid))})`,
      );
      started.push(...kids);
      leaveFdsFree(raw.child.pid ?? 0, free);
      raw.control.end(); // EOF: the supervisor "died" (as under SIGKILL: the kernel closes its end)
      await raw.closed;
      const left = [raw.payload, ...kids].filter(isAlive).map((p) => `${p.pid} "${cmdlineOf(p.pid)}"`);
      expect(left, `outlived the dead man's switch (the helper said: ${raw.lines.join(' | ')})`).toEqual([]);
      expect(
        raw.lines.filter((l) => l.startsWith('warn ')),
        'the switch said a failure',
      ).toEqual([]);
      expect(raw.lines).toContain('exit signal 15');
    });
  }

  it('a cgroup.kill the kernel refuses (EISDIR) is said once, and the per-process KILLs still end the subtree', async () => {
    // A stand-in for the session's cgroup: cgroup.procs a plain file the child "joins", and
    // cgroup.kill a directory, which open(2) for writing refuses with EISDIR.
    const dir = testDir('tether-fakecg-');
    dirs.push(dir);
    writeFileSync(join(dir, 'cgroup.procs'), '');
    mkdirSync(join(dir, 'cgroup.kill'));
    const raw = await startRaw(
      ['--grace', '200', '--kill-after', '500', '--cgroup', dir],
      ['sh', '-c', 'trap "" TERM; while :; do sleep 0.05; done'],
    );
    // Its trap is set once it has started its first sleep.
    const children = `/proc/${raw.payload.pid}/task/${raw.payload.pid}/children`;
    await until(() => readText(children).trim() !== '', 2000, 'the payload never started its loop');
    raw.control.end(); // EOF: the whole session's switch, cgroup.kill in its KILL phase
    await raw.closed;
    expect(isAlive(raw.payload), `the TERM-ignoring payload ${raw.payload.pid} survived`).toBe(false);
    expect(raw.lines.filter((l) => l.startsWith('warn cgroup-kill '))).toEqual(['warn cgroup-kill 21']);
    expect(raw.lines).toContain('exit signal 9');
  });
});
