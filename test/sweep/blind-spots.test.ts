// A privileged payload is beyond what the layers can prove, and the report says so: a command
// that runs with CAP_SYS_ADMIN (root here) gets PRIVILEGED_BLIND_SPOT in `blindSpots`, while its
// sweep keeps its meaning (complete, a proof that ended it early, a leftover within the layers
// stopped); a command run as another uid without capabilities gets none. The shape it names is
// played for real: a leftover that enters another PID namespace and moves itself into the root
// cgroup outlives the sweep, which proves its end all the same — the honest limit, said. Every
// process the tests start (the leftover, the namespace it enters) is ended by them. A sandbox
// call names what its end line rests on, and its sweep what its answer rests on.
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { END_LINE_BLIND_SPOT, SWEEP_ANSWER_BLIND_SPOT } from '../../src/sandbox/sweep-output.js';
import { PRIVILEGED_BLIND_SPOT, type SweepReport } from '../../src/sweep/report.js';
import { BIN, RECORD, recordedIds, tether } from '../support/cli.js';
import { runNode } from '../support/node.js';
import { childrenOf, cmdlineOf, identityOf, isAlive, type ProcessId, pids } from '../support/proc.js';
import { cleanup, killIfAlive, tempDir } from '../support/zoo.js';

const root = process.geteuid?.() === 0;
const ids: ProcessId[] = [];
const children: ChildProcess[] = [];
afterEach(() => {
  for (const id of ids.splice(0)) killIfAlive(id);
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  cleanup();
});

// The report `tether run --json` prints last on stderr.
function reportOf(stderr: string): SweepReport {
  return JSON.parse(stderr.trim().split('\n').at(-1) ?? '{}') as SweepReport;
}

// A number no other test's process carries in its argv.
const unique = () => `${process.pid % 1000}${Date.now() % 100000}`;

// Waits until `test` holds, up to `ms`.
async function until(test: () => boolean, ms = 5000): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 20)))
    if (test()) return true;
  return test();
}

// The mount point of the cgroup v2 hierarchy, or undefined.
function cgroup2Root(): string | undefined {
  const line = readFileSync('/proc/self/mounts', 'latin1')
    .split('\n')
    .find((l) => l.split(' ')[2] === 'cgroup2');
  return line?.split(' ')[1];
}

describe.skipIf(!root)('a command run with CAP_SYS_ADMIN', () => {
  it('names the privileged blind spot; the proofs still end the sweep and a leftover within the layers is stopped', async () => {
    const tag = unique();
    const r = await tether([
      'run',
      '--no-ledger',
      '--json',
      '--',
      'sh',
      '-c',
      `sleep 32${tag} >/dev/null 2>&1 & ${RECORD}`,
    ]);
    expect(r.code, r.stderr).toBe(0);
    const [left] = recordedIds(r.stdout);
    if (left) ids.push(left);
    const report = reportOf(r.stderr);
    expect(report.blindSpots).toContain(PRIVILEGED_BLIND_SPOT);
    expect(report.complete).toBe(true);
    expect(report.ok).toBe(true);
    expect(['populated-0', 'helper-childless']).toContain(report.proof);
    expect(report.stopped.map((p) => p.pid)).toContain(left?.pid);
    expect(left && isAlive(left), 'the leftover within the layers runs on').toBe(false);
    // Said in words too: never "nothing left running".
    const text = await tether(['run', '--no-ledger', '--', 'sh', '-c', `sleep 33${tag} >/dev/null 2>&1 &`]);
    const line = text.stderr.split('\n').find((l) => l.startsWith('tether: not seen: a privileged'));
    expect(line, text.stderr).toBe(`tether: not seen: ${PRIVILEGED_BLIND_SPOT}`);
    // Printed on every report of a root run: one short line, the details in docs/containment.md.
    expect(line?.length, line).toBeLessThan(200);
    expect(text.stderr).not.toContain('nothing left running');
  });

  it('a leftover that enters another PID namespace and leaves the cgroup runs on unseen: the report says it could', async () => {
    const cgroup = cgroup2Root();
    const tag = unique();
    // The namespace the leftover enters: an init (a sleep) of a new PID namespace this test owns.
    const ns = spawn('unshare', ['--pid', '--fork', 'sleep', `600.${tag}`], { stdio: 'ignore' });
    children.push(ns);
    let init: ProcessId | undefined;
    await until(() => {
      const child = ns.pid === undefined ? undefined : childrenOf(ns.pid)[0];
      init = child && identityOf(child.pid);
      return init !== undefined && cmdlineOf(init.pid) === `sleep 600.${tag}`;
    });
    if (!init) throw new Error('premise broken: the PID namespace’s init did not start');
    ids.push(init);
    // Inside it: into the root cgroup (when there is one), then an env-cleared setsid sleep. The
    // shell waits (a FIFO opened and closed past `env -i`) until its fork, which still carries
    // the tag, has cleared its environment, so that the sweep cannot meet it before.
    const fifo = join(tempDir(), 'past-env');
    await new Promise((resolve) => spawn('mkfifo', [fifo]).on('close', resolve));
    const leave = cgroup ? `echo 0 > ${cgroup}/cgroup.procs; ` : '';
    const start = `exec 3>${fifo}; exec 3>&-; exec sleep 3202.${tag}`;
    const inner = `${leave}env -i setsid sh -c '${start}' >/dev/null 2>&1 & read x < ${fifo}; true`;
    const r = await tether([
      'run',
      '--no-ledger',
      '--json',
      '--',
      'nsenter',
      '-t',
      String(init.pid),
      '-p',
      '--',
      'sh',
      '-c',
      inner,
    ]);
    const found = pids().find((pid) => cmdlineOf(pid) === `sleep 3202.${tag}`);
    const leftover = found === undefined ? undefined : identityOf(found);
    if (leftover) ids.push(leftover);
    expect(r.code, r.stderr).toBe(0);
    const report = reportOf(r.stderr);
    expect(report.blindSpots).toContain(PRIVILEGED_BLIND_SPOT);
    // The sweep proved its end by what its layers see, and the leftover runs on: that is what
    // the blind spot says.
    expect(report.complete).toBe(true);
    expect(report.proof).not.toBe('none');
    expect(leftover && isAlive(leftover), 'premise: the leftover left the layers’ reach').toBe(true);
  });
});

describe('a command run as another uid without capabilities', () => {
  it.skipIf(!root)('names no privileged blind spot (tether run as uid 65534)', async () => {
    const run = runNode([BIN, 'run', '--no-ledger', '--json', '--', 'true'], { uid: 65534 });
    const { code, stderr } = await run.done;
    expect(code, stderr).toBe(0);
    const report = reportOf(stderr);
    expect(report.complete, stderr).toBe(true);
    expect(report.blindSpots ?? []).not.toContain(PRIVILEGED_BLIND_SPOT);
  });
});

describe('a sandbox call', () => {
  it('names what its end line and its sweep’s answer rest on (a local channel: `env`)', async () => {
    const channel = sandbox.commandChannel(['env']);
    const r = await sandbox.exec(channel, ['echo', 'hi']);
    expect(r.ok).toBe(true);
    expect(r.stdout).toBe('hi\n');
    expect(r.blindSpots).toEqual([END_LINE_BLIND_SPOT]);
    const report = await sandbox.sweep(channel, createTag(), { graceMs: 500, killAfterMs: 500 });
    expect(report.complete).toBe(true);
    expect(report.blindSpots).toContain(SWEEP_ANSWER_BLIND_SPOT);
    // The CLI's JSON says it too.
    const cli = await tether(['sandbox', 'exec', '--via', 'env', '--json', '--', 'true']);
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stderr.trim().split('\n').at(-1) ?? '{}').blindSpots).toEqual([
      END_LINE_BLIND_SPOT,
    ]);
  });
});
