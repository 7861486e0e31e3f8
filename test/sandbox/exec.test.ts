// sandbox.exec against what a caller keeps across calls: one AbortSignal and one pair of output
// streams reused by many calls, each ending a different way. Nothing of a call may stay on them.

import { getEventListeners } from 'node:events';
import { PassThrough, Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import type { ClientExit, ExecChannel } from '../../src/sandbox/index.js';
import { type Container, lossyChannel, sleep, startContainer, taggedOnHost } from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 500, killAfterMs: 500 };
// A pid that names no process: nsenter cannot open its namespaces, as a pod already gone.
const GONE = sandbox.commandChannel(['nsenter', '-t', '2147483646', '-a']);

// The wrapper's exec is cut after `after`; every later exec (the sweep) goes to `then`.
function cutThen(after: string, then: ExecChannel): ExecChannel {
  const cut = lossyChannel(box.channel, { after });
  let first = true;
  return {
    describe: 'cut, then another channel',
    exec(argv) {
      if (!first) return then.exec(argv);
      first = false;
      return cut.exec(argv);
    },
  };
}

// A channel of the caller's own that breaks its contract: `exited` rejects.
const REJECTING: ExecChannel = {
  describe: 'a channel whose exited rejects',
  exec() {
    const out = new PassThrough();
    const err = new PassThrough();
    setTimeout(() => {
      out.end();
      err.end();
    }, 20);
    return {
      stdin: new PassThrough(),
      stdout: out,
      stderr: err,
      exited: new Promise<ClientExit>((_, reject) => setTimeout(() => reject(new Error('client lost')), 20)),
      kill() {
        out.destroy();
        err.destroy();
      },
    };
  },
};

// A stdout that accepts little and drains slowly: backpressure pauses the client's stream.
function slowSink(): Writable {
  return new Writable({
    highWaterMark: 16,
    write(_chunk, _enc, done) {
      setTimeout(done, 5);
    },
  });
}

describe('one AbortSignal and one output stream reused by many calls', () => {
  it('keep no listener of any call once it has ended: success, failure, unknown end, ambiguous, unreachable, bad input, silence, a throwing channel, the abort itself', async () => {
    const abort = new AbortController();
    const signal = abort.signal;
    const stdout = slowSink();
    const stderr = new PassThrough().resume();
    const before = {
      abort: getEventListeners(signal, 'abort').length,
      error: getEventListeners(stdout, 'error').length,
      drain: getEventListeners(stdout, 'drain').length,
    };
    const calls: [name: string, call: () => Promise<unknown>][] = [
      ['a success', () => sandbox.exec(box.channel, ['true'], { signal })],
      [
        'a failure (exit 3)',
        () => sandbox.exec(box.channel, ['sh', '-c', 'exit 3'], { signal, reject: false }),
      ],
      [
        'a streamed success under backpressure',
        () => sandbox.exec(box.channel, ['sh', '-c', 'head -c 20000 /dev/zero'], { signal, stdout, stderr }),
      ],
      [
        'an unknown end (EXEC_STATUS_UNKNOWN)',
        () =>
          sandbox.exec(lossyChannel(box.channel, { after: 'up\n' }), ['sh', '-c', 'echo up; sleep 0.3'], {
            signal,
            sweep: SWEEP,
          }),
      ],
      [
        'an ambiguous effect (the sweep never reached the target)',
        () =>
          sandbox.exec(cutThen('up\n', GONE), ['sh', '-c', 'echo up; sleep 0.3'], {
            signal,
            sweep: { ...SWEEP, budgetMs: 700 },
          }),
      ],
      [
        'a client that could not start (CHANNEL_UNREACHABLE)',
        () => sandbox.exec(sandbox.commandChannel(['/nonexistent/tether-client']), ['true'], { signal }),
      ],
      [
        'bad input (INVALID_OPTION)',
        () => sandbox.exec(box.channel, ['true'], { signal, input: 'x', script: 'y' }),
      ],
      [
        'a stop by silence',
        () =>
          sandbox.exec(box.channel, ['sleep', '5'], { signal, silenceMs: 300, sweep: SWEEP, stdout, stderr }),
      ],
      ['a channel whose exited rejects', () => sandbox.exec(REJECTING, ['true'], { signal, stdout, stderr })],
    ];
    const seen: string[] = [];
    for (let round = 0; round < 2; round++) {
      for (const [name, call] of calls) {
        const outcome = await call().then(
          (r) => `resolved ok=${(r as { ok: boolean }).ok}`,
          (e: Error & { code?: string }) => `threw ${e.code ?? e.message}`,
        );
        seen.push(`${name}: ${outcome}`);
        expect(
          getEventListeners(signal, 'abort').length,
          `abort listeners left after ${name} (${outcome})`,
        ).toBe(before.abort);
        // A call that held the stream for backpressure may end before the stream drains.
        await sleep(50);
        expect(getEventListeners(stdout, 'error').length, `error listeners left after ${name}`).toBe(
          before.error,
        );
        expect(getEventListeners(stdout, 'drain').length, `drain listeners left after ${name}`).toBe(
          before.drain,
        );
      }
    }
    // The premise: the calls ended the ways they are named for.
    expect(seen.join('\n')).toMatch(/a success: resolved ok=true/);
    expect(seen.join('\n')).toMatch(/a failure \(exit 3\): resolved ok=false/);
    expect(seen.join('\n')).toMatch(/an unknown end \(EXEC_STATUS_UNKNOWN\): threw EXEC_STATUS_UNKNOWN/);
    expect(seen.join('\n')).toMatch(/never reached the target\): threw AMBIGUOUS_EFFECT/);
    expect(seen.join('\n')).toMatch(/CHANNEL_UNREACHABLE\): threw CHANNEL_UNREACHABLE/);
    expect(seen.join('\n')).toMatch(/INVALID_OPTION\): threw INVALID_OPTION/);
    expect(seen.join('\n')).toMatch(/a channel whose exited rejects: threw client lost/);

    // The abort itself, during call 19; call 20 starts with the signal already aborted.
    // reject: false — a cancelled proven end rejects by default (CANCELLED).
    const call = sandbox.exec(box.channel, ['sleep', '5'], { signal, sweep: SWEEP, reject: false });
    setTimeout(() => abort.abort(), 300);
    const r = await call;
    expect(r.cancelled, 'premise broken: the call was not cancelled').toBe(true);
    expect(getEventListeners(signal, 'abort').length, 'abort listeners left after the abort').toBe(0);
    const late = await sandbox
      .exec(box.channel, ['sleep', '5'], { signal, sweep: SWEEP })
      .catch((e: Error) => e);
    expect(late instanceof Error ? (late as { code?: string }).code : late.cancelled).toBeTruthy();
    expect(getEventListeners(signal, 'abort').length, 'abort listeners left after an aborted start').toBe(0);
  });
});

describe('an input that is neither bytes nor a stream', () => {
  it('is refused before anything starts: INVALID_OPTION, and no process of the call runs', async () => {
    const tag = createTag();
    const input = new Uint8Array([104, 105, 10]) as unknown as Buffer; // not a Buffer, not a stream
    const outcome = await sandbox.exec(box.channel, ['cat'], { tag, input }).catch((e: Error) => e);
    // Long enough for a wrapper that did start to have started its `cat`.
    await sleep(500);
    const left = taggedOnHost(tag.name);
    for (const p of left) process.kill(p.pid, 'SIGKILL'); // ours: the tag is this test's own
    expect(
      left.map((p) => `pid ${p.pid} (${p.cmdline.slice(0, 60)})`),
      'the call left its command running',
    ).toEqual([]);
    expect((outcome as { code?: string }).code, String(outcome)).toBe('INVALID_OPTION');
    expect((outcome as Error).message).toMatch(/invalid input: a Uint8Array/);
  });
});
