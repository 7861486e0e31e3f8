// isAmbiguousEffect and codeOf through every wrapper an error meets on its way to a caller's
// store: cause chains of any depth, cycles, aggregates, brand-only wrappers, another realm, a
// worker thread, JSON — and the near misses that must stay false.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { runInNewContext } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { TETHER_CODE } from '../../src/errors.js';
import { codeOf, codesIn, hasCode, isAmbiguousEffect, TetherError, toRecord } from '../../src/index.js';
import { MAX_WALK } from '../../src/outcome/classify.js';
import { ROOT } from '../support/paths.js';

const ambiguous = () => new TetherError('AMBIGUOUS_EFFECT', 'the sweep could not settle the command');

function chain(depth: number, innermost: unknown): Error {
  let error: unknown = innermost;
  for (let i = 0; i < depth; i++) error = new Error(`wrapper ${i}`, { cause: error });
  return error as Error;
}

// Runs `body` in a real worker thread, with the built library (dist/) as `tether`.
function inWorker(body: string): Promise<{ messages: unknown[]; error?: unknown }> {
  const code = `const { parentPort } = require('node:worker_threads');
import(${JSON.stringify(pathToFileURL(`${ROOT}/dist/index.js`).href)}).then((tether) => {
${body}
});`;
  return new Promise((resolve) => {
    const messages: unknown[] = [];
    const worker = new Worker(code, { eval: true });
    let error: unknown;
    worker.on('message', (m) => messages.push(m));
    worker.on('error', (e) => {
      error = e;
    });
    worker.on('exit', () => resolve({ messages, error }));
  });
}

describe('isAmbiguousEffect sees an ambiguous effect through', () => {
  it('the TetherError itself, and its code', () => {
    expect(isAmbiguousEffect(ambiguous())).toBe(true);
    expect(codeOf(ambiguous())).toBe('AMBIGUOUS_EFFECT');
  });

  it('cause chains 40 and 5000 deep (no depth cut)', () => {
    expect(isAmbiguousEffect(chain(40, ambiguous()))).toBe(true);
    expect(isAmbiguousEffect(chain(5000, ambiguous()))).toBe(true);
    expect(isAmbiguousEffect(chain(5000, new Error('plain')))).toBe(false);
  });

  it('a cycle of causes, ending (false) without one and finding it (true) with one', () => {
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    Object.assign(a, { cause: b });
    expect(isAmbiguousEffect(a)).toBe(false);
    const c = new Error('c', { cause: ambiguous() });
    Object.assign(a, { cause: c });
    Object.assign(c, { cause: b, errors: [a, ambiguous()] });
    expect(isAmbiguousEffect(b)).toBe(true);
  });

  it("an AggregateError's errors, and an aggregate inside a cause inside an aggregate", () => {
    expect(isAmbiguousEffect(new AggregateError([new Error('x'), ambiguous()], 'two'))).toBe(true);
    const nested = new AggregateError([
      new Error('outer', { cause: new AggregateError([chain(3, ambiguous())]) }),
    ]);
    expect(isAmbiguousEffect(nested)).toBe(true);
    expect(isAmbiguousEffect(new AggregateError([new Error('x'), new Error('y')]))).toBe(false);
  });

  it('a SuppressedError-shaped { error, suppressed }, on either side', () => {
    const suppressed = (error: unknown, s: unknown) =>
      Object.assign(new Error('An error was suppressed during disposal.'), {
        name: 'SuppressedError',
        error,
        suppressed: s,
      });
    expect(isAmbiguousEffect(suppressed(new Error('dispose failed'), ambiguous()))).toBe(true);
    expect(isAmbiguousEffect(suppressed(ambiguous(), new Error('body failed')))).toBe(true);
    expect(isAmbiguousEffect(suppressed(new Error('a'), new Error('b')))).toBe(false);
  });

  it('a wrapper that hides cause and overrides code but keeps the brand', () => {
    class Wrapped extends Error {
      readonly code = 'WRAPPED_FAILURE';
      constructor(inner: TetherError) {
        super(`wrapped: ${inner.message}`);
        Object.defineProperty(this, TETHER_CODE, { value: inner[TETHER_CODE] });
      }
    }
    const wrapped = new Wrapped(ambiguous());
    expect('cause' in wrapped).toBe(false);
    expect(isAmbiguousEffect(wrapped)).toBe(true);
    expect(codeOf(wrapped)).toBe('AMBIGUOUS_EFFECT');
    expect(codesIn(wrapped)).toEqual(['AMBIGUOUS_EFFECT', 'WRAPPED_FAILURE']);
  });

  it('an error from another realm (vm context): own code, cause chain, and its AggregateError', () => {
    const foreign = runInNewContext(`
      const inner = new Error('inner'); inner.code = 'AMBIGUOUS_EFFECT';
      ({ plain: inner, chained: new Error('outer', { cause: new Error('mid', { cause: inner }) }),
         aggregate: new AggregateError([new TypeError('t'), inner], 'agg') })`);
    expect(foreign.plain instanceof Error).toBe(false); // premise: another realm's Error
    expect(foreign.aggregate instanceof AggregateError).toBe(false);
    expect(isAmbiguousEffect(foreign.plain)).toBe(true);
    expect(isAmbiguousEffect(foreign.chained)).toBe(true);
    expect(isAmbiguousEffect(foreign.aggregate)).toBe(true);
  });

  it("a worker's TetherError posted with postMessage (the clone drops code and brand, the stack keeps it)", async () => {
    const { messages } = await inWorker(`
      const e = new tether.TetherError('AMBIGUOUS_EFFECT', 'in the worker');
      parentPort.postMessage(e);
      parentPort.postMessage(new Error('wrapper in the worker', { cause: e }));
      parentPort.postMessage(new tether.TetherError('TIMED_OUT', 'a deadline'));`);
    const [posted, wrapped, timedOut] = messages as Error[];
    // Premise: the structured clone kept neither `code` nor the brand.
    expect(Object.hasOwn(posted as object, 'code')).toBe(false);
    expect((posted as unknown as Record<symbol, unknown>)[TETHER_CODE]).toBeUndefined();
    expect(isAmbiguousEffect(posted)).toBe(true);
    expect(isAmbiguousEffect(wrapped)).toBe(true);
    expect(codeOf(timedOut)).toBe('TIMED_OUT');
    expect(isAmbiguousEffect(timedOut)).toBe(false);
  });

  it("a worker's uncaught TetherError (Node's serializer keeps code), and a record it posted", async () => {
    const thrown = await inWorker(
      `throw new Error('worker died', { cause: new tether.TetherError('AMBIGUOUS_EFFECT', 'x') });`,
    );
    expect(isAmbiguousEffect(thrown.error)).toBe(true);
    // An AggregateError loses its `errors` in a structured clone: a record keeps them.
    const posted = await inWorker(`
      const agg = new AggregateError([new Error('ok'), new tether.TetherError('AMBIGUOUS_EFFECT', 'x')], 'two branches');
      parentPort.postMessage(agg);
      parentPort.postMessage(tether.toRecord(agg));`);
    const [clone, record] = posted.messages;
    expect((clone as { errors?: unknown }).errors).toBeUndefined(); // premise: the clone lost them
    expect(isAmbiguousEffect(record)).toBe(true);
  });

  it('a persisted code read back from JSON', () => {
    expect(isAmbiguousEffect(JSON.parse('{ "code": "AMBIGUOUS_EFFECT" }'))).toBe(true);
    expect(isAmbiguousEffect(JSON.parse(JSON.stringify(ambiguous())))).toBe(true);
    expect(
      isAmbiguousEffect(
        JSON.parse('{ "message": "x", "cause": { "cause": { "code": "AMBIGUOUS_EFFECT" } } }'),
      ),
    ).toBe(true);
  });
});

describe('isAmbiguousEffect is false for', () => {
  it.each([
    ['a code with a trailing S', { code: 'AMBIGUOUS_EFFECTS' }],
    ['a lower-case code', { code: 'ambiguous_effect' }],
    ['a code with a leading space', { code: ' AMBIGUOUS_EFFECT' }],
    ['a code with a trailing space', { code: 'AMBIGUOUS_EFFECT ' }],
    ['the code as a cause string', new Error('x', { cause: 'AMBIGUOUS_EFFECT' })],
    ['the code in a message', new Error('[AMBIGUOUS_EFFECT]: x')],
    [
      'a near-miss in a stack header',
      Object.assign(new Error('x'), { stack: 'Error [AMBIGUOUS_EFFECTS]: x' }),
    ],
    ['another code', new TetherError('EXEC_STATUS_UNKNOWN', 'settled')],
    ['a plain string', 'AMBIGUOUS_EFFECT'],
    ['null', null],
    ['undefined', undefined],
    ['a number', 42],
    ['a symbol', Symbol('AMBIGUOUS_EFFECT')],
  ])('%s', (_label, value) => {
    expect(isAmbiguousEffect(value)).toBe(false);
  });
});

describe('hostile errors do not crash it', () => {
  it('getters that throw', () => {
    const hostile = {};
    for (const key of ['code', 'cause', 'errors', 'error', 'suppressed', 'stack']) {
      Object.defineProperty(hostile, key, {
        get() {
          throw new Error(`getter ${key}`);
        },
      });
    }
    Object.defineProperty(hostile, TETHER_CODE, {
      get() {
        throw new Error('brand getter');
      },
    });
    expect(isAmbiguousEffect(hostile)).toBe(false);
    expect(codeOf(hostile)).toBeUndefined();
    expect(isAmbiguousEffect(new Error('outer', { cause: [hostile, ambiguous()] }))).toBe(false); // an array is no error
    expect(isAmbiguousEffect(new AggregateError([hostile, ambiguous()]))).toBe(true);
  });

  it('a Proxy whose every trap throws, a revoked Proxy, and one with a fresh cause at every read', () => {
    const throwing = new Proxy(
      {},
      {
        get() {
          throw new Error('trap');
        },
        has() {
          throw new Error('trap');
        },
        getPrototypeOf() {
          throw new Error('trap');
        },
      },
    );
    expect(isAmbiguousEffect(throwing)).toBe(false);
    const { proxy, revoke } = Proxy.revocable([], {});
    revoke();
    expect(isAmbiguousEffect(proxy)).toBe(false);
    expect(isAmbiguousEffect({ errors: proxy, cause: ambiguous() })).toBe(true);
    let reads = 0;
    const fresh = (): object =>
      new Proxy(
        {},
        {
          get(_t, key) {
            if (key !== 'cause') return undefined;
            reads += 1;
            return fresh();
          },
        },
      );
    const endless = fresh();
    expect(isAmbiguousEffect(endless)).toBe(false);
    expect(reads).toBeGreaterThan(100); // premise: it did follow the fresh causes, and stopped
    const codedProxy = new Proxy({}, { get: (_t, key) => (key === 'code' ? 'AMBIGUOUS_EFFECT' : undefined) });
    expect(isAmbiguousEffect(codedProxy)).toBe(true);
  });

  // The walk bounds its queue, not only what it visits: a Proxy whose every `errors` read is
  // 10,000 fresh Proxies (each with the same) ran Node out of heap. The hostile graph stops
  // making Proxies past 300,000, so that an unbounded walk ends here, and fails the count.
  it('a Proxy whose every errors read is 10,000 fresh Proxies: at most a few fans are made', () => {
    let made = 0;
    const fresh = (): object => {
      made += 1;
      return new Proxy(
        {},
        {
          get: (_t, key) =>
            key === 'errors' && made < 300_000 ? Array.from({ length: 10_000 }, fresh) : undefined,
        },
      );
    };
    expect(isAmbiguousEffect(fresh())).toBe(false);
    expect(made).toBeGreaterThan(10_000); // premise: it read the first fan
    expect(made).toBeLessThanOrEqual(2 * 10_000 + 1);
  });

  it('an errors Proxy of length 2^32 − 1: at most MAX_WALK elements are read', () => {
    let reads = 0;
    const errors = new Proxy([], {
      get: (t, key) => {
        if (key === 'length') return 2 ** 32 - 1;
        if (typeof key === 'string' && /^\d+$/.test(key) && ++reads > 1_000_000) throw new Error('unbounded');
        return Reflect.get(t, key);
      },
    });
    const error = Object.assign(new Error('x'), { errors });
    expect(isAmbiguousEffect(error)).toBe(false);
    expect(reads).toBeLessThanOrEqual(MAX_WALK);
    reads = 0;
    const record = toRecord(error);
    expect(reads).toBeGreaterThan(0); // premise: it read the elements
    expect(reads).toBeLessThanOrEqual(MAX_WALK);
    expect(record.errors?.at(-1)?.name).toBe('ErrorRecordCut');
    expect(() => JSON.stringify(record)).not.toThrow();
  });
});

describe('codeOf and hasCode', () => {
  it("read another library's code, and the exact code anywhere in the graph", () => {
    let enoent: unknown;
    try {
      readFileSync('/nonexistent/tether-outcome');
    } catch (error) {
      enoent = error;
    }
    expect(codeOf(enoent)).toBe('ENOENT');
    expect(hasCode(new Error('outer', { cause: enoent }), 'ENOENT')).toBe(true);
    expect(hasCode(new Error('outer', { cause: enoent }), 'enoent')).toBe(false);
    expect(codeOf(new Error('no code'))).toBeUndefined();
    expect(codeOf(Object.assign(new Error('numeric'), { code: 20 }))).toBeUndefined();
  });

  it("a TetherError's stack names its code, and a subclass's name", () => {
    expect(ambiguous().stack?.split('\n')[0]).toBe(
      'TetherError [AMBIGUOUS_EFFECT]: the sweep could not settle the command',
    );
    expect(String(ambiguous())).toBe('TetherError: the sweep could not settle the command');
  });
});
