// Signals to a real `tether run` process (docs/cli.md#signals): INT/TERM/HUP/QUIT are forwarded
// and end the session; USR1, USR2, WINCH, ALRM are forwarded only. The payload is a shell whose
// traps record every signal it gets; its leftover's pid + start time are the ground truth.
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { passedSignals } from '../../src/cli/signals.js';
import { BIN, type Ran, RECORD, readFileSafe, recordedIds, tether, waitFor } from '../support/cli.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { testDir } from '../support/temp.js';

const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

const TRAPPED = ['INT', 'TERM', 'HUP', 'QUIT', 'USR1', 'USR2', 'WINCH', 'ALRM'];

/**
 * Starts `tether run ARGS -- sh -c PAYLOAD`: the payload records each signal in TRAPPED as a line
 * of `log` (and does not exit on it), leaves a setsid'd sleep (recorded as "pid …"), writes
 * `ready`, then runs until `log.stop` exists and exits 6.
 */
async function startPayload(args: string[]) {
  const log = join(testDir('tether-sig-'), 'log');
  const traps = TRAPPED.map((s) => `trap 'echo ${s} >> ${log}' ${s}`).join('; ');
  const script = `${traps}
setsid sleep 1000 >/dev/null 2>&1 & ${RECORD} >> ${log}
echo ready >> ${log}
while [ ! -e ${log}.stop ]; do sleep 0.05; done
exit 6`;
  let pid = 0;
  let done = false;
  const running = tether(['run', ...args, '--', 'sh', '-c', script], { onStart: (p) => (pid = p) }).then(
    (r: Ran) => {
      done = true;
      return r;
    },
  );
  if (!(await waitFor(() => readFileSafe(log).includes('ready'))))
    throw new Error(`premise broken: the payload never wrote ready (${readFileSafe(log)})`);
  const [leftover] = recordedIds(readFileSafe(log));
  if (!leftover) throw new Error('premise broken: no leftover');
  started.push(leftover);
  const received = () =>
    readFileSafe(log)
      .split('\n')
      .filter((l) => TRAPPED.includes(l));
  return { pid, log, leftover, running, received, isDone: () => done };
}

describe('signals to tether run', () => {
  it('forwards USR1, USR2, WINCH and ALRM only: the payload gets each, the session goes on', async () => {
    const p = await startPayload(['-k', '300ms']);
    for (const signal of ['USR1', 'USR2', 'WINCH', 'ALRM']) {
      process.kill(p.pid, `SIG${signal}`);
      expect(
        await waitFor(() => p.received().includes(signal)),
        `${signal} never reached the payload: ${readFileSafe(p.log)}`,
      ).toBe(true);
    }
    // Still running, nothing swept: the leftover is alive, tether has not exited.
    await new Promise((r) => setTimeout(r, 200));
    expect(p.isDone(), 'tether exited on a forward-only signal').toBe(false);
    expect(isAlive(p.leftover), 'a forward-only signal swept the session').toBe(true);
    expect(p.received()).toEqual(['USR1', 'USR2', 'WINCH', 'ALRM']);
    writeFileSync(`${p.log}.stop`, '');
    const ran = await p.running;
    expect(ran.code, ran.stderr).toBe(6);
    expect(isAlive(p.leftover), `leftover ${p.leftover.pid} outlived the session`).toBe(false);
  });

  it.each(['INT', 'TERM', 'HUP', 'QUIT'])(
    'forwards %s, then ends the session: the payload gets it alone first, SIGKILL -k later',
    async (signal) => {
      const p = await startPayload(['-k', '400ms']);
      process.kill(p.pid, `SIG${signal}`);
      const ran = await p.running;
      // The payload trapped the signal and went on: -k later it was SIGKILLed, and the session
      // swept its leftover. Its handler ran before any other signal reached it.
      expect(ran.code, ran.stderr).toBe(128 + 9);
      expect(p.received()).toEqual([signal]);
      expect(isAlive(p.leftover), `leftover ${p.leftover.pid} outlived a SIG${signal} to tether`).toBe(false);
    },
  );

  it("an INT handler that exits runs to its end: tether exits with the payload's status", async () => {
    const log = join(testDir('tether-sig-'), 'log');
    const script = `trap 'echo cleaned >> ${log}; exit 4' INT
setsid sleep 1000 >/dev/null 2>&1 & ${RECORD} >> ${log}
echo ready >> ${log}
while :; do sleep 0.05; done`;
    let pid = 0;
    const running = tether(['run', '-k', '5s', '--', 'sh', '-c', script], { onStart: (p) => (pid = p) });
    expect(await waitFor(() => readFileSafe(log).includes('ready'))).toBe(true);
    const [leftover] = recordedIds(readFileSafe(log));
    if (leftover) started.push(leftover);
    process.kill(pid, 'SIGINT');
    const ran = await running;
    expect(ran.code, ran.stderr).toBe(4);
    expect(readFileSync(log, 'utf8')).toMatch(/^cleaned$/m);
    expect(leftover && isAlive(leftover)).toBe(false);
  });

  it('a second ending signal ends the session now: the grace counts as spent, SIGKILL without waiting', async () => {
    // A payload that ignores TERM and INT, as its children do (an ignored signal is inherited):
    // one child in its process group (it gets the first signal too) and one setsid'd out of it.
    // With -k 8s the first signal alone leaves them 8 s; the second must not wait that out.
    const log = join(testDir('tether-sig-'), 'log');
    const script = `trap '' TERM INT
setsid sleep 1000 >/dev/null 2>&1 & ${RECORD} >> ${log}
sleep 1001 & ${RECORD} >> ${log}
echo ready >> ${log}
wait`;
    let pid = 0;
    let done = false;
    const running = tether(['run', '-k', '8s', '--', 'sh', '-c', script], { onStart: (p) => (pid = p) }).then(
      (r) => {
        done = true;
        return r;
      },
    );
    expect(await waitFor(() => readFileSafe(log).includes('ready')), readFileSafe(log)).toBe(true);
    const ids = recordedIds(readFileSafe(log));
    started.push(...ids);
    const first = performance.now();
    process.kill(pid, 'SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
    if (done) throw new Error(`premise broken: one SIGTERM ended tether: ${(await running).stderr}`);
    process.kill(pid, 'SIGINT');
    const ran = await running;
    const tookMs = performance.now() - first;
    expect(ran.code, ran.stderr).toBe(128 + 9);
    // "Now" is the sweep's few rounds (about 100 ms; seconds on a busy machine), not the 8 s left.
    expect(
      tookMs,
      `two signals 0.5 s apart took ${Math.round(tookMs)} ms: the sweep waited out -k\n${ran.stderr}`,
    ).toBeLessThan(4000);
    for (const id of ids) expect(isAlive(id), `sleep ${id.pid} outlived two signals to tether`).toBe(false);
  });

  it("under V8's profiler SIGPROF is the profiler's: not forwarded, and tether exits with the payload's status", async () => {
    // node --cpu-prof samples by sending this process SIGPROF every 1 ms. Caught, each tick
    // reached the payload, and removing the listener at the end reset SIGPROF to its default
    // action: tether died of SIGPROF (status 155) with the payload's 3 lost.
    const dir = testDir('tether-sigprof-');
    const log = join(dir, 'log');
    const script = `trap 'echo PROF >> ${log}' PROF; sleep 0.3; sleep 0.3; echo done >> ${log}; exit 3`;
    const ran = await new Promise<{ code: number | null; signal: string | null; stderr: string }>(
      (resolve) => {
        const child = execFile(
          process.execPath,
          [
            '--cpu-prof',
            '--cpu-prof-dir',
            join(dir, 'prof'),
            BIN,
            'run',
            '--no-ledger',
            '--',
            'sh',
            '-c',
            script,
          ],
          { timeout: 20_000 },
          (_error, _stdout, stderr) => resolve({ code: child.exitCode, signal: child.signalCode, stderr }),
        );
      },
    );
    try {
      expect({ code: ran.code, signal: ran.signal }, ran.stderr).toEqual({ code: 3, signal: null });
      expect(readFileSync(log, 'utf8')).toBe('done\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('passedSignals', () => {
  it('leaves SIGPROF out where the profiler or an inspector may run, and only there', () => {
    expect(passedSignals([], '')).toContain('SIGPROF');
    expect(passedSignals(['--max-old-space-size=100', '--enable-source-maps'], '--no-warnings')).toContain(
      'SIGPROF',
    );
    for (const [argv, options] of [
      [['--cpu-prof'], ''],
      [['--cpu-prof-dir=/tmp/x'], ''],
      [['--prof'], ''],
      [['--inspect=127.0.0.1:0'], ''],
      [['--inspect-brk'], ''],
      [[], '--no-warnings --inspect'],
    ] as const) {
      const passed = passedSignals(argv, options);
      expect(passed, `${argv} / ${options}`).not.toContain('SIGPROF');
      expect(passed).toContain('SIGUSR1');
    }
  });
});
