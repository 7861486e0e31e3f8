import { describe, expect, it } from 'vitest';
import { spawn } from '../../src/index.js';
import { kernelKeepsExitStatus, NO_EXIT_INFO, shellStatus } from '../support/wait-status.js';

const FAST = { graceMs: 300, killAfterMs: 1000, outputCapMs: 300, stdio: 'ignore' } as const;
const SIGRTMIN = 34;
const SIGRTMAX = 64;
const EVERY_RT = Array.from({ length: SIGRTMAX - SIGRTMIN + 1 }, (_, i) => SIGRTMIN + i);
const SPREAD = [34, 35, 41, 49, 50, 63, 64];

const kept = await kernelKeepsExitStatus();
if (!kept) console.warn(`env-tag: ${NO_EXIT_INFO}`);

/** The status a shell would show for each result: 128 + its signal, or its exit code. */
async function statuses(signals: number[], containment: ['env-tag'] | undefined): Promise<string[]> {
  const wrong: string[] = [];
  for (const n of signals) {
    const script = `kill -${n} $$`;
    const shell = shellStatus(script);
    if (shell !== 128 + n) throw new Error(`premise broken: the shell says ${shell} for signal ${n}`);
    const r = await spawn('sh', ['-c', script], { ...FAST, containment, reject: false });
    const seen = r.signalNumber ?? (r.signal === null ? undefined : n);
    if (r.failed !== true || r.exitCode !== null || seen !== n || (n >= SIGRTMIN && r.signalNumber !== n))
      wrong.push(
        `signal ${n}: exitCode ${r.exitCode}, signal ${r.signal}, signalNumber ${r.signalNumber}, failed ${r.failed}`,
      );
  }
  return wrong;
}

describe('a command killed by a real-time signal', () => {
  it.skipIf(!kept)(
    "without the helper (containment ['env-tag']) reports every one of SIGRTMIN..SIGRTMAX by number, failed",
    async () => {
      expect(await statuses(EVERY_RT, ['env-tag']), 'ends reported otherwise than the shell does').toEqual(
        [],
      );
    },
  );

  it('through the helper (the default) reports a spread of them by number, failed', async () => {
    expect(await statuses(SPREAD, undefined), 'ends reported otherwise than the shell does').toEqual([]);
  });

  it.skipIf(!kept)("rejects by default with a CommandError naming the signal's number", async () => {
    const error = await spawn('sh', ['-c', 'kill -40 $$'], { ...FAST, containment: ['env-tag'] }).then(
      () => undefined,
      (e: unknown) => e as { code?: string; message?: string; signalNumber?: number },
    );
    expect(error?.code, 'a command killed by signal 40 was taken for a success').toBe('COMMAND_FAILED');
    expect(error?.message).toMatch(/killed with signal 40/);
  });
});
