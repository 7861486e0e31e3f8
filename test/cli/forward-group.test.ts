// A signal forwarded by `tether run` reaches what the command started in its process group, as
// timeout(1)'s does (docs/cli.md#signals): `kill -INT <tether>` over `sh -c 'sleep …'` ends with
// 130 at once, where it took -k and gave 137 before (sh waits for its sleep, which never got the
// SIGINT). Never a bare group kill: the command keeps tether's group, which here is the test
// worker's too, and a decoy the test started in that group must not be signalled.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readFileSafe, tether, waitFor } from '../support/cli.js';
import { cmdlineOf, identityOf, isAlive, type ProcessId, pids, readStat } from '../support/proc.js';
import { testDir } from '../support/temp.js';

const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

const GRACE_S = 5; // tether run's default -k

// The process whose argv is exactly `argv`, once it runs (undefined after 10 s).
async function findByArgv(argv: string[]): Promise<ProcessId | undefined> {
  const want = argv.join(' ');
  let found: ProcessId | undefined;
  await waitFor(() => {
    const pid = pids().find((p) => cmdlineOf(p) === want);
    found = pid === undefined ? undefined : identityOf(pid);
    return found !== undefined;
  });
  return found;
}

describe('a signal forwarded to tether run', () => {
  it('reaches the sleep sh -c waits for: 130 at once, and nothing outside the session', async () => {
    const dir = testDir('tether-group-');
    const decoyLog = join(dir, 'decoy');
    // The decoy: in the test worker's process group, which tether and its command share.
    const decoy = spawn('sh', [
      '-c',
      `trap 'echo INT >> ${decoyLog}' INT; echo ready >> ${decoyLog}; while [ ! -e ${dir}/stop ]; do sleep 0.05; done`,
    ]);
    const decoyId = decoy.pid === undefined ? undefined : identityOf(decoy.pid);
    if (!decoyId) throw new Error('premise broken: the decoy did not start');
    started.push(decoyId);
    if (!(await waitFor(() => readFileSafe(decoyLog).includes('ready'))))
      throw new Error('premise broken: the decoy never wrote ready');

    const sleep = `30.${randomBytes(3).readUIntBE(0, 3)}`;
    let pid = 0;
    const running = tether(['run', '--no-ledger', '--', 'sh', '-c', `sleep ${sleep}`], {
      onStart: (p) => (pid = p),
    });
    const leftover = await findByArgv(['sleep', sleep]);
    if (!leftover) throw new Error(`premise broken: sleep ${sleep} never ran`);
    started.push(leftover);
    const parent = readStat(readStat(leftover.pid)?.ppid ?? 0);
    expect(parent?.comm, 'premise: the sleep is a child of sh, not the command itself').toBe('sh');
    expect(readStat(leftover.pid)?.fields[5], "premise: the sleep is in the decoy's process group").toBe(
      readStat(decoyId.pid)?.fields[5],
    );

    const sentAt = performance.now();
    process.kill(pid, 'SIGINT');
    const ran = await running;
    const tookS = (performance.now() - sentAt) / 1000;

    expect(ran.code, ran.stderr).toBe(130);
    expect(
      tookS,
      `took ${tookS.toFixed(1)} s after SIGINT: the group's signal ends it at once, -k would be ${GRACE_S} s\n${ran.stderr}`,
    ).toBeLessThan(GRACE_S / 2);
    expect(
      isAlive(leftover),
      `sleep ${sleep} (pid ${leftover.pid}, start ${leftover.startTime}, found by its argv) survived`,
    ).toBe(false);
    expect(readFileSafe(decoyLog), 'the decoy outside the session got the SIGINT').not.toContain('INT');
    expect(isAlive(decoyId), `the decoy (pid ${decoyId.pid}) outside the session did not survive`).toBe(true);
    writeFileSync(join(dir, 'stop'), '');
    expect(await waitFor(() => !isAlive(decoyId)), 'the decoy did not stop when asked').toBe(true);
  });

  for (const containment of ['env-tag', 'auto'])
    it(`reaches an orphan of the command in its group (--containment ${containment}) while the command goes on`, async () => {
      const dir = testDir('tether-group-');
      const log = join(dir, 'log');
      const orphan = `30.${randomBytes(3).readUIntBE(0, 3)}`;
      // The command handles TERM and runs on; its subshell leaves a sleep orphaned (reparented to
      // the helper, or — direct, env-tag only — out of its tree, known by the tag it carries).
      const script = `trap 'echo TERM >> ${log}' TERM; (sleep ${orphan} >/dev/null 2>&1 &); echo ready >> ${log}
while [ ! -e ${dir}/stop ]; do sleep 0.05; done`;
      let pid = 0;
      const running = tether(['run', '--no-ledger', '--containment', containment, '--', 'sh', '-c', script], {
        onStart: (p) => (pid = p),
      });
      const leftover = await findByArgv(['sleep', orphan]);
      if (!leftover) throw new Error(`premise broken: sleep ${orphan} never ran`);
      started.push(leftover);
      if (!(await waitFor(() => readFileSafe(log).includes('ready'))))
        throw new Error(`premise broken: the command never wrote ready (${readFileSafe(log)})`);

      process.kill(pid, 'SIGTERM');
      const gone = await waitFor(() => !isAlive(leftover), (GRACE_S / 2) * 1000);
      // The shell runs its trap once its foreground `sleep 0.05` has ended: that can be after the
      // orphan is gone (seen under load), so the trap's line is waited for, not read at once.
      const commandGotIt = await waitFor(() => readFileSafe(log).includes('TERM'), (GRACE_S / 2) * 1000);
      writeFileSync(join(dir, 'stop'), '');
      const ran = await running;
      expect(commandGotIt, `premise: the command's trap never ran (${readFileSafe(log)})`).toBe(true);
      expect(
        gone,
        `the orphan sleep ${orphan} (pid ${leftover.pid}, found by its argv) outlived ${GRACE_S / 2} s after the forwarded SIGTERM while the command ran on\n${ran.stderr}`,
      ).toBe(true);
      expect(ran.code, ran.stderr).toBe(0); // the command's own status: it handled the signal
    });

  it('never reaches a process --keep keeps, though it is in the group', async () => {
    const dir = testDir('tether-group-');
    const log = join(dir, 'log');
    const kept = `31.${randomBytes(3).readUIntBE(0, 3)}`;
    const script = `trap 'echo TERM >> ${log}' TERM; sleep ${kept} >/dev/null 2>&1 & echo ready >> ${log}
while [ ! -e ${dir}/stop ]; do sleep 0.05; done`;
    let pid = 0;
    const running = tether(['run', '--no-ledger', '--keep', `sleep ${kept}=10m`, '--', 'sh', '-c', script], {
      onStart: (p) => (pid = p),
    });
    const service = await findByArgv(['sleep', kept]);
    if (!service) throw new Error(`premise broken: sleep ${kept} never ran`);
    started.push(service);
    if (!(await waitFor(() => readFileSafe(log).includes('ready'))))
      throw new Error(`premise broken: the command never wrote ready (${readFileSafe(log)})`);
    expect(readStat(service.pid)?.fields[5], "premise: the kept sleep is in tether's group").toBe(
      readStat(pid)?.fields[5],
    );

    process.kill(pid, 'SIGTERM');
    expect(await waitFor(() => readFileSafe(log).includes('TERM')), "the command's trap never ran").toBe(
      true,
    );
    writeFileSync(join(dir, 'stop'), '');
    const ran = await running;
    expect(ran.code, ran.stderr).toBe(0);
    expect(
      isAlive(service),
      `the kept sleep ${kept} (pid ${service.pid}) got the forwarded SIGTERM\n${ran.stderr}`,
    ).toBe(true);
  });

  it("the timeout's signal reaches it too: --timeout 1s -s INT over sh -c 'sleep …' is 124 at once", async () => {
    const sleep = `30.${randomBytes(3).readUIntBE(0, 3)}`;
    const running = tether([
      'run',
      '--no-ledger',
      '--timeout',
      '1s',
      '-s',
      'INT',
      '--',
      'sh',
      '-c',
      `sleep ${sleep}`,
    ]);
    const leftover = await findByArgv(['sleep', sleep]);
    if (!leftover) throw new Error(`premise broken: sleep ${sleep} never ran`);
    started.push(leftover);
    const began = performance.now();
    const ran = await running;
    const tookS = (performance.now() - began) / 1000;
    // sh ends when its sleep does (by the SIGINT it got too): a timeout whose signal reached it.
    expect(ran.code, ran.stderr).toBe(124);
    expect(
      tookS,
      `took ${tookS.toFixed(1)} s after the sleep ran: 1 s and the group's signal, -k would add ${GRACE_S} s\n${ran.stderr}`,
    ).toBeLessThan(1 + GRACE_S / 2);
    expect(isAlive(leftover), `sleep ${sleep} (pid ${leftover.pid}, found by its argv) survived`).toBe(false);
  });
});
