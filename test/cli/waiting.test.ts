// What `tether run` says on stderr while it waits, off a TTY (as agents and CI read it): one line
// for the command's own -k wait and one for the sweep's TERM phase, each once it has lasted a
// second, before the report; nothing of that with --quiet. The command and its leftovers share
// one grace from the timeout's signal (docs/cli.md#tether-run): the sweep waits only for what is
// left of it. Ground truth: the TERM-ignoring leftover, recorded by pid + start time, is gone
// either way.
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { waitingFor } from '../../src/cli/progress.js';
import { RECORD, readFileSafe, recordedIds, tether } from '../support/cli.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { testDir } from '../support/temp.js';

const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

// `tether run ARGS -- sh -c …`: the command ignores TERM (so does the sleep it leaves, which
// inherits the ignored disposition), records the sleep's identity in a log, then runs `tail`
// (default: waits for the sleep, so -k has to end it); `k` is tether's -k.
async function ignoringTerm(args: string[], tail = 'wait', k = '2s') {
  const log = join(testDir('tether-waiting-'), 'log');
  const unique = `30.${process.pid}${Math.floor(Math.random() * 1e6)}`;
  const ran = await tether([
    'run',
    '--no-ledger',
    '--timeout',
    '300ms',
    '-k',
    k,
    ...args,
    '--',
    'sh',
    '-c',
    `trap '' TERM; sleep ${unique} & ${RECORD} >> ${log}; ${tail}`,
  ]);
  const [leftover] = recordedIds(readFileSafe(log));
  if (!leftover) throw new Error(`premise broken: the command recorded no leftover (${ran.stderr})`);
  started.push(leftover);
  return { ran, leftover };
}

describe('tether run off a TTY', () => {
  it('says what it waits for — the command after its signal, then the sweep — before the report', async () => {
    // The command exits by itself 2.2 s after the timeout's signal (its own wait said at 1 s), and
    // the sweep has the 2.8 s left of -k 5s for the leftover (its wait said at 1 s).
    const { ran, leftover } = await ignoringTerm([], 'sleep 2.5; exit 3', '5s');
    const lines = ran.stderr.split('\n');
    const command = lines.findIndex((l) =>
      /^tether: waiting for sh \(pid \d+\) to exit after SIGTERM — SIGKILL in \d+\.\d s$/.test(l),
    );
    const sweep = lines.findIndex((l) =>
      /^tether: waiting for 1 process to exit after SIGTERM — SIGKILL in \d+\.\d s$/.test(l),
    );
    // The sweep's SIGKILL comes when what is left of -k runs out (2.8 s after its start, less the
    // second before the line): never the whole grace again (it said 4.0 s before).
    const killIn = Number(/SIGKILL in (\d+\.\d) s$/.exec(lines[sweep] ?? '')?.[1]);
    expect(
      killIn,
      `the sweep's line promises SIGKILL later than -k allows:\n${ran.stderr}`,
    ).toBeLessThanOrEqual(2.8);
    const report = lines.findIndex((l) => l.startsWith('tether: stopped 1 process'));
    expect(command, `no line for the command's own wait in:\n${ran.stderr}`).toBeGreaterThanOrEqual(0);
    expect(sweep, `no line for the sweep's TERM phase in:\n${ran.stderr}`).toBeGreaterThan(command);
    expect(report, `the report does not follow the waiting lines:\n${ran.stderr}`).toBeGreaterThan(sweep);
    expect(
      lines.filter((l) => l.includes('waiting for')),
      'each wait is said once',
    ).toHaveLength(2);
    expect(ran.code, ran.stderr).toBe(124); // a timeout whose signal reached the command
    expect(isAlive(leftover), `the TERM-ignoring sleep ${leftover.pid} outlived the run`).toBe(false);
  });

  it('--quiet says nothing while it waits, and no report where nothing went wrong', async () => {
    const { ran, leftover } = await ignoringTerm(['--quiet']);
    expect(ran.stderr).not.toMatch(/waiting for/);
    expect(ran.stderr).not.toMatch(/stopped 1 process/);
    expect(ran.code, ran.stderr).toBe(128 + 9); // a timeout that had to end the command with SIGKILL
    expect(isAlive(leftover), `the TERM-ignoring sleep ${leftover.pid} outlived the run`).toBe(false);
  });
});

describe("the sweep's waiting line", () => {
  it('counts the command apart from what it left, as the report lists only the latter', () => {
    expect(waitingFor({ waiting: 3, spawns: 1 })).toBe('the command and 2 processes');
    expect(waitingFor({ waiting: 2, spawns: 1 })).toBe('the command and 1 process');
    expect(waitingFor({ waiting: 1, spawns: 1 })).toBe('the command');
    expect(waitingFor({ waiting: 2, spawns: 0 })).toBe('2 processes');
    expect(waitingFor({ waiting: 4, spawns: 2 })).toBe('2 commands and 2 processes');
  });
});
