// fanOut over the 3 policies × the 4 causes of a cancel × both sides of the grace, with real
// timers kept short; assertions are on outcome and order, never on elapsed time.
import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type Branch,
  type FanOutError,
  type FanOutEvent,
  type FanOutPolicy,
  type FanOutResult,
  fanOut,
  isAmbiguousEffect,
  TetherError,
} from '../../src/index.js';
import { FAN_OUT_POLICIES } from '../../src/outcome/fan-out.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

// Fulfils with `value` after `ms`, aborted or not.
const quick =
  <T>(value: T, ms = 1): Branch<T> =>
  () =>
    sleep(ms).then(() => value);
// Fulfils with `value` after `ms` unless aborted; on abort, rejects with the signal's reason 5 ms later.
function yields<T>(value: T, ms = 40): Branch<T> & { aborted: () => boolean } {
  let seen: AbortSignal | undefined;
  const branch = (signal: AbortSignal) => {
    seen = signal;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => resolve(value), ms);
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        setTimeout(() => reject(signal.reason), 5);
      });
    });
  };
  return Object.assign(branch, { aborted: () => seen?.aborted === true });
}
// Ignores its abort: pending until the test calls release().
function stubborn<T>(): Branch<T> & {
  release: (v: T) => void;
  settled: () => boolean;
  aborted: () => boolean;
} {
  let resolve!: (v: T) => void;
  let settled = false;
  let seen: AbortSignal | undefined;
  const promise = new Promise<T>((r) => {
    resolve = r;
  }).finally(() => {
    settled = true;
  });
  const branch = (signal: AbortSignal) => {
    seen = signal;
    return promise;
  };
  return Object.assign(branch, {
    release: (v: T) => resolve(v),
    settled: () => settled,
    aborted: () => seen?.aborted === true,
  });
}
const failing =
  (ms = 10): Branch<never> =>
  () =>
    sleep(ms).then(() => {
      throw new Error('boom');
    });

type Cause = 'signal' | 'sibling' | 'timeout' | 'stop';
const CAUSES: Cause[] = ['signal', 'sibling', 'timeout', 'stop'];
const releases: (() => void)[] = [];
afterEach(() => {
  for (const r of releases.splice(0)) r();
});

async function outcome<T>(
  p: PromiseLike<FanOutResult<T>>,
): Promise<{ ok?: FanOutResult<T>; err?: FanOutError<T> }> {
  try {
    return { ok: await p };
  } catch (err) {
    return { err: err as FanOutError<T> };
  }
}

describe.each(FAN_OUT_POLICIES.map((p) => [p]))('%s', (policy: FanOutPolicy) => {
  describe.each(CAUSES.map((c) => [c]))('cancelled by %s', (cause: Cause) => {
    it('a branch that settles within the grace: the cancel decides (or, without one, the policy)', async () => {
      const before = timers();
      const caller = new AbortController();
      const middle = yields('slow');
      const branches: Branch<string>[] = [quick('a'), middle];
      if (cause === 'sibling') branches.push(failing());
      const events: FanOutEvent[] = [];
      const handle = fanOut(branches, {
        policy,
        graceMs: 1000,
        signal: caller.signal,
        ...(cause === 'timeout' ? { timeoutMs: 10 } : {}),
        onEvent: (e) => events.push(e),
      });
      if (cause === 'signal') setTimeout(() => caller.abort(new Error('the caller gave up')), 10);
      if (cause === 'stop') setTimeout(() => handle.stop('budget refused'), 10);
      const { ok, err } = await outcome(handle);

      expect(events.some((e) => e.type === 'branch_abandoned')).toBe(false);
      expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
      expect(timers()).toBeLessThanOrEqual(before);
      if (cause === 'sibling' && policy !== 'fail-fast') {
        // A failure is no cancel under wait-all and best-effort: the slow branch ran to its end.
        expect(middle.aborted()).toBe(false);
        expect((ok ?? err)?.results).toEqual(['a', 'slow', undefined]);
        expect(((ok ?? err)?.errors[2] as Error | undefined)?.message).toBe('boom');
        if (policy === 'best-effort') expect(ok).toBeDefined();
        else expect(err?.code).toBe('COMMAND_FAILED');
        return;
      }
      expect(middle.aborted()).toBe(true);
      expect(ok).toBeUndefined();
      expect(err?.outcomes.map((o) => o.status).slice(0, 2)).toEqual(['fulfilled', 'rejected']);
      expect(err?.results[0]).toBe('a');
      const expected = {
        signal: 'CANCELLED',
        stop: 'CANCELLED',
        timeout: 'TIMED_OUT',
        sibling: 'COMMAND_FAILED',
      }[cause];
      expect(err?.code).toBe(expected);
      expect(err?.cancelledBy).toBe(cause);
      if (cause === 'stop') expect(err?.cause).toBe('budget refused');
      if (cause === 'signal') expect((err?.cause as Error | undefined)?.message).toBe('the caller gave up');
      if (cause === 'sibling') expect((err?.cause as Error | undefined)?.message).toBe('boom');
      expect(isAmbiguousEffect(err)).toBe(false);
    });

    it('a branch still pending when the grace ends: undecided, and the fan-out rejects before the join', async () => {
      const before = timers();
      const caller = new AbortController();
      const stuck = stubborn<string>();
      releases.push(() => stuck.release('released by the test'));
      const branches: Branch<string>[] = [quick('a'), stuck];
      if (cause === 'sibling') branches.push(failing());
      const events: FanOutEvent[] = [];
      const handle = fanOut(branches, {
        policy,
        graceMs: 30,
        signal: caller.signal,
        ...(cause === 'timeout' ? { timeoutMs: 10 } : {}),
        onEvent: (e) => events.push(e),
      });
      if (cause === 'signal') setTimeout(() => caller.abort(), 10);
      if (cause === 'stop') setTimeout(() => handle.stop(new Error('paused')), 10);

      if (cause === 'sibling' && policy !== 'fail-fast') {
        // No cancel, so no grace: the fan-out waits for the pending branch, however long.
        let settled = false;
        void handle.then(
          () => (settled = true),
          () => (settled = true),
        );
        await sleep(80);
        expect(settled).toBe(false);
        expect(stuck.aborted()).toBe(false);
        stuck.release('late');
        const { ok, err } = await outcome(handle);
        expect((ok ?? err)?.results).toEqual(['a', 'late', undefined]);
        expect(policy === 'best-effort' ? ok : err?.code).toEqual(
          policy === 'best-effort' ? expect.anything() : 'COMMAND_FAILED',
        );
        return;
      }
      const { ok, err } = await outcome(handle);
      expect(stuck.settled()).toBe(false); // rejected before the join: the branch is still pending
      expect(stuck.aborted()).toBe(true);
      expect(ok).toBeUndefined();
      expect(err?.code).toBe('AMBIGUOUS_EFFECT');
      expect(isAmbiguousEffect(err)).toBe(true);
      expect(err?.outcomes[1]?.status).toBe('abandoned');
      const abandoned = events.filter((e) => e.type === 'branch_abandoned');
      expect(abandoned.map((e) => e.index)).toEqual([1]);
      const error = abandoned[0]?.type === 'branch_abandoned' ? abandoned[0].error : undefined;
      expect(error?.code).toBe('AMBIGUOUS_EFFECT');
      expect((error?.cause as TetherError | undefined)?.code).toBe('BRANCH_UNDECIDED');
      expect(err?.cause).toBe(error);
      expect(err?.results[0]).toBe('a');
      expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
      expect(timers()).toBeLessThanOrEqual(before);
    });
  });
});

describe('fanOut', () => {
  it('keeps branch order in results and errors, not completion order', async () => {
    const r = await fanOut([quick('slow', 30), quick('fast', 1), quick('mid', 10)], { policy: 'wait-all' });
    expect(r.results).toEqual(['slow', 'fast', 'mid']);
    const e = await outcome(fanOut<string>([failing(30), quick('x'), failing(1)], { policy: 'wait-all' }));
    expect(e.err?.errors.map((x) => (x as Error | undefined)?.message)).toEqual(['boom', undefined, 'boom']);
    expect(e.err?.cause).toBe(e.err?.errors[0]); // lowest index, though branch 2 failed first
  });

  it('a branch that rejects with an ambiguous effect: every policy rejects, the lowest index decides', async () => {
    for (const policy of FAN_OUT_POLICIES) {
      const late = new TetherError('AMBIGUOUS_EFFECT', 'branch 1, late in time');
      const branches: Branch<string>[] = [
        quick('a'),
        (signal) =>
          new Promise((_, reject) =>
            signal.addEventListener('abort', () => setTimeout(() => reject(late), 10)),
          ),
        yields('c'),
        () =>
          sleep(5).then(() => Promise.reject(new TetherError('AMBIGUOUS_EFFECT', 'branch 3, first in time'))),
      ];
      const { err } = await outcome(fanOut(branches, { policy, graceMs: 1000 }));
      expect(err?.code, policy).toBe('AMBIGUOUS_EFFECT');
      expect(err?.cancelledBy).toBe('ambiguous');
      expect(err?.cause).toBe(late);
      expect(err?.outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'rejected']);
    }
  });

  it('two abandoned branches: the lower index is the cause', async () => {
    const one = stubborn<string>();
    const two = stubborn<string>();
    releases.push(
      () => one.release(''),
      () => two.release(''),
    );
    const handle = fanOut([quick('a'), two, one], { graceMs: 20 });
    setTimeout(() => handle.stop(), 5);
    const { err } = await outcome(handle);
    expect(err?.code).toBe('AMBIGUOUS_EFFECT');
    expect((err?.cause as Error | undefined)?.message).toMatch(/^branch 1 /);
    expect(err?.outcomes.map((o) => o.status)).toEqual(['fulfilled', 'abandoned', 'abandoned']);
  });

  it('an ambiguous effect outranks a deadline that landed with it', async () => {
    const { err } = await outcome(
      fanOut(
        [
          (signal) =>
            new Promise((_, reject) =>
              signal.addEventListener('abort', () =>
                reject(new TetherError('AMBIGUOUS_EFFECT', 'could not settle')),
              ),
            ),
        ],
        { timeoutMs: 5, graceMs: 1000 },
      ),
    );
    expect(err?.code).toBe('AMBIGUOUS_EFFECT');
    expect(err?.cancelledBy).toBe('timeout');
  });

  it('starts no branch under a signal already aborted, and rejects CANCELLED', async () => {
    let started = 0;
    const { err } = await outcome(
      fanOut(
        [
          async () => {
            started += 1;
          },
        ],
        { signal: AbortSignal.abort(new Error('before')) },
      ),
    );
    expect(started).toBe(0);
    expect(err?.code).toBe('CANCELLED');
  });

  it('takes a branch that throws synchronously as a rejection, and ignores a listener that throws', async () => {
    const { err } = await outcome(
      fanOut(
        [
          () => {
            throw new TypeError('sync');
          },
        ],
        {
          onEvent: () => {
            throw new Error('listener');
          },
        },
      ),
    );
    expect(err?.code).toBe('COMMAND_FAILED');
    expect((err?.cause as Error | undefined)?.message).toBe('sync');
    expect((await fanOut([])).results).toEqual([]);
  });

  // Promise.resolve(value) reads `value.constructor`: it ran outside the guard, so fanOut threw
  // synchronously after branch 0 had started, and the caller had no handle to stop it.
  it('a branch whose promise has a throwing constructor getter is a failed branch, not a synchronous throw', async () => {
    const first = yields('b0', 5_000);
    const hostile: Branch<string> = () => {
      const p = Promise.resolve('b1');
      Object.defineProperty(p, 'constructor', {
        get() {
          throw new Error('hostile constructor');
        },
      });
      return p;
    };
    const thenThrows: Branch<string> = () =>
      Object.defineProperty(Promise.resolve('b2'), 'then', {
        get() {
          throw new Error('hostile then');
        },
      });
    let run: ReturnType<typeof fanOut<string>> | undefined;
    expect(() => {
      run = fanOut([first, hostile, thenThrows], { policy: 'fail-fast', graceMs: 200 });
    }).not.toThrow();
    const error = (await run?.then(
      () => undefined,
      (e: unknown) => e,
    )) as FanOutError;
    expect(error.code).toBe('COMMAND_FAILED');
    expect(error.outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect((error.errors[1] as Error).message).toBe('hostile constructor');
    expect((error.errors[2] as Error).message).toBe('hostile then');
    expect(first.aborted()).toBe(true); // the started branch was stopped
  });

  it('a failure after the cancel that only says it was stopped is not the cause', async () => {
    // Branch 0 answers its abort with its own CANCELLED; branch 1's TypeError started it all.
    const { err } = await outcome(
      fanOut<string>(
        [
          (signal) =>
            new Promise((_, reject) =>
              signal.addEventListener('abort', () => reject(new TetherError('CANCELLED', 'I was stopped'))),
            ),
          () => sleep(5).then(() => Promise.reject(new TypeError('the real failure'))),
        ],
        { graceMs: 1000 },
      ),
    );
    expect(err?.code).toBe('COMMAND_FAILED');
    expect((err?.cause as Error | undefined)?.message).toBe('the real failure');
  });
});

describe('fanOut options', () => {
  it.each([
    [
      [quick(1)],
      { policy: 'fast' },
      /invalid policy: "fast" \(expected one of 'fail-fast', 'wait-all', 'best-effort'\)/,
    ],
    [[quick(1)], { graceMs: -1 }, /invalid graceMs: -1/],
    [[quick(1)], { timeoutMs: '10' }, /invalid timeoutMs: 10/],
    [[quick(1)], { signal: {} }, /invalid signal/],
    [[quick(1)], { onEvent: 3 }, /invalid onEvent/],
    ['not an array', {}, /invalid branches/],
    [[1], {}, /invalid branches/],
  ])('%j %j → INVALID_OPTION', (branches, options, message) => {
    let error: unknown;
    try {
      fanOut(branches as never, options as never);
    } catch (e) {
      error = e;
    }
    expect((error as TetherError).code).toBe('INVALID_OPTION');
    expect((error as Error).message).toMatch(message);
  });

  it('TETHER_BRANCH_CANCEL_GRACE sets the grace, and a bad value is an INVALID_OPTION naming it', async () => {
    const saved = process.env.TETHER_BRANCH_CANCEL_GRACE;
    try {
      for (const [text, ms] of [
        ['20', 20],
        ['1.5s', 1500],
        ['250ms', 250],
      ] as const) {
        process.env.TETHER_BRANCH_CANCEL_GRACE = text;
        const events: FanOutEvent[] = [];
        const handle = fanOut([quick('a', 1)], { onEvent: (e) => events.push(e) });
        handle.stop();
        await outcome(handle);
        expect(events.find((e) => e.type === 'fanout_cancel')).toMatchObject({ graceMs: ms });
      }
      for (const bad of ['abc', '-5', '5 s', '', '99999999999']) {
        process.env.TETHER_BRANCH_CANCEL_GRACE = bad;
        expect(() => fanOut([quick(1)])).toThrow(
          /invalid TETHER_BRANCH_CANCEL_GRACE=.*expected whole milliseconds/,
        );
      }
      process.env.TETHER_BRANCH_CANCEL_GRACE = 'abc';
      expect(() => fanOut([quick(1)], { graceMs: 10 })).not.toThrow(); // the option wins
    } finally {
      if (saved === undefined) delete process.env.TETHER_BRANCH_CANCEL_GRACE;
      else process.env.TETHER_BRANCH_CANCEL_GRACE = saved;
    }
  });
});
