// The command under the pushed helper starts with SIGUSR1 at its default, as the wrapper's own
// commands and a bare exec do: the wrapper shell ignores it while it holds the helper's file
// (programs/prelude.sh, hold_pinned), and the helper in wrap mode, started meanwhile, passed that
// on — `kill -USR1 $$; echo survived` printed `survived`, exit 0, where every other path ends 138
// (a fresh user's trial). native/helper.c resets it at wrap mode's start.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sandbox } from '../../src/index.js';
import { type Container, privateTmp, startContainer } from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(120);
  privateTmp(box, `tether-helper-usr1-${process.pid}`);
});
afterAll(async () => {
  await box?.stop();
});

describe('SIGUSR1 of a command under the pushed helper', () => {
  it('is at its default: the command ends by it (138), and its status says no ignored USR1', async () => {
    const killed = await sandbox.run(box.channel, ['sh', '-c', 'kill -USR1 $$; echo survived'], {
      helper: true,
      reject: false,
    });
    expect([killed.exitCode, killed.stdout]).toEqual([138, '']);
    expect(killed.report.notes.join(' ')).toMatch(/ran under the helper/);
    const status = await sandbox.run(box.channel, ['sh', '-c', 'grep "^SigIgn" /proc/$$/status'], {
      helper: true,
    });
    const ignored = BigInt(`0x${status.stdout.trim().split(/\s+/)[1]}`);
    expect(ignored & (1n << 9n), `SigIgn ${status.stdout.trim()}: USR1 (10) ignored`).toBe(0n);
  }, 60_000);
});
