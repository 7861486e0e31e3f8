// The kernel's wait status of a child Node started (src/proc/wait-status.ts), for every signal
// from SIGRTMIN to SIGRTMAX and a few ordinary ends, against what a POSIX shell reports for the
// same command ($?: 128 + N for signal N) — ground truth outside the code under test.
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { describe, expect, it } from 'vitest';
import { childEnd, decodeWaitStatus, watchExit } from '../../src/proc/wait-status.js';
import { kernelKeepsExitStatus, NO_EXIT_INFO, shellStatus } from '../support/wait-status.js';

const kept = await kernelKeepsExitStatus();
if (!kept) console.warn(NO_EXIT_INFO);

const SIGRTMIN = 34;
const SIGRTMAX = 64;
const RT = Array.from({ length: SIGRTMAX - SIGRTMIN + 1 }, (_, i) => SIGRTMIN + i);

/** Runs `sh -c SCRIPT` with child_process, its wait status taken from a pidfd held from the spawn. */
function run(script: string): Promise<{ status: number; node: [number | null, string | null] }> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', script], { stdio: 'ignore' });
    const watch = watchExit(child.pid as number);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      const status = watch.take();
      if (!status)
        return reject(new Error('the kernel kept no wait status (PIDFD_INFO_EXIT needs Linux 6.15)'));
      const end = childEnd(status);
      const n = end.signal ? constants.signals[end.signal] : end.signalNumber;
      resolve({ status: n !== undefined ? 128 + n : (end.exitCode as number), node: [code, signal] });
    });
  });
}

describe.skipIf(!kept)('the wait status from the pidfd', () => {
  it('is 128 + N for every real-time signal, as the shell reports it (Node alone says exit 0)', async () => {
    const wrong: string[] = [];
    for (const n of RT) {
      const script = `kill -${n} $$`;
      const { status, node } = await run(script);
      const shell = shellStatus(script);
      if (shell !== 128 + n) throw new Error(`premise broken: the shell says ${shell} for signal ${n}`);
      if (status !== shell) wrong.push(`signal ${n}: ${status} (Node's exit event: ${JSON.stringify(node)})`);
    }
    expect(wrong, 'ends read from the pidfd that differ from the shell').toEqual([]);
  });

  it('keeps ordinary ends: exit 0, 7, 255, SIGTERM, SIGKILL, SIGQUIT', async () => {
    for (const script of ['exit 0', 'exit 7', 'exit 255', 'kill -15 $$', 'kill -9 $$', 'kill -3 $$']) {
      expect((await run(script)).status, script).toBe(shellStatus(script));
    }
  });

  it('says nothing (undefined) rather than guess: before the reap, twice, or for no pid', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    const early = watchExit(child.pid as number);
    expect(early.take(), 'a status read while the child runs').toBeUndefined();
    expect(early.take(), 'a second take (the fd is closed)').toBeUndefined();
    const late = watchExit(child.pid as number);
    const exited = new Promise((r) => child.on('exit', r));
    child.kill('SIGKILL');
    await exited;
    expect(late.take()).toEqual({ exitCode: null, signalNumber: 9 });
    expect(watchExit(0).take()).toBeUndefined();
  });
});

describe('the status word', () => {
  it('decodes the status word of wait(2): exit code << 8, the signal in the low 7 bits, the core bit dropped', () => {
    expect(decodeWaitStatus(7 << 8)).toEqual({ exitCode: 7, signalNumber: null });
    expect(decodeWaitStatus(34)).toEqual({ exitCode: null, signalNumber: 34 });
    expect(decodeWaitStatus(0x80 | 11)).toEqual({ exitCode: null, signalNumber: 11 });
    expect(childEnd({ exitCode: null, signalNumber: 15 })).toEqual({ exitCode: null, signal: 'SIGTERM' });
    expect(childEnd({ exitCode: null, signalNumber: 40 })).toEqual({
      exitCode: null,
      signal: null,
      signalNumber: 40,
    });
  });
});
