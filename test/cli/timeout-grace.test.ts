// A timeout over a command that ignores TERM ends within one grace (docs/cli.md#tether-run): the
// command's -k and the sweep's TERM phase are one grace, counted from the timeout's signal. Before,
// the sweep gave the leftover a second TERM phase from scratch (11.4 s for a 1 s timeout, -k 5 s).
// Ground truth: the leftover's pid + start time, recorded by the payload while it ran.
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { RECORD, recordedIds, tether } from '../support/cli.js';
import { isAlive, type ProcessId } from '../support/proc.js';

const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

const TIMEOUT_S = 1;
const GRACE_S = 5; // tether run's default -k
const KILL_BUDGET_S = 3; // and --kill-budget: the bound is timeout + grace + kill budget

describe('a timeout over a TERM-ignoring command', () => {
  it('ends within the timeout and one grace, its leftover gone, not after two graces', async () => {
    // A unique duration names this run's sleep; it inherits the ignored TERM, as `sleep 10` does.
    const sleep = `300.${randomBytes(3).readUIntBE(0, 3)}`;
    const payload = `trap "" TERM; sleep ${sleep} >/dev/null 2>&1 & ${RECORD}; wait`;
    const began = performance.now();
    const ran = await tether(['run', '--no-ledger', '--timeout', `${TIMEOUT_S}s`, '--', 'sh', '-c', payload]);
    const tookS = (performance.now() - began) / 1000;
    const [leftover] = recordedIds(ran.stdout);
    if (!leftover) throw new Error(`premise broken: no leftover recorded (${ran.stdout})`);
    started.push(leftover);

    // timeout(1)'s status for a command it had to KILL after its -k.
    expect(ran.code, ran.stderr).toBe(137);
    // The command had its whole grace (a timer never fires early)…
    expect(tookS, `ended before the command's -k ran out: ${tookS.toFixed(1)} s`).toBeGreaterThan(
      TIMEOUT_S + GRACE_S - 0.5,
    );
    // …and only one: two graces would be past 1 + 2 × 5 s (measured 6.3 s, 6.4 s beside two busy
    // loops on 2 cores; 11.4 s before).
    expect(
      tookS,
      `took ${tookS.toFixed(1)} s: one grace allows < ${TIMEOUT_S + GRACE_S + KILL_BUDGET_S} s, two would be > ${TIMEOUT_S + 2 * GRACE_S} s\n${ran.stderr}`,
    ).toBeLessThan(TIMEOUT_S + GRACE_S + KILL_BUDGET_S);
    expect(
      isAlive(leftover),
      `the leftover sleep ${sleep} (pid ${leftover.pid}, start ${leftover.startTime}, recorded by the payload) survived`,
    ).toBe(false);
    expect(ran.stderr, 'the report names the leftover it stopped').toContain(`sleep ${sleep}`);
  });
});
