// The KILL phase's last look (src/sweep/loop.ts): a member it finds for the first time gets its
// KILL there, a moment before the report. A process that takes the tag from outside the session
// (a spawner the sweep cannot see: it carries no tag and is no member's descendant) keeps one
// appearing in every round. Each one the last look KILLs is watched die through its pidfd: it is
// stopped, never a survivor the report names while it is already gone, and the report says the
// session's processes were still appearing (`UNSETTLED`). Ground truth: each pid + start time.
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, type SweepReport, sweep } from '../../src/index.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { readPidfile, tempDir, waitFor } from '../support/zoo.js';

const spawners: ChildProcess[] = [];

afterEach(() => {
  for (const s of spawners.splice(0)) if (s.exitCode === null && s.signalCode === null) s.kill('SIGKILL');
});

// One session: an untagged spawner that starts a tagged sleep every 5 ms and records each one's
// pid and start time (field 22 of its stat, read by the sleep's own parent while the sleep
// cannot be gone: nothing signals it before the sweep starts), swept; then the spawner KILLed and
// what it left swept too. Resolves to the first sweep's report; throws if anything is left.
async function sweepBeside(): Promise<SweepReport> {
  const tag = createTag();
  const pidfile = join(tempDir(), 'pids');
  const spawner = spawn(
    'sh',
    [
      '-c',
      `while :; do env ${tag.name}=1 sleep 1000 </dev/null >/dev/null 2>&1 & echo "$! $(cut -d' ' -f22 /proc/$!/stat)" >> "$1"; sleep 0.005; done`,
      'sh',
      pidfile,
    ],
    { env: { PATH: process.env.PATH }, stdio: 'ignore' },
  );
  spawners.push(spawner);
  await waitFor('the spawner to start tagged sleeps', () => readPidfile(pidfile).length >= 5);
  const report = await sweep({ tag, graceMs: 100, killAfterMs: 200, intervalMs: 20 });
  spawner.kill('SIGKILL');
  // What it started after the sweep (or recorded late) goes with a sweep of its own.
  const after = await sweep({ tag, graceMs: 100, killAfterMs: 1000 });
  const recorded: ProcessId[] = readPidfile(pidfile).map(({ pid, startTime }) => ({
    pid,
    startTime: startTime ?? -1,
  }));
  const left = recorded.filter(isAlive);
  expect(left, `left after the second sweep: ${JSON.stringify(after.survivors)}`).toEqual([]);
  return report;
}

describe("the KILL phase's last look", () => {
  it('names no process a survivor that its KILL ended, and says the session was still appearing', async () => {
    // The premise, a new sleep in every round: a loaded machine's spawner can be slower than two
    // scans (the KILL phase then ends on two empty scans, before its last look); up to five.
    const ends: string[] = [];
    let report: SweepReport | undefined;
    for (let attempt = 0; attempt < 5 && report === undefined; attempt++) {
      const r = await sweepBeside();
      const last = r.phases.at(-1);
      ends.push(`${last?.signal} ${last?.endedBy}`);
      if (last?.signal === 'SIGKILL' && last.endedBy === 'budget') report = r;
    }
    if (!report)
      throw new Error(`premise broken: no sweep of 5 reached its KILL phase's last look: ${ends.join(', ')}`);
    const said = JSON.stringify({
      ok: report.ok,
      complete: report.complete,
      proof: report.proof,
      survivors: report.survivors.map((s) => `${s.pid}:${s.startTime} ${s.reason} ${s.signals}`),
      warnings: report.warnings.map((w) => w.code),
      phases: report.phases,
    });
    expect(report.stopped.length, `premise broken: the sweep stopped nothing: ${said}`).toBeGreaterThan(0);
    // Each survivor the report names is alive now (its own pid and start time).
    const deadSurvivors = report.survivors.filter((s) => !isAlive({ pid: s.pid, startTime: s.startTime }));
    expect(
      deadSurvivors.map((s) => `${s.pid}:${s.startTime}`),
      `survivors that had ended: ${said}`,
    ).toEqual([]);
    expect(report.ok, said).toBe(false);
    expect(report.complete, said).toBe(false);
    expect(
      report.warnings.map((w) => w.code),
      said,
    ).toContain('UNSETTLED');
  }, 120_000);
});
