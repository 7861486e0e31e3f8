// The KILL phase's last look in the container's sweeps — the sweep program (programs/sweep.sh)
// under each shell, the helper's (native/helper-sweep.c) — both `settle_last_look`, as
// test/sweep/last-look for the local one. A process that takes the tag from outside the session
// (an untagged loop in the container that starts a tagged sleep again as soon as the last one
// ends) keeps one appearing in every round, and the last look KILLs one a moment before the
// answer. It is watched die: never named a survivor while it is already gone,
// and the answer says the session's processes were still appearing (`UNSETTLED`). Ground truth:
// each survivor's pid + start time, looked up from the host. The helper and the program that
// named them survivors (`end PID START survived-kill`, `complete 1`) failed every run.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, type SessionTag, type SweepReport, sandbox } from '../../src/index.js';
import { pushHelper } from '../../src/sandbox/helper-push.js';
import { sweepUnder } from '../../src/sandbox/sweep.js';
import { isAlive } from '../support/proc.js';
import { missing } from '../support/tools.js';
import {
  type Container,
  hostPidOf,
  privateTmp,
  SHELLS,
  sleep,
  startContainer,
  taggedOnHost,
} from './container.js';

const SWEEP = { graceMs: 150, killAfterMs: 300, intervalMs: 40 };

let box: Container;
beforeAll(async () => {
  box = await startContainer(240);
  privateTmp(box, 'tether-last-look'); // the helper it pushes stays in the container's /tmp
});
afterAll(async () => {
  await box?.stop();
});

// Starts, in the container and without the tag itself, loops that each run `env TAG=1 sleep
// 1000` again as soon as the last one ends: one always runs, a new one after each the sweep ends.
async function startSpawner(tag: string): Promise<ChildProcess> {
  // Three such loops: on a loaded machine one alone can take longer than two scans to start
  // its next sleep (the phase then ends on two empty scans, before its last look).
  const loop = `for i in 1 2 3; do (while :; do env ${tag}=1 sleep 1000 </dev/null >/dev/null 2>&1; done) & done; wait`;
  const spawner = spawn(box.prefix[0] as string, [...box.prefix.slice(1), 'sh', '-c', loop], {
    stdio: 'ignore',
  });
  for (let i = 0; i < 500 && taggedOnHost(tag).length < 1; i++) await sleep(10);
  if (taggedOnHost(tag).length < 1) throw new Error('premise broken: the spawner started no tagged sleep');
  return spawner;
}

// The spawner KILLed (nsenter, and the loop under it in the container by its unique command
// line, in the container's PID namespace only), then what it left swept by the tag.
async function stopSpawner(spawner: ChildProcess, tag: string): Promise<void> {
  spawner.kill('SIGKILL');
  const [cmd0, ...rest] = box.prefix;
  execFileSync(String(cmd0), [...rest, 'pkill', '-KILL', '-f', `do env ${tag}=1 sleep 1000`], {
    stdio: 'ignore',
  });
  if (taggedOnHost(tag).length) await sandbox.sweep(box.channel, tag, { graceMs: 100, killAfterMs: 1000 });
}

function check(report: SweepReport): void {
  const said = JSON.stringify({
    ok: report.ok,
    complete: report.complete,
    survivors: report.survivors.map((s) => `${s.pid}:${s.startTime} ${s.reason}`),
    warnings: report.warnings.map((w) => w.code),
    phases: report.phases,
  });
  expect(report.stopped.length, `premise broken: the sweep stopped nothing: ${said}`).toBeGreaterThan(0);
  expect(report.phases.at(-1)?.signal, `premise broken: no KILL phase ran: ${said}`).toBe('SIGKILL');
  const ended = report.survivors.filter((s) => {
    const host = hostPidOf(box.init, s.pid);
    return host === undefined || !isAlive({ pid: host, startTime: s.startTime });
  });
  expect(
    ended.map((s) => `${s.pid}:${s.startTime}`),
    `survivors that had ended: ${said}`,
  ).toEqual([]);
  expect([report.ok, report.complete], said).toEqual([false, false]);
  expect(
    report.warnings.map((w) => w.code),
    said,
  ).toContain('UNSETTLED');
}

// Sweeps (`sweepOf`) a session whose tag the spawner keeps giving, until one sweep reaches its
// KILL phase's last look (a loaded machine's loop can be slower than two scans: the phase then
// ends on two empty scans first; up to five sweeps), and checks its answer.
async function lastLook(sweepOf: (tag: SessionTag) => Promise<SweepReport>): Promise<void> {
  const ends: string[] = [];
  for (let attempt = 0; attempt < 5; attempt++) {
    const tag = createTag();
    const spawner = await startSpawner(tag.name);
    let report: SweepReport;
    try {
      report = await sweepOf(tag);
    } finally {
      await stopSpawner(spawner, tag.name);
    }
    expect(taggedOnHost(tag.name)).toEqual([]);
    const last = report.phases.at(-1);
    ends.push(`${last?.signal} ${last?.endedBy}`);
    if (last?.signal !== 'SIGKILL' || last.endedBy !== 'budget') continue;
    check(report);
    return;
  }
  throw new Error(`premise broken: no sweep of 5 reached its KILL phase's last look: ${ends.join(', ')}`);
}

describe("the container sweeps' last look", () => {
  for (const [name, shell] of SHELLS) {
    const noShell = missing(shell[0] as string);
    it.skipIf(noShell !== '')(
      `the sweep program under ${name}: names no process a survivor that its KILL ended${noShell ? ` (skipped: ${noShell})` : ''}`,
      () => lastLook((tag) => sandbox.sweep(box.channel, tag, { ...SWEEP, shell })),
      120_000,
    );
  }

  it("the helper's sweep: names no process a survivor that its KILL ended", async () => {
    // The helper answers the sweep (sweepUnder with its path), given no helper's word to end a
    // phase on: the KILL phase runs to its budget and its last look, as the program's does.
    const pushed = await pushHelper(box.channel);
    if (!('path' in pushed))
      throw new Error(`premise broken: no helper in the container: ${JSON.stringify(pushed)}`);
    await lastLook((tag) => sweepUnder(box.channel, tag, SWEEP, { path: pushed.path }));
  }, 120_000);
});
