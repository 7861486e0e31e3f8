// A SIGKILL to the process group of `tether run` — what Playwright's `webServer` sends, or a
// shell's `kill -9 %1` — kills tether and the payload together. The helper is in a group of its
// own, so it survives, reads EOF on its control pipe and runs its dead man's switch: the
// payload's setsid'd leftover (in no group the kill reached) is gone within the grace. The
// payload itself stays in tether's group, where a terminal's job control expects it.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Identity } from '../../src/index.js';
import { ROOT } from '../support/paths.js';
import { childrenOf, identityOf, isAlive, readStat } from '../support/proc.js';
import { cleanup, describeProcess, started, waitFor } from '../support/zoo.js';
import { isHelper } from './support.js';

const BIN = join(ROOT, 'bin/tether.cjs');
const GRACE_MS = 1000;

afterEach(() => cleanup());

/** Field 5 of /proc/<pid>/stat: the process group. */
function pgidOf(pid: number): number | undefined {
  const field = readStat(pid)?.fields[5];
  return field === undefined ? undefined : Number(field);
}

// The payload (it becomes `sleep`) leaves a leftover `sleep` in a new POSIX session with its
// stdio on /dev/null, and says when it has.
const PAYLOAD = ['setsid sleep 1000 </dev/null >/dev/null 2>&1 &', 'echo ready', 'exec sleep 1000'].join(
  '\n',
);

interface GroupRun {
  tether: Identity;
  helper: Identity;
  payload: Identity;
  leftover: Identity;
  /** The PID namespace's init, under `pidns`. */
  init?: Identity;
}

// `tether run` as the leader of a new process group (detached: true, as Playwright spawns its
// webServer command), with the payload's lines read from its stdout.
async function startInOwnGroup(containment: string): Promise<GroupRun> {
  const child = spawn(
    process.execPath,
    [BIN, 'run', '--grace', `${GRACE_MS}ms`, '--containment', containment, '--', 'sh', '-c', PAYLOAD],
    { detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const tether = identityOf(child.pid ?? 0);
  if (!tether) throw new Error(`premise broken: tether run did not start (${err})`);
  started.push(tether);
  await waitFor(`the payload's ready (stdout ${JSON.stringify(out)}, stderr ${JSON.stringify(err)})`, () =>
    /^ready$/m.test(out),
  );
  // Found in the host's /proc, not by pids the payload prints: under a PID namespace it sees
  // itself and its leftover by the namespace's pids.
  const find = () => {
    const helper = childrenOf(tether.pid).find((c) => isHelper(c.pid));
    const parent = helper && (containment.includes('pid-namespace') ? childrenOf(helper.pid)[0] : helper);
    const payload = parent && childrenOf(parent.pid).find((c) => c.comm === 'sleep');
    const leftover = payload && childrenOf(payload.pid).find((c) => c.comm === 'sleep');
    return helper && payload && leftover ? { helper, parent, payload, leftover } : undefined;
  };
  await waitFor(`the helper, the payload and its leftover below tether ${tether.pid}`, () => !!find());
  const tree = find();
  if (!tree?.parent) throw new Error('premise broken: the tree changed');
  const id = (s: { pid: number; startTime: number }) => ({ pid: s.pid, startTime: s.startTime });
  const run = { tether, helper: id(tree.helper), payload: id(tree.payload), leftover: id(tree.leftover) };
  started.push(run.helper, run.payload, run.leftover);
  return tree.parent === tree.helper ? run : { ...run, init: id(tree.parent) };
}

describe('a SIGKILL to the process group of tether run', () => {
  for (const containment of ['auto', 'subreaper,cgroup,pid-namespace']) {
    it(`ends the setsid'd leftover through the helper's dead man's switch (${containment})`, async () => {
      const run = await startInOwnGroup(containment);
      expect(pgidOf(run.tether.pid), 'tether run leads its own group').toBe(run.tether.pid);
      expect(pgidOf(run.payload.pid), "the payload stays in tether's process group").toBe(run.tether.pid);
      expect(pgidOf(run.helper.pid), 'the helper leads a group of its own').toBe(run.helper.pid);
      if (run.init)
        expect(pgidOf(run.init.pid), "the namespace's init is in the helper's group").toBe(run.helper.pid);
      expect(isAlive(run.leftover), 'premise broken: the leftover is not running').toBe(true);
      expect(pgidOf(run.leftover.pid), "premise broken: the leftover is in tether's group").not.toBe(
        run.tether.pid,
      );

      process.kill(-run.tether.pid, 'SIGKILL'); // our own group: tether run leads it

      await waitFor('tether run to die of the group SIGKILL', () => !isAlive(run.tether), 5000);
      await waitFor(
        `the leftover ${describeProcess(run.leftover)} to end within the grace (the helper ${isAlive(run.helper) ? 'lives' : 'is gone'})`,
        () => !isAlive(run.leftover),
        GRACE_MS + 1000,
      );
      await waitFor('the helper to exit after its switch', () => !isAlive(run.helper), GRACE_MS + 3000);
    });
  }
});
