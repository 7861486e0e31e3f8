// A second ending signal to `tether run` is "now" (docs/cli.md#tether-run) also once the command
// has exited and the end's sweep is already giving what it left its grace: the sweep's TERM phase
// ends and KILL follows. Before, the signals reached nothing (the command was gone, the sweep had
// begun) and tether waited out the whole -k (20.6 s for -k 20s, the signals at 2.5 and 3 s).
// Ground truth: the leftover's pid + start time, recorded by the payload.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RECORD, recordedIds, tether, waitFor } from '../support/cli.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { testDir } from '../support/temp.js';

const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

const GRACE_S = 15;

describe('a second Ctrl-C while the end sweeps a TERM-ignoring leftover', () => {
  it('ends the grace at once: KILL follows, the leftover is gone well before -k runs out', async () => {
    const sleep = `300.${randomBytes(3).readUIntBE(0, 3)}`;
    const dir = testDir('tether-hurry-');
    const up = join(dir, 'up');
    const ignoring = join(dir, 'ignoring');
    // The command exits once its leftover ignores TERM (inherited across exec): before, it exited
    // at once, and on a loaded machine the end's sweep could TERM the leftover's shell before its
    // trap ran — tether then ended at once and the test's SIGINT found no process (CI: ESRCH).
    const payload = `setsid sh -c 'trap "" TERM; : > ${ignoring}; exec sleep ${sleep}' >/dev/null 2>&1 & ${RECORD}; while [ ! -e ${ignoring} ]; do sleep 0.01; done; : > ${up}`;
    let pid = 0;
    const began = performance.now();
    const running = tether(['run', '--no-ledger', '-k', `${GRACE_S}s`, '--', 'sh', '-c', payload], {
      onStart: (p) => (pid = p),
    });
    // Waited for, not timed: a loaded machine starts tether late. Then the command has exited and
    // the end's sweep sends its TERM within a few rounds.
    if (!(await waitFor(() => existsSync(up), 15_000)))
      throw new Error('premise broken: the command never ran');
    await new Promise((r) => setTimeout(r, 500));
    process.kill(pid, 'SIGINT');
    await new Promise((r) => setTimeout(r, 300));
    process.kill(pid, 'SIGINT');
    const ran = await running;
    const tookS = (performance.now() - began) / 1000;
    const [leftover] = recordedIds(ran.stdout);
    if (!leftover) throw new Error(`premise broken: no leftover recorded (${ran.stdout})`);
    started.push(leftover);
    expect(
      isAlive(leftover),
      `the leftover sleep ${sleep} (pid ${leftover.pid}) survived the hurried end\n${ran.stderr}`,
    ).toBe(false);
    expect(
      tookS,
      `took ${tookS.toFixed(1)} s: the second SIGINT, 0.8 s after the command ran, should end the ${GRACE_S} s grace at once\n${ran.stderr}`,
    ).toBeLessThan(GRACE_S - 3);
    expect(ran.stderr, 'the report names the leftover it killed').toContain(`sleep ${sleep}`);
    expect(ran.stderr).toContain('SIGKILL');
  });
});
