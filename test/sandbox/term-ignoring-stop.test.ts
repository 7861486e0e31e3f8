// A session's timeout or cancel over a command that ignores SIGTERM (found by a new user's trial).
// Under the helper the sweep KILLs the command and the helper before the helper can write the end
// line: the end was the stop's, settled by the session's sweep — TIMED_OUT / CANCELLED, `tether
// sandbox run` 137 as timeout(1) when it had to KILL — not an unknown end (EXEC_STATUS_UNKNOWN,
// 125). And a grace and kill-after longer than the cancel's 10 s budget are waited for: before,
// the budget cut the sweep and the call said SWEEP_CUT, "what it started may still run" (121),
// while the program was still ending it. Ground truth: the host's /proc, by the session's tag.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { tether } from '../support/cli.js';
import { type Container, privateTmp, sleep, startContainer, taggedOnHost } from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(120);
  privateTmp(box, 'tether-ti');
});
afterAll(async () => {
  await box?.stop();
});

const STUBBORN = (s: number) => ['sh', '-c', `trap '' TERM; echo up; while :; do sleep 0.${s}; done`];

async function cleanup(tag: string): Promise<void> {
  if (taggedOnHost(tag).length) await sandbox.sweep(box.channel, tag, { graceMs: 500, killAfterMs: 500 });
}

describe('a stop over a command that ignores SIGTERM', () => {
  it('sandbox.run’s timeout: TIMED_OUT, stoppedBy timeout, everything gone', async () => {
    const tag = createTag();
    try {
      const call = sandbox.run(box.channel, STUBBORN(31), {
        tag,
        timeout: 500,
        sweep: { graceMs: 500, killAfterMs: 1000 },
      });
      await expect(call).rejects.toMatchObject({ code: 'TIMED_OUT', timedOut: true, stoppedBy: 'timeout' });
      expect(taggedOnHost(tag.name), 'a process of the session outlived its timeout').toEqual([]);
    } finally {
      await cleanup(tag.name);
    }
  });

  it('tether sandbox run --timeout: 137, as timeout(1) when it had to KILL', async () => {
    const tag = createTag();
    try {
      const r = await tether([
        'sandbox',
        'run',
        '--tag',
        tag.name,
        '--timeout',
        '500ms',
        '-k',
        '1s',
        '--via',
        box.prefix.join(' '),
        '--',
        ...STUBBORN(32),
      ]);
      expect(r.code, r.stderr).toBe(137);
      expect(r.stderr).not.toMatch(/is unknown/);
      expect(taggedOnHost(tag.name)).toEqual([]);
    } finally {
      await cleanup(tag.name);
    }
  });

  it('a cancel with a grace and kill-after over the 10 s budget: CANCELLED, never cut', async () => {
    const tag = createTag();
    const abort = new AbortController();
    try {
      const call = sandbox.run(box.channel, STUBBORN(33), {
        tag,
        signal: abort.signal,
        sweep: { graceMs: 9_000, killAfterMs: 2_000 },
        reject: false,
      });
      // The loop's own sleep, past the trap: the shell's cmdline holds `sleep 0.33` too, and a cancel
      // that came on it before `trap '' TERM` ran ended the shell by its TERM, a proven 143 (a
      // whole suite's, 1 of 1,406).
      for (let i = 0; i < 200 && !taggedOnHost(tag.name).some((p) => p.cmdline === 'sleep 0.33'); i++)
        await sleep(20);
      abort.abort();
      const r = await call;
      expect([r.error?.code, r.isCanceled], r.error?.message).toEqual(['CANCELLED', true]);
      expect(r.report.complete).toBe(true);
      expect(taggedOnHost(tag.name)).toEqual([]);
    } finally {
      await cleanup(tag.name);
    }
  }, 30_000);
});
