// A failed start of the resident helper is retried (resident-server.ts, residentServer): kept for a
// backoff — 1 s after the first failure in a row, doubled after each next, at most 60 s — per
// channel object, then the next call starts anew; kept for the object's life where no retry can
// change the cause (no prebuilt helper for the target's architecture). Real containers: the start
// fails for real (its /tmp read-only, then writable again; its start exec's client killed), the
// execs are counted through a wrapping channel, and which path a call took is its end line's word
// (its blindSpots: the resident key's, or the wrapper's).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/channel.js';
import { RESIDENT_RETRY_FIRST_MS, residentServer } from '../../src/sandbox/resident-server.js';
import { END_LINE_BLIND_SPOT, RESIDENT_KEY_BLIND_SPOT } from '../../src/sandbox/sweep-output.js';
import { missing } from '../support/tools.js';
import { type Container, privateTmp, sleep, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
// A helper built without libsodium answers `--serve` with `unsupported`: nothing here applies.
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

/**
 * `inner` as a new channel object that records every exec's argv and kills the client of its
 * first `killServes` execs of the serve program (argv holding `tether-serve`) as soon as it is
 * started — before the start request is written: that start fails (its client killed).
 */
function counting(inner: ExecChannel, killServes = 0) {
  const execs: string[][] = [];
  let toKill = killServes;
  const channel: ExecChannel = {
    ...inner,
    describe: inner.describe,
    exec(argv: string[]) {
      execs.push(argv);
      const client = inner.exec(argv);
      if (argv.includes('tether-serve') && toKill > 0) {
        toKill -= 1;
        client.kill();
      }
      return client;
    },
  };
  const serveExecs = () => execs.filter((argv) => argv.includes('tether-serve')).length;
  return { channel, execs, serveExecs };
}

const resident = (r: { blindSpots: string[] }) =>
  r.blindSpots.includes(RESIDENT_KEY_BLIND_SPOT) && !r.blindSpots.includes(END_LINE_BLIND_SPOT);
const wrapped = (r: { blindSpots: string[] }) =>
  r.blindSpots.includes(END_LINE_BLIND_SPOT) && !r.blindSpots.includes(RESIDENT_KEY_BLIND_SPOT);

describe.skipIf(!serves)(
  `the resident helper's failed start, retried${serves ? '' : ` (skipped: ${why})`}`,
  () => {
    let box: Container;
    const stops: ExecChannel[] = [];
    beforeAll(async () => {
      box = await startContainer(240);
      privateTmp(box, `tether-resident-retry-${process.pid}`);
    });
    afterAll(async () => {
      for (const channel of stops) await sandbox.stopResident(channel).catch(() => false);
      await box?.stop();
    });

    const remountTmp = (how: 'ro' | 'rw') =>
      execFileSync('nsenter', ['-t', String(box.init), '-m', 'mount', '-o', `remount,${how}`, '/tmp'], {
        timeout: 10_000,
      });

    it('a /tmp read-only at the first call, writable again: the call after the backoff gets a server', async () => {
      // A fresh tmpfs of its own (the helper not yet pushed there), made read-only: the push fails.
      privateTmp(box, `tether-resident-retry-ro-${process.pid}`);
      remountTmp('ro');
      const { channel, serveExecs } = counting(box.channel);
      stops.push(channel);
      let first: Awaited<ReturnType<typeof sandbox.exec>>;
      try {
        first = await sandbox.exec(channel, ['sh', '-c', 'echo one'], { resident: true });
      } finally {
        remountTmp('rw');
      }
      const failedBy = performance.now();
      expect(first.stdout).toBe('one\n');
      expect(wrapped(first), first.blindSpots.join('\n')).toBe(true);
      expect(serveExecs(), 'the push failed: no start exec').toBe(0);
      await sleep(Math.max(0, failedBy + RESIDENT_RETRY_FIRST_MS + 100 - performance.now()));
      const second = await sandbox.exec(channel, ['sh', '-c', 'echo two'], { resident: true });
      expect(second.stdout).toBe('two\n');
      expect(resident(second), second.blindSpots.join('\n')).toBe(true);
      expect(serveExecs()).toBe(1);
    });

    it('a start whose client was killed is kept for 1 s: a call within it goes under the wrapper and starts nothing; the one after it gets a server', async (ctx) => {
      const { channel, execs, serveExecs } = counting(box.channel, 1);
      stops.push(channel);
      const began = performance.now();
      const first = await sandbox.exec(channel, ['sh', '-c', 'echo one'], { resident: true });
      const failedBy = performance.now();
      expect(first.stdout).toBe('one\n');
      expect(wrapped(first), first.blindSpots.join('\n')).toBe(true);
      expect(serveExecs(), 'one start exec, killed').toBe(1);

      execs.length = 0;
      const within = await sandbox.exec(channel, ['sh', '-c', 'echo within'], { resident: true });
      // The start settled after `began`: a call that ended within 1 s of it was made in the backoff.
      // A machine too slow to make it within 1 s cannot give the premise: skipped, with its figure.
      const tookMs = Math.round(performance.now() - began);
      if (tookMs >= RESIDENT_RETRY_FIRST_MS)
        return ctx.skip(
          `the call within the backoff ended ${tookMs} ms after the start began (a machine this slow)`,
        );
      expect(within.stdout).toBe('within\n');
      expect(wrapped(within), within.blindSpots.join('\n')).toBe(true);
      expect(execs.filter((argv) => argv.includes('tether-serve'))).toEqual([]);
      expect(execs.filter((argv) => argv.includes('tether-helper-check'))).toEqual([]);

      await sleep(Math.max(0, failedBy + RESIDENT_RETRY_FIRST_MS + 100 - performance.now()));
      const after = await sandbox.exec(channel, ['sh', '-c', 'echo after'], { resident: true });
      expect(after.stdout).toBe('after\n');
      expect(resident(after), after.blindSpots.join('\n')).toBe(true);
      expect(serveExecs(), 'one start, the retry').toBe(1);
    });

    it('calls at once share one start, and one retry; a second failure in a row is kept for 2 s', async (ctx) => {
      const { channel, serveExecs } = counting(box.channel, 2);
      stops.push(channel);
      const calls = (word: string) =>
        Promise.all(
          [1, 2, 3, 4].map((n) =>
            sandbox.exec(channel, ['sh', '-c', `echo ${word}${n}`], { resident: true }),
          ),
        );
      const first = await calls('first');
      let failedBy = performance.now();
      expect(first.map((r) => r.stdout)).toEqual(['first1\n', 'first2\n', 'first3\n', 'first4\n']);
      expect(first.every(wrapped)).toBe(true);
      expect(serveExecs(), 'four calls at once: one start').toBe(1);

      await sleep(Math.max(0, failedBy + RESIDENT_RETRY_FIRST_MS + 100 - performance.now()));
      const began = performance.now();
      const second = await calls('second');
      failedBy = performance.now();
      expect(second.every(wrapped)).toBe(true);
      expect(serveExecs(), 'four calls at once after the backoff: one retry').toBe(2);

      // The second failure in a row: kept for 2 s from its settling (after `began`).
      await sleep(Math.max(0, failedBy + RESIDENT_RETRY_FIRST_MS + 100 - performance.now()));
      const third = await calls('third');
      const tookMs = Math.round(performance.now() - began);
      if (tookMs >= 2 * RESIDENT_RETRY_FIRST_MS)
        return ctx.skip(
          `the calls within the 2 s backoff ended ${tookMs} ms after it began (a machine this slow)`,
        );
      expect(third.every(wrapped)).toBe(true);
      expect(serveExecs(), '1 s after the second failure: no start').toBe(2);

      await sleep(Math.max(0, failedBy + 2 * RESIDENT_RETRY_FIRST_MS + 100 - performance.now()));
      const fourth = await calls('fourth');
      expect(fourth.map((r) => r.stdout)).toEqual(['fourth1\n', 'fourth2\n', 'fourth3\n', 'fourth4\n']);
      expect(fourth.every(resident), fourth.map((r) => r.blindSpots.join('\n')).join('\n--\n')).toBe(true);
      expect(serveExecs(), 'one more start, shared').toBe(3);
    });

    it('no prebuilt helper for the architecture (linux32: i686) is kept for the channel object’s life', async () => {
      const { channel, execs } = counting({
        describe: `${box.channel.describe} setarch linux32`,
        exec: (argv) => box.channel.exec(['setarch', 'linux32', ...argv]),
      });
      const first = await residentServer(channel, ['sh']);
      if (!('unavailable' in first)) throw new Error('premise broken: a server under linux32');
      expect(first.unavailable).toMatch(/carries no helper for i686/);
      expect(first.unavailable).not.toMatch(/starts anew/);
      const checks = execs.length;
      expect(checks).toBeGreaterThan(0);
      await sleep(RESIDENT_RETRY_FIRST_MS + 200);
      const again = await residentServer(channel, ['sh']);
      expect(again).toBe(first);
      expect(execs.length, 'no check, no start: nothing retried').toBe(checks);
    });
  },
);
