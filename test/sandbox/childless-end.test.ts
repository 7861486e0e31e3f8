// A childless end (docs/sandbox.md, "A childless end"): a command under the helper that leaves
// nothing ends with the helper's `tether-end NONCE exit STATUS childless`, and the helper exits at
// once. The word is checked, never trusted: the session's sweep still runs, and ends at its first
// scan when that helper is gone and nothing else is found. A session member that copied the nonce
// from the next wrapper's stdin (nonce-thief.c) and forged the word while that command's leftover
// and helper still ran leaves them found by that scan, stopped and gone. Ground truth: the execs
// the channel ran, and the host's /proc (pid and start time).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/index.js';
import { HELPER_SWEEP_ANSWER_BLIND_SPOT, SWEEP_ANSWER_BLIND_SPOT } from '../../src/sandbox/sweep-output.js';
import { BUILD } from '../support/paths.js';
import { cmdlineOf, identityOf, pids } from '../support/proc.js';
import { aliveOnHost, type Container, privateTmp, sleep, startContainer, taggedOnHost } from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
  // A tmpfs of its own on the container's /tmp (its mount namespace): the helper is pushed there.
  privateTmp(box, 'tether-ce');
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
let next = 8_100 + (process.pid % 400);

// The channel, counting the programs it ran: the sweep's argv holds `tether-sweep`.
function counting(inner: ExecChannel): ExecChannel & { sweeps: () => number } {
  let sweeps = 0;
  return {
    argv: inner.argv,
    describe: inner.describe,
    exec(argv) {
      if (argv.includes('tether-sweep')) sweeps++;
      return inner.exec(argv);
    },
    sweeps: () => sweeps,
  } as ExecChannel & { sweeps: () => number };
}

async function cleanup(tag: string): Promise<void> {
  if (taggedOnHost(tag).length) await sandbox.sweep(box.channel, tag, SWEEP);
}

async function found(cmdline: string): Promise<{ pid: number; startTime: number } | undefined> {
  for (let i = 0; i < 200; i++) {
    const pid = pids().find((p) => cmdlineOf(p) === cmdline);
    const id = pid === undefined ? undefined : identityOf(pid);
    if (id) return id;
    await sleep(10);
  }
  return undefined;
}

describe('a childless end', () => {
  it('a command that leaves nothing: the helper said so and is gone; one scan proves it', async () => {
    const channel = counting(box.channel);
    let tag = '';
    try {
      const r = await sandbox.run(channel, ['sh', '-c', 'echo ok; exit 3'], {
        sweep: SWEEP,
        helper: true,
        reject: false,
      });
      tag = r.report.tag;
      expect([r.exitCode, r.stdout]).toEqual([3, 'ok\n']);
      expect(r.report.notes.join('\n')).toContain('the commands ran under the helper');
      expect(channel.sweeps(), 'the word was taken without a sweep').toBe(1);
      expect([r.report.complete, r.report.ok, r.report.proof, r.report.timings.scans]).toEqual([
        true,
        true,
        'helper-childless',
        1,
      ]);
      // The session's helper answered the sweep ("The helper answers the sweep"), not a shell.
      expect(r.report.blindSpots).toContain(HELPER_SWEEP_ANSWER_BLIND_SPOT);
      expect(r.report.blindSpots).not.toContain(SWEEP_ANSWER_BLIND_SPOT);
      // Ground truth: nothing of the session is left, the helper included.
      expect(taggedOnHost(tag)).toEqual([]);
    } finally {
      if (tag) await cleanup(tag);
    }
  });

  const THIEF = join(BUILD, 'zoo-nonce-thief');
  it.skipIf(!existsSync(THIEF))(
    `a forged childless word (the nonce copied from the wrapper's stdin): the leftover is still stopped${existsSync(THIEF) ? '' : ' (skipped: no build/zoo-nonce-thief)'}`,
    async () => {
      const tag = createTag();
      const s = next++;
      try {
        // A leftover of an earlier tool command of the session (a proven end sweeps nothing).
        await sandbox.exec(
          box.channel,
          ['sh', '-c', `setsid ${THIEF} 20 800 </dev/null >/dev/null 2>/dev/null &`],
          {
            tag,
          },
        );
        const call = sandbox.run(
          box.channel,
          ['sh', '-c', `setsid sleep ${s} </dev/null >/dev/null 2>&1 & sleep 2; exit 7`],
          { tag, sweep: SWEEP, helper: true, reject: false },
        );
        const seen = await found(`sleep ${s}`);
        const r = await call;
        expect(seen, 'premise broken: the leftover never ran').toBeDefined();
        // The forged line may be what the result read (the thief had the nonce): the end is still
        // checked by the sweep, which finds the helper alive and the leftover below it.
        expect(r.report.stopped.map((p) => p.cmdline)).toContain(`sleep ${s}`);
        for (let i = 0; i < 50 && seen && aliveOnHost(seen); i++) await sleep(20);
        expect(seen && aliveOnHost(seen), 'the leftover outlived a forged childless end').toBe(false);
        expect(taggedOnHost(tag.name)).toEqual([]);
      } finally {
        await cleanup(tag.name);
      }
    },
  );

  it('a command that leaves a process: the sweep runs and stops it', async () => {
    const tag = createTag();
    const channel = counting(box.channel);
    const s = next++;
    try {
      const r = await sandbox.run(
        channel,
        ['sh', '-c', `env -i /bin/sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 0.2`],
        { tag, sweep: SWEEP, helper: true },
      );
      expect(channel.sweeps(), 'no sweep ran for a command that left a process').toBeGreaterThan(0);
      expect(r.report.stopped.map((p) => p.cmdline)).toContain(`sleep ${s}`);
      const left = pids().filter((p) => cmdlineOf(p) === `sleep ${s}`);
      expect(left, 'the leftover outlived the session').toEqual([]);
    } finally {
      await cleanup(tag.name);
    }
  });

  it('what a command leaves is ended by the sweep’s own signal, not by its helper’s', async () => {
    let tag = '';
    const [a, b, c] = [next++, next++, next++];
    try {
      const r = await sandbox.run(
        box.channel,
        [
          'sh',
          '-c',
          `nohup sleep ${a} >/dev/null 2>&1 & setsid sleep ${b} >/dev/null 2>&1 & env -i /bin/sh -c 'setsid sleep ${c} >/dev/null 2>&1 &'; echo ok`,
        ],
        { sweep: SWEEP, helper: true },
      );
      tag = r.report.tag;
      // The helper, a carrier again after its end line, was TERMed with them: first, it ended
      // some of them itself, and the report said they `exited`.
      expect(r.report.stopped.map((p) => [p.cmdline, p.endedBy]).sort()).toEqual([
        [`sleep ${a}`, 'SIGTERM'],
        [`sleep ${b}`, 'SIGTERM'],
        [`sleep ${c}`, 'SIGTERM'],
      ]);
    } finally {
      if (tag) await cleanup(tag);
    }
  });

  it('a command that prints a childless end line itself: its session still sweeps', async () => {
    const channel = counting(box.channel);
    let tag = '';
    const s = next++;
    const forged = `tether-end ${'0'.repeat(32)} exit 0 childless`;
    try {
      const call = sandbox.run(
        channel,
        [
          'sh',
          '-c',
          `echo '${forged}'; env -i /bin/sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 0.2`,
        ],
        { sweep: SWEEP, helper: true },
      );
      let seen: { pid: number; startTime: number } | undefined;
      for (let i = 0; i < 200 && !seen; i++) {
        const pid = pids().find((p) => cmdlineOf(p) === `sleep ${s}`);
        seen = pid === undefined ? undefined : identityOf(pid);
        if (!seen) await sleep(10);
      }
      const r = await call;
      tag = r.report.tag;
      expect(r.stdout).toBe(`${forged}\n`);
      expect(channel.sweeps()).toBeGreaterThan(0);
      expect(seen, 'premise broken: the leftover never appeared').toBeDefined();
      for (let i = 0; i < 50 && seen && aliveOnHost(seen); i++) await sleep(20);
      expect(seen && aliveOnHost(seen), 'the leftover outlived the session').toBe(false);
    } finally {
      if (tag) await cleanup(tag);
    }
  });
});
