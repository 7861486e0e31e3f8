// `stoppedBy` says what stopped a sandbox session's command, in the one StopReason vocabulary
// (docs/sessions.md, "One name per field"): the session's timeout is `'timeout'`, its signal
// `'cancel'` — on `sandbox.run`'s result, on a session command's, and on the CommandError a
// rejecting run throws. It was null there while `timedOut` / `isCanceled` said true. Real
// processes on this machine (the `env` channel); the command would run 30 s.
import { describe, expect, it } from 'vitest';
import { sandbox, type TetherError } from '../../src/index.js';
import { taggedOnHost } from './container.js';

const channel = sandbox.commandChannel(['env']);
const FAST = { graceMs: 500, killAfterMs: 1000 };
const LONG = ['sleep', '30'];

async function rejection(call: Promise<unknown>): Promise<TetherError & { stoppedBy?: unknown }> {
  try {
    await call;
  } catch (error) {
    return error as TetherError & { stoppedBy?: unknown };
  }
  throw new Error('the call resolved: the command was not stopped');
}

describe('stoppedBy names the session’s timeout and its cancel', () => {
  it("sandbox.run's timeout: the result and the TIMED_OUT error say 'timeout'", async () => {
    const r = await sandbox.run(channel, LONG, { timeout: 300, reject: false, sweep: FAST });
    expect([r.timedOut, r.failed], 'premise broken: the timeout did not end the command').toEqual([
      true,
      true,
    ]);
    expect(r.stoppedBy, 'timedOut, but stoppedBy does not say so').toBe('timeout');
    expect(taggedOnHost(r.tag), 'the timed-out command outlived its session').toEqual([]);
    const error = await rejection(sandbox.run(channel, LONG, { timeout: 300, sweep: FAST }));
    expect([error.code, error.stoppedBy]).toEqual(['TIMED_OUT', 'timeout']);
  }, 20_000);

  it("sandbox.run's signal: the result and the CANCELLED error say 'cancel'", async () => {
    const r = await sandbox.run(channel, LONG, {
      signal: AbortSignal.timeout(300),
      reject: false,
      sweep: FAST,
    });
    expect([r.isCanceled, r.failed], 'premise broken: the abort did not end the command').toEqual([
      true,
      true,
    ]);
    expect(r.stoppedBy, 'isCanceled, but stoppedBy does not say so').toBe('cancel');
    const error = await rejection(
      sandbox.run(channel, LONG, { signal: AbortSignal.timeout(300), sweep: FAST }),
    );
    expect([error.code, error.stoppedBy]).toEqual(['CANCELLED', 'cancel']);
  }, 20_000);

  it("a session command's result: 'timeout' for the session's deadline, 'cancel' for its signal", async () => {
    const timed = sandbox.session(channel, { timeout: 300, sweep: FAST, helper: false });
    const t = await timed.spawn(LONG);
    await timed.end();
    expect([t.timedOut, t.stoppedBy]).toEqual([true, 'timeout']);
    const cancelled = sandbox.session(channel, { signal: AbortSignal.timeout(300), sweep: FAST });
    const c = await cancelled.spawn(LONG);
    await cancelled.end();
    expect([c.isCanceled, c.stoppedBy]).toEqual([true, 'cancel']);
  }, 20_000);
});
