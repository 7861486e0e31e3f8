// The helper's word on its subtree, and what the sweep makes of it (docs/sweep.md, "Phases";
// docs/containment.md, "Proofs"): a kept process is left out of the answer by identity, and a
// helper that cannot answer — stopped by a fork-and-exit loop it adopted — is never read as "no
// child". Real helpers, real processes; ground truth from /proc and a cgroup of the test's own.
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { helperPath, startHelper } from '../../src/containment/helper.js';
import { type Identity, session } from '../../src/index.js';
import { BUILD } from '../support/paths.js';
import { identityOf, isAlive, stateOf } from '../support/proc.js';
import { makeTestCgroup, noTestCgroup } from '../support/test-cgroup.js';
import { readPidfile, tempDir, waitFor } from '../support/zoo.js';

const started: Identity[] = [];
afterEach(() => {
  for (const id of started.splice(0)) {
    if (!isAlive(id)) continue;
    process.kill(id.pid, 'SIGCONT');
    process.kill(id.pid, 'SIGKILL');
  }
});

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `pid` (up to 5 s) until the kernel reports it gone: exited and reaped. */
async function untilGone(pid: number): Promise<void> {
  await waitFor(`pid ${pid} to be reaped`, () => stateOf(pid) === 'gone', 5000);
}

describe('the helper leaves kept processes out of its answer, by identity', () => {
  it('answers "child" while an unkept child runs, "none" once only the kept one is left, and a wrong start time is not the kept one', async () => {
    const path = helperPath();
    if (!('path' in path)) throw new Error(`premise broken: no helper (${path.reason})`);
    const dir = tempDir();
    // Two orphans, each its pid and start time in a file; the payload exits: both are the
    // helper's children (a subreaper).
    const orphan = (name: string) =>
      `sleep 60 & echo "$! $(cut -d' ' -f22 /proc/$!/stat)" > ${join(dir, name)};`;
    const helper = startHelper(path.path, {
      command: 'sh',
      args: ['-c', `${orphan('kept')} ${orphan('other')} exit 0`],
      env: process.env,
      stdio: 'ignore',
      graceMs: 300,
      killAfterMs: 1000,
      pidns: false,
      procRoot: '/proc',
    });
    started.push(helper.helper);
    const exited = new Promise((r) => helper.child.once('exit', r));
    try {
      expect(await helper.end).toEqual({ kind: 'exit', exitCode: 0, signal: null });
      const read = (name: string): Identity => {
        const [pid, startTime] = readFileSync(join(dir, name), 'latin1').trim().split(' ').map(Number);
        const id = identityOf(pid ?? 0);
        if (!id || id.startTime !== startTime) throw new Error(`premise broken: the ${name} orphan is gone`);
        started.push(id);
        return id;
      };
      const kept = read('kept');
      const other = read('other');
      const ask = (ids: Identity[]) => helper.ask(ids, 2000);

      expect(ask([]), 'two children, nothing kept').toBe('child');
      expect(
        ask([{ pid: kept.pid, startTime: kept.startTime + 1 }]),
        'a wrong start time keeps nothing',
      ).toBe('child');
      expect(ask([kept]), `the unkept orphan ${other.pid} still runs`).toBe('child');
      process.kill(other.pid, 'SIGKILL');
      await untilGone(other.pid);
      expect(isAlive(kept), 'premise broken: the kept orphan ended').toBe(true);
      expect(ask([kept]), `only the kept orphan ${kept.pid} is left`).toBe('none');
      expect(ask([]), 'the helper remembers what is kept').toBe('none');
      process.kill(kept.pid, 'SIGKILL');
      await untilGone(kept.pid);
      expect(ask([]), 'no child at all').toBe('none');
    } finally {
      helper.release();
      await exited;
    }
  });
});

describe('a helper that never answers whether it has a child', () => {
  it('is never read as "no child": the sweep runs its phases and ends UNSETTLED, naming it, not on two empty scans', async () => {
    // A helper file that speaks the start of the protocol (its payload a `sleep` of its own,
    // its child) and then reads every control line without answering one, until EOF.
    const dir = tempDir();
    const mute = join(dir, 'mute-helper.sh');
    writeFileSync(
      mute,
      [
        '#!/bin/bash',
        `echo "helper $$ $(cut -d' ' -f22 /proc/$$/stat)" >&3`,
        'sleep 0.2 & p=$!',
        `echo "started $p $(cut -d' ' -f22 /proc/$p/stat)" >&3`,
        'read -r go <&4',
        'wait $p; echo "exit code 0" >&3',
        'while read -r line <&4; do :; done',
        '',
      ].join('\n'),
    );
    chmodSync(mute, 0o755);
    const before = process.env.TETHER_HELPER;
    process.env.TETHER_HELPER = mute;
    try {
      const s = session({ containment: ['env-tag', 'subreaper'], graceMs: 300, killAfterMs: 300 });
      const proc = s.spawn('true', [], { stdio: 'ignore' });
      const helper = identityOf(proc.child.pid ?? 0);
      if (!helper) throw new Error('premise broken: the helper file did not start');
      started.push(helper);
      expect((await proc.exited).exitCode).toBe(0);
      const report = await s.end();
      const said = JSON.stringify({ proof: report.proof, phases: report.phases, warnings: report.warnings });
      expect(report.layers, said).toContain('subreaper');
      expect(report.proof, said).toBe('none');
      expect(report.complete, said).toBe(false);
      expect(report.ok, said).toBe(false);
      const unsettled = report.warnings.filter((w) => w.code === 'UNSETTLED').map((w) => w.message);
      expect(unsettled, said).toEqual([
        expect.stringContaining(`the helper (pid ${helper.pid}) did not answer`),
      ]);
      expect(
        report.phases.map((p) => p.endedBy),
        said,
      ).toEqual(['budget', 'budget']);
      await waitFor('the helper file to exit at its release', () => !isAlive(helper), 3000);
    } finally {
      if (before === undefined) delete process.env.TETHER_HELPER;
      else process.env.TETHER_HELPER = before;
    }
  });
});

describe('a helper stopped when its session releases it', () => {
  it('is continued (SIGCONT), exits, and is named in the report (HELPER_STOPPED), never left stopped', async () => {
    let helper: Identity | undefined;
    let stops = 0;
    // The sweep's last round hands on its progress before it decides: the helper is stopped
    // then, after its answer, so that it is stopped when the session releases it.
    const s = session({
      containment: ['env-tag', 'subreaper'],
      graceMs: 300,
      killAfterMs: 1000,
      onProgress: () => {
        if (!helper || !isAlive(helper)) return;
        process.kill(helper.pid, 'SIGSTOP');
        stops += 1;
      },
    });
    // An orphan keeps the helper to the end (a helper with nothing left is released at once).
    const proc = s.spawn('sh', ['-c', 'sleep 30 & exit 0'], { stdio: 'ignore' });
    helper = identityOf(proc.child.pid ?? 0);
    if (!helper) throw new Error('premise broken: no helper process');
    started.push(helper);
    expect((await proc.exited).exitCode).toBe(0);
    const report = await s.end();
    const h = helper;
    expect(stops, 'premise broken: the helper was never stopped').toBeGreaterThan(0);
    await waitFor(
      `the helper ${h.pid} to exit after its release (state ${stateOf(h.pid)})`,
      () => !isAlive(h),
      3000,
    );
    const named = report.warnings.filter((w) => w.code === 'HELPER_STOPPED');
    expect(
      named.map((w) => w.message),
      JSON.stringify(report.warnings),
    ).toEqual([expect.stringMatching(new RegExp(`the helper \\(pid ${h.pid}\\) was stopped .*SIGCONT`))]);
    expect(report.ok, JSON.stringify(report)).toBe(true);
  });
});

describe('a fork-and-exit loop that stops its helper (SIGSTOP to its parent, the helper, at every generation)', () => {
  it.skipIf(noTestCgroup !== undefined)(
    `never gets a proven end while it runs, and its helper is not left stopped${noTestCgroup ? ` (skipped: ${noTestCgroup})` : ''}`,
    async () => {
      // The loop runs in a cgroup of the test's (its ground truth and cleanup); the session
      // has no cgroup layer: only the helper can say whether it still runs.
      const cg = makeTestCgroup();
      const pidfile = join(tempDir(), 'pids');
      let helper: Identity | undefined;
      try {
        const s = session({ containment: ['env-tag', 'subreaper'], graceMs: 300, killAfterMs: 1000 });
        const loop = `(echo 0 > ${cg.dir}/cgroup.procs && exec ${BUILD}/zoo-stop-helper ${pidfile} 500 30000)`;
        const proc = s.spawn('sh', ['-c', `${loop} </dev/null >/dev/null 2>&1 & exit 0`], {
          stdio: 'ignore',
        });
        helper = identityOf(proc.child.pid ?? 0);
        if (!helper) throw new Error('premise broken: no helper process');
        started.push(helper);
        expect((await proc.exited).exitCode).toBe(0);
        // Premise: the loop runs, and has stopped its helper (state T) at least once.
        await waitFor('the loop to hop', () => readPidfile(pidfile).length > 20, 10_000);
        const h = helper;
        await waitFor('the helper to be stopped by the loop', () => stateOf(h.pid) === 'T', 10_000);
        const report = await s.end();
        const running = cg.populated();
        const after = readPidfile(pidfile).length;
        await pause(100);
        const hopping = readPidfile(pidfile).length > after;
        const said = JSON.stringify({
          ok: report.ok,
          complete: report.complete,
          proof: report.proof,
          warnings: report.warnings,
        });
        if (running) {
          // Ground truth: the loop outlived the sweep. The report must not claim an end.
          expect(report.proof, `the loop runs on (hopping: ${hopping}), yet: ${said}`).toBe('none');
          expect(report.ok, said).toBe(false);
          expect(report.complete, said).toBe(false);
          expect(
            report.warnings.map((w) => w.code),
            said,
          ).toContain('UNSETTLED');
        } else {
          // The KILL phase ended it: then the end may be proven, by the kernel's word.
          expect(report.proof, said).not.toBe('two-empty-scans');
        }
        // The helper was released: continued if it was stopped, and gone — never left stopped.
        await waitFor(
          `the helper ${h.pid} to exit after its release (state ${stateOf(h.pid)})`,
          () => !isAlive(h),
          3000,
        );
        for (const w of report.warnings.filter((w) => w.code === 'HELPER_STOPPED'))
          expect(w.message).toContain(`pid ${h.pid}`);
      } finally {
        await cg.end();
      }
      expect(cg.populated(), `the test cgroup ${cg.dir} still holds the loop`).toBe(false);
    },
    30_000,
  );
});
