// A resident call's client let go while its command runs (native/helper-serve.c, call_release):
// once the server's child has taken the whole of the client's stdin, the client exits 0 and the
// channel's exec with it, and the call's end is read from its stdout — the end line, then the
// streams' close. Before, the client waited for the command's status, and every call's end paid
// the client's and the exec's exit (benchmarks.md §13). In a real container, the exec's exit timed
// by the channel itself.
import { existsSync } from 'node:fs';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/index.js';
import { missing } from '../support/tools.js';
import { type Container, killSleepersIn, privateTmp, sleepersIn, startContainer } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
// A helper built without libsodium answers `--serve` with `unsupported`: no resident call.
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

let secs = 2700 + Math.floor(Math.random() * 200) * 10;
const uniqueSecs = () => (secs += 1);

// A channel that times each `--call` exec: from its spawn to its client's exit, ms.
function timing(inner: ExecChannel): ExecChannel & { calls: { spawned: number; exited?: number }[] } {
  const calls: { spawned: number; exited?: number }[] = [];
  return {
    describe: inner.describe,
    calls,
    exec(argv) {
      const client = inner.exec(argv);
      if (argv.includes('--call')) {
        const call: { spawned: number; exited?: number } = { spawned: performance.now() };
        calls.push(call);
        void client.exited.then(() => {
          call.exited = performance.now();
        });
      }
      return client;
    },
  };
}

describe.skipIf(!serves)(`a resident call's client let go${serves ? '' : ` (skipped: ${why})`}`, () => {
  let box: Container;
  beforeAll(async () => {
    box = await startContainer(180);
    privateTmp(box, `tether-resident-release-${process.pid}`);
  });
  afterAll(async () => {
    await box?.stop();
  });

  it('with no input: its exec ends while the command runs; the result is the line’s, its output whole', async () => {
    const channel = timing(box.channel);
    await sandbox.exec(channel, ['true'], { resident: true }); // the server started
    const t0 = performance.now();
    const r = await sandbox.exec(channel, ['sh', '-c', 'sleep 1; echo done; exit 3'], {
      resident: true,
      reject: false,
    });
    const ended = performance.now();
    expect(r.exitCode).toBe(3);
    expect(r.failed).toBe(true);
    expect(r.stdout).toBe('done\n');
    expect(r.clientStatus, 'the client was let go (0), not given the status').toBe(0);
    const call = channel.calls.at(-1);
    expect(call?.exited, 'the client exited').toBeDefined();
    const exited = (call?.exited as number) - t0;
    // The command slept 1 s after the client went: the call ended at least that long after.
    expect(ended - (call?.exited as number), `client exit at ${exited.toFixed(0)} ms`).toBeGreaterThan(700);
  }, 30_000);

  it('with an input stream: its client stays until the stream has ended, and the command is given all of it', async () => {
    const channel = timing(box.channel);
    await sandbox.exec(channel, ['true'], { resident: true });
    const input = new Readable({ read() {} });
    input.push('first\n');
    const t0 = performance.now();
    setTimeout(() => {
      input.push('second\n');
      input.push(null);
    }, 800);
    const r = await sandbox.exec(channel, ['cat'], { resident: true, input });
    expect(r.ok).toBe(true);
    expect(r.stdout).toBe('first\nsecond\n');
    const call = channel.calls.at(-1);
    expect(call?.exited).toBeDefined();
    expect((call?.exited as number) - t0, 'the client went only after its stdin ended').toBeGreaterThan(750);
  }, 30_000);

  it('a command that KILLs its call’s child after its client went, its leftover holding stdout: an unknown end at the silence bound, the leftover swept', async () => {
    const channel = timing(box.channel);
    await sandbox.exec(channel, ['true'], { resident: true });
    const s = uniqueSecs();
    try {
      const call = sandbox.exec(channel, ['sh', '-c', `sleep ${s} & sleep 0.2; kill -KILL $PPID; exit 0`], {
        resident: true,
        silenceMs: 1500,
        sweep: { graceMs: 500, killAfterMs: 500 },
      });
      // No process on this side sees the child's death (its client went): the stream, held by the
      // leftover, stays open until the silence bound stops the call and its sweep ends the leftover.
      await expect(call).rejects.toMatchObject({ code: 'EXEC_STATUS_UNKNOWN' });
      await expect(call).rejects.toThrow(/silent for 1500 ms/);
      expect(sleepersIn(box, s), `the leftover sleep ${s} is gone`).toEqual([]);
    } finally {
      await killSleepersIn(box, s);
    }
  }, 30_000);

  it('a command that KILLs its call’s child while its client stays (its stdin never ended), a leftover holding stdout: an unknown end 2 s after the client said so, not at the silence bound', async () => {
    const channel = timing(box.channel);
    await sandbox.exec(channel, ['true'], { resident: true });
    const s = uniqueSecs();
    const input = new Readable({ read() {} });
    input.push('x\n'); // never ended: the client is never let go
    try {
      const t0 = performance.now();
      const call = sandbox.exec(channel, ['sh', '-c', `sleep ${s} & sleep 0.3; kill -KILL $PPID; exit 0`], {
        resident: true,
        input,
        silenceMs: 20_000,
        sweep: { graceMs: 500, killAfterMs: 500 },
      });
      // The client saw its server's child end without a status (125): the call ends as a client's
      // exit always ended it — its output awaited 2 s, then swept (a break attempt: 8.5 s, at the
      // silence bound, after the client was first let go).
      await expect(call).rejects.toMatchObject({ code: 'EXEC_STATUS_UNKNOWN', clientStatus: 125 });
      expect(performance.now() - t0, 'ended long before the 20 s silence bound').toBeLessThan(12_000);
      expect(sleepersIn(box, s), `the leftover sleep ${s} is gone`).toEqual([]);
    } finally {
      input.destroy();
      await killSleepersIn(box, s);
    }
  }, 60_000);
});
