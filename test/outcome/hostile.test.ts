// Classification, records and fan-outs over hostile error graphs (fast-check): Proxies whose traps
// throw or answer a Symbol, revoked Proxies, `errors` arrays whose length is a Symbol or an object
// whose valueOf / Symbol.toPrimitive throws, throwing getters, cycles, frozen and null-prototype
// objects. None of them throws, a fan-out always settles, and an AMBIGUOUS_EFFECT that can be read
// anywhere in the graph is never lost: the oracle below reads each described graph the way its
// description says it can be read, and the codes it finds are the codes tether finds.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { codesIn, errorsIn, hasCode, isAmbiguousEffect } from '../../src/outcome/classify.js';
import { type FanOutPolicy, fanOut } from '../../src/outcome/fan-out.js';
import { classify, precedence } from '../../src/outcome/precedence.js';
import { fromRecord, toRecord, UNREADABLE_NAME } from '../../src/outcome/record.js';
import { counted, sample } from '../support/full.js';

const CODES = ['AMBIGUOUS_EFFECT', 'CANCELLED', 'TIMED_OUT', 'ENOENT', 'AMBIGUOUS_EFFECTS'] as const;
/** The fields a hostile node may refuse (throw) or answer with a Symbol. */
const FIELDS = ['code', 'cause', 'errors', 'error', 'suppressed', 'name', 'message', 'stack'] as const;
type Field = (typeof FIELDS)[number];

/** How a node's object is made. */
type Kind = 'error' | 'plain' | 'frozen' | 'null-proto' | 'getters' | 'error-getters' | 'proxy' | 'revoked';
/** How a node's `errors` array is made. */
type Wrap =
  | 'array'
  | 'frozen-array'
  | 'symbol-length'
  | 'valueof-throws'
  | 'toprimitive-throws'
  | 'string-length'
  | 'throwing-index'
  | 'revoked-array';
/** What a refusing read throws. */
type Thrown = 'error' | 'string' | 'symbol' | 'hostile-proxy' | 'undefined';
/** A member: another node (by index, modulo the graph's size), a primitive, or nothing. */
type Ref = number | 'AMBIGUOUS_EFFECT' | undefined;

interface NodeSpec {
  kind: Kind;
  code: (typeof CODES)[number] | undefined;
  cause: Ref;
  errors: { members: Ref[]; wrap: Wrap; bad: number } | undefined;
  pair: [Ref, Ref] | undefined;
  throwOn: Field[];
  symbolOn: Field[];
  thrown: Thrown;
}

const ref: fc.Arbitrary<Ref> = fc.oneof(
  { weight: 6, arbitrary: fc.nat(20) },
  { weight: 1, arbitrary: fc.constant('AMBIGUOUS_EFFECT' as const) },
  { weight: 1, arbitrary: fc.constant(undefined) },
);

const nodeSpec: fc.Arbitrary<NodeSpec> = fc.record({
  kind: fc.constantFrom<Kind>(
    'error',
    'plain',
    'frozen',
    'null-proto',
    'getters',
    'error-getters',
    'proxy',
    'revoked',
  ),
  code: fc.option(fc.constantFrom(...CODES), { nil: undefined }),
  cause: ref,
  errors: fc.option(
    fc.record({
      members: fc.array(ref, { maxLength: 5 }),
      wrap: fc.constantFrom<Wrap>(
        'array',
        'frozen-array',
        'symbol-length',
        'valueof-throws',
        'toprimitive-throws',
        'string-length',
        'throwing-index',
        'revoked-array',
      ),
      bad: fc.nat(4),
    }),
    { nil: undefined },
  ),
  pair: fc.option(fc.tuple(ref, ref), { nil: undefined }),
  throwOn: fc.subarray([...FIELDS]),
  symbolOn: fc.subarray([...FIELDS]),
  thrown: fc.constantFrom<Thrown>('error', 'string', 'symbol', 'hostile-proxy', 'undefined'),
});

const graphSpec = fc.array(nodeSpec, { minLength: 1, maxLength: 8 });

/** A thrown value that is itself hostile: every trap of it throws. */
function hostileThrown(): object {
  const boom = () => {
    throw new Error('the thrown value is hostile too');
  };
  return new Proxy(
    {},
    { get: boom, has: boom, getOwnPropertyDescriptor: boom, getPrototypeOf: boom, ownKeys: boom },
  );
}

function throwIt(kind: Thrown): never {
  if (kind === 'error') throw new Error('a hostile read');
  if (kind === 'string') throw 'a hostile read';
  if (kind === 'symbol') throw Symbol('hostile');
  if (kind === 'hostile-proxy') throw hostileThrown();
  throw undefined;
}

function revoked<T extends object>(target: T): T {
  const { proxy, revoke } = Proxy.revocable(target, {});
  revoke();
  return proxy;
}

/** What one node's field reads as: refused (it throws), or its value. */
type Read = { throws: true } | { throws: false; value: unknown };

/** Builds the graph a spec describes; `graph[0]` is the root. */
function build(spec: NodeSpec[]): unknown[] {
  const n = spec.length;
  const at = (r: Ref, exposed: unknown[]) => (typeof r === 'number' ? exposed[r % n] : r);
  const targets: Record<string, unknown>[] = spec.map((s) => {
    if (s.kind === 'null-proto') return Object.create(null);
    // (Getters on a plain object: redefining an Error's own `stack` makes V8 format it first.)
    if (s.kind === 'plain' || s.kind === 'getters') return {};
    return new Error('a hostile node') as unknown as Record<string, unknown>;
  });
  const exposed: unknown[] = spec.map((s, i) => {
    const target = targets[i] as object;
    if (s.kind === 'revoked') return revoked(target);
    if (s.kind !== 'proxy') return target;
    const boom = () => throwIt(s.thrown);
    return new Proxy(target, {
      get(t, key, receiver) {
        if ((s.throwOn as PropertyKey[]).includes(key)) throwIt(s.thrown);
        if ((s.symbolOn as PropertyKey[]).includes(key)) return Symbol(String(key));
        return Reflect.get(t, key, receiver);
      },
      has: boom,
      getOwnPropertyDescriptor: boom,
      getPrototypeOf: boom,
      ownKeys: boom,
      defineProperty: boom,
    });
  });
  spec.forEach((s, i) => {
    const target = targets[i] as Record<string, unknown>;
    const values: Partial<Record<Field, unknown>> = {};
    if (s.code !== undefined) values.code = s.code;
    if (s.cause !== undefined) values.cause = at(s.cause, exposed);
    if (s.errors) values.errors = makeArray(s.errors, (r) => at(r, exposed), s.thrown);
    if (s.pair) {
      values.error = at(s.pair[0], exposed);
      values.suppressed = at(s.pair[1], exposed);
    }
    if (s.kind === 'getters' || s.kind === 'error-getters') {
      // An Error's own `stack` is left as V8 made it: read, V8 formats it through the getters of
      // `name` and `message`, which may throw or answer a Symbol.
      for (const field of FIELDS) {
        if (s.kind === 'error-getters' && field === 'stack') continue;
        Object.defineProperty(target, field, {
          configurable: true,
          get() {
            if (s.throwOn.includes(field)) throwIt(s.thrown);
            if (s.symbolOn.includes(field)) return Symbol(field);
            return values[field];
          },
        });
      }
    } else {
      for (const [field, value] of Object.entries(values)) target[field] = value;
    }
    if (s.kind === 'frozen') Object.freeze(target);
  });
  return exposed;
}

function makeArray(e: NonNullable<NodeSpec['errors']>, at: (r: Ref) => unknown, thrown: Thrown): unknown {
  const array = e.members.map(at);
  if (e.wrap === 'array') return array;
  if (e.wrap === 'frozen-array') return Object.freeze(array);
  if (e.wrap === 'revoked-array') return revoked(array);
  const length: unknown =
    e.wrap === 'symbol-length'
      ? Symbol('length')
      : e.wrap === 'valueof-throws'
        ? {
            valueOf() {
              throwIt(thrown);
            },
          }
        : e.wrap === 'toprimitive-throws'
          ? {
              [Symbol.toPrimitive]() {
                throwIt(thrown);
              },
            }
          : e.wrap === 'string-length'
            ? String(array.length)
            : array.length;
  return new Proxy(array, {
    get(t, key, receiver) {
      if (key === 'length') return length;
      if (e.wrap === 'throwing-index' && key === String(e.bad % Math.max(1, t.length))) throwIt(thrown);
      return Reflect.get(t, key, receiver);
    },
  });
}

/**
 * The oracle: every code the graph states where it can be read, walked as the spec says each
 * read goes (a refused read holds nothing; a Symbol is no code and no error; an `errors` whose
 * length is no number holds nothing; a throwing index holds nothing at that index).
 */
function readableCodes(spec: NodeSpec[]): Set<string> {
  const n = spec.length;
  const read = (s: NodeSpec, field: Field): Read => {
    if (s.kind === 'revoked') return { throws: true };
    const hostile = s.kind === 'getters' || s.kind === 'error-getters' || s.kind === 'proxy';
    if (hostile && s.throwOn.includes(field)) return { throws: true };
    if (hostile && s.symbolOn.includes(field)) return { throws: false, value: Symbol(field) };
    const value =
      field === 'code'
        ? s.code
        : field === 'cause'
          ? s.cause
          : field === 'error'
            ? s.pair?.[0]
            : field === 'suppressed'
              ? s.pair?.[1]
              : undefined;
    return { throws: false, value };
  };
  const codes = new Set<string>();
  const seen = new Set<number>([0]);
  const queue = [0];
  const follow = (r: unknown) => {
    if (typeof r !== 'number' || seen.has(r % n)) return;
    seen.add(r % n);
    queue.push(r % n);
  };
  for (let q = queue.shift(); q !== undefined; q = queue.shift()) {
    const s = spec[q] as NodeSpec;
    const code = read(s, 'code');
    if (!code.throws && typeof code.value === 'string') codes.add(code.value);
    const cause = read(s, 'cause');
    if (!cause.throws) follow(cause.value);
    const errors = s.kind === 'revoked' ? undefined : read(s, 'errors');
    if (s.errors && errors && !errors.throws && typeof errors.value !== 'symbol') {
      const readable = ['array', 'frozen-array', 'throwing-index'].includes(s.errors.wrap);
      if (readable) {
        const bad = s.errors.bad % Math.max(1, s.errors.members.length);
        s.errors.members.forEach((m, i) => {
          if (!(s.errors?.wrap === 'throwing-index' && i === bad)) follow(m);
        });
      }
    }
    for (const field of ['error', 'suppressed'] as const) {
      const r = read(s, field);
      if (!r.throws) follow(r.value);
    }
  }
  return codes;
}

// Random graphs per property: a sample by default, all 400 with TETHER_TEST_FULL=1 (npm run stress).
const FULL_RUNS = 400;
const RUNS = sample(100, FULL_RUNS);
const GRAPHS = counted(RUNS, FULL_RUNS, 'random graphs');

describe('classification over hostile error graphs', () => {
  it(`isAmbiguousEffect, codesIn, hasCode, classify and errorsIn never throw, and find exactly the codes that can be read, over ${GRAPHS}`, () => {
    fc.assert(
      fc.property(graphSpec, (spec) => {
        const root = build(spec)[0];
        const expected = readableCodes(spec);
        expect(new Set(codesIn(root)), 'codesIn found other codes than the graph states').toEqual(expected);
        expect(isAmbiguousEffect(root), 'isAmbiguousEffect lost (or invented) an ambiguous effect').toBe(
          expected.has('AMBIGUOUS_EFFECT'),
        );
        expect(hasCode(root, 'CANCELLED')).toBe(expected.has('CANCELLED'));
        let winner: string | undefined;
        for (const code of expected) winner = precedence(winner, code);
        expect(classify(root), 'classify chose another winner').toBe(winner);
        expect(errorsIn(root).length).toBeGreaterThan(0);
      }),
      { numRuns: RUNS },
    );
  });

  it(`toRecord never throws, its JSON never throws, and fromRecord of it keeps every readable ambiguous effect, over ${GRAPHS}`, () => {
    fc.assert(
      fc.property(graphSpec, (spec) => {
        const root = build(spec)[0];
        const record = toRecord(root);
        const json = JSON.stringify(record);
        const back = fromRecord(json);
        expect(isAmbiguousEffect(back), `the record ${json.slice(0, 400)} lost an ambiguous effect`).toBe(
          readableCodes(spec).has('AMBIGUOUS_EFFECT'),
        );
        expect(fromRecord(root)).toBeInstanceOf(Error);
      }),
      { numRuns: RUNS },
    );
  });

  it('a member that cannot be read is recorded as unreadable, beside the ambiguous effect read before it', () => {
    const ambiguous = { code: 'AMBIGUOUS_EFFECT' };
    const cases: [string, unknown][] = [
      [
        'a Symbol length',
        new Proxy([], { get: (t, k) => (k === 'length' ? Symbol('n') : Reflect.get(t, k)) }),
      ],
      [
        'a length whose valueOf throws',
        new Proxy([], {
          get: (t, k) =>
            k === 'length'
              ? {
                  valueOf() {
                    throw new Error('valueOf');
                  },
                }
              : Reflect.get(t, k),
        }),
      ],
      [
        'a length whose Symbol.toPrimitive throws',
        new Proxy([], {
          get: (t, k) =>
            k === 'length'
              ? {
                  [Symbol.toPrimitive]() {
                    throw new Error('toPrimitive');
                  },
                }
              : Reflect.get(t, k),
        }),
      ],
      [
        'a throwing errors getter',
        undefined, // built below: the getter is on the error itself
      ],
    ];
    for (const [what, errors] of cases) {
      const error = new Error(`holds ${what}`, { cause: ambiguous });
      if (errors === undefined)
        Object.defineProperty(error, 'errors', {
          get() {
            throw new Error('no errors for you');
          },
        });
      else Object.assign(error, { errors });
      expect(isAmbiguousEffect(error), `${what}: the cause's ambiguous effect was dropped`).toBe(true);
      const record = toRecord(error);
      expect(record.cause, `${what}: the cause`).toMatchObject({ code: 'AMBIGUOUS_EFFECT' });
      expect(record.errors?.[0]?.name, `${what}: the unreadable member`).toBe(UNREADABLE_NAME);
      expect(record.errors?.[0]?.message).toMatch(/could not be read: errors: /);
      expect(isAmbiguousEffect(fromRecord(JSON.stringify(record)))).toBe(true);
    }
  });
});

describe('fanOut over hostile rejections', () => {
  const POLICIES: FanOutPolicy[] = ['fail-fast', 'wait-all', 'best-effort'];
  it('always settles, under every policy, and rejects AMBIGUOUS_EFFECT exactly when a readable one was thrown', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.option(graphSpec, { nil: undefined }), { minLength: 1, maxLength: 4 }),
        fc.constantFrom(...POLICIES),
        async (branchSpecs, policy) => {
          const reasons = branchSpecs.map((spec) => (spec ? build(spec)[0] : undefined));
          const ambiguous = branchSpecs.some((spec) => spec && readableCodes(spec).has('AMBIGUOUS_EFFECT'));
          const run = fanOut(
            reasons.map((reason, i) => () => (branchSpecs[i] ? Promise.reject(reason) : Promise.resolve(i))),
            { policy, graceMs: 50 },
          );
          // A bound nearer than any fan-out of this size needs: a fan-out that never settles fails here.
          let bound: NodeJS.Timeout | undefined;
          const settled = await Promise.race([
            run.then(
              () => ({ ok: true as const }),
              (error: unknown) => ({ ok: false as const, error }),
            ),
            new Promise<'unsettled'>((r) => {
              bound = setTimeout(() => r('unsettled'), 5_000);
            }),
          ]);
          clearTimeout(bound);
          expect(settled, `the ${policy} fan-out never settled`).not.toBe('unsettled');
          if (settled === 'unsettled') return;
          const code = settled.ok ? undefined : (settled.error as { code?: string }).code;
          expect(code === 'AMBIGUOUS_EFFECT', `${policy}: code ${code}, ambiguous thrown: ${ambiguous}`).toBe(
            ambiguous,
          );
          if (policy !== 'best-effort' && branchSpecs.some((s) => s !== undefined))
            expect(settled.ok, `${policy}: a rejected branch did not fail the fan-out`).toBe(false);
        },
      ),
      { numRuns: 150 },
    );
  });
});
