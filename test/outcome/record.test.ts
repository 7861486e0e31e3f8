// toRecord / fromRecord: an error kept as JSON comes back with its code, fields, causes and
// report — and what is no record comes back as an Error saying what it was, never a throw.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  createTag,
  type ErrorRecord,
  fanOut,
  fromRecord,
  isAmbiguousEffect,
  sandbox,
  sweep,
  TetherError,
  toRecord,
} from '../../src/index.js';
import { MAX_RECORD_ERRORS } from '../../src/outcome/record.js';

const ambiguousError = () => new TetherError('AMBIGUOUS_EFFECT', 'the sweep could not settle it');
const through = (error: unknown) => fromRecord(JSON.parse(JSON.stringify(toRecord(error))));

describe('toRecord → JSON → fromRecord', () => {
  it('keeps name, code, message, tag, exitCode, signal and a real sweep report', async () => {
    const tag = createTag();
    const report = await sweep({ tag, graceMs: 50, killAfterMs: 50 });
    const error = new sandbox.SandboxError('AMBIGUOUS_EFFECT', 'the sweep could not settle it', {
      report,
      tag: tag.name,
    });
    Object.assign(error, { exitCode: null, signal: 'SIGKILL' });
    const back = through(error);
    expect(back).toBeInstanceOf(TetherError);
    expect(back.name).toBe('SandboxError');
    expect(back.message).toBe('the sweep could not settle it');
    const t = back as TetherError;
    expect(t.code).toBe('AMBIGUOUS_EFFECT');
    expect(t.tag).toBe(tag.name);
    expect(t.exitCode).toBeNull();
    expect(t.signal).toBe('SIGKILL');
    expect(t.report).toEqual(JSON.parse(JSON.stringify(report)));
    expect(t.report?.tag).toBe(tag.name);
    expect(isAmbiguousEffect(back)).toBe(true);
  });

  it("keeps a cause chain: an errno error's code, a primitive cause, and a TetherError under a foreign wrapper", () => {
    let enoent: unknown;
    try {
      readFileSync('/nonexistent/tether-record');
    } catch (e) {
      enoent = e;
    }
    const timedOut = new TetherError('TIMED_OUT', 'deadline', {
      cause: new Error('inner', { cause: 'a string cause' }),
    });
    const top = new Error('wrapper', {
      cause: new TetherError('COMMAND_FAILED', 'exit 3', { cause: enoent, exitCode: 3 }),
    });
    Object.assign(top, { code: 'WRAPPER' });
    const back = through(top) as Error & {
      code: string;
      cause: TetherError & { cause: Error & { code: string } };
    };
    expect(back).not.toBeInstanceOf(TetherError);
    expect(back.code).toBe('WRAPPER');
    expect(back.cause).toBeInstanceOf(TetherError);
    expect(back.cause.code).toBe('COMMAND_FAILED');
    expect(back.cause.exitCode).toBe(3);
    expect(back.cause.cause.code).toBe('ENOENT');
    const t = through(timedOut) as TetherError & { cause: Error };
    expect(t.cause.message).toBe('inner');
    expect(t.cause.cause).toBe('a string cause');
  });

  it('keeps AggregateError errors and a SuppressedError pair, in order', () => {
    const agg = new AggregateError(
      [new Error('first'), new TetherError('AMBIGUOUS_EFFECT', 'second')],
      'two',
    );
    const back = through(agg) as AggregateError;
    expect(back).toBeInstanceOf(AggregateError);
    expect(back.errors.map((e: Error) => e.message)).toEqual(['first', 'second']);
    expect(isAmbiguousEffect(back)).toBe(true);
    const suppressed = Object.assign(new Error('suppressed'), {
      name: 'SuppressedError',
      error: new Error('dispose'),
      suppressed: new TetherError('AMBIGUOUS_EFFECT', 'body'),
    });
    const rec = toRecord(suppressed);
    expect(rec.errors?.map((e) => e.message)).toEqual(['dispose', 'body']);
    const s = fromRecord(rec) as Error & { error: Error; suppressed: Error };
    expect(s.error.message).toBe('dispose');
    expect(isAmbiguousEffect(s.suppressed)).toBe(true);
  });

  it('is cycle-safe, and a 40-deep chain keeps every link', () => {
    const a = new Error('a');
    const b = new TetherError('AMBIGUOUS_EFFECT', 'b', { cause: a });
    Object.assign(a, { cause: b });
    const rec = toRecord(a);
    expect(() => JSON.stringify(rec)).not.toThrow();
    expect((rec.cause as ErrorRecord).code).toBe('AMBIGUOUS_EFFECT');
    expect(((rec.cause as ErrorRecord).cause as ErrorRecord).name).toBe('ErrorRecordRepeat');
    let deep: unknown = new TetherError('AMBIGUOUS_EFFECT', 'bottom');
    for (let i = 0; i < 40; i++) deep = new Error(`w${i}`, { cause: deep });
    let links = 0;
    for (let r: unknown = toRecord(deep); r && typeof r === 'object'; r = (r as ErrorRecord).cause)
      links += 1;
    expect(links).toBe(41);
    expect(isAmbiguousEffect(through(deep))).toBe(true);
  });

  it(`past ${MAX_RECORD_ERRORS} errors it cuts, and the cut keeps the ambiguous effect`, () => {
    let deep: unknown = new TetherError('AMBIGUOUS_EFFECT', 'at the bottom');
    for (let i = 0; i < 1500; i++) deep = new Error(`w${i}`, { cause: deep });
    const text = JSON.stringify(toRecord(deep));
    expect(text).toContain('ErrorRecordCut');
    expect(isAmbiguousEffect(fromRecord(text))).toBe(true);
  });

  // Every member counts toward the bound, a primitive too: 2e7 primitive members made a
  // 2e7-member record whose JSON.stringify threw "Invalid string length".
  it(`primitive members count toward the ${MAX_RECORD_ERRORS} bound: a record of 2e7 strings stays small`, () => {
    const error = new AggregateError([], 'many');
    error.errors = new Array(2e7).fill('x');
    const record = toRecord(error);
    expect(record.errors?.length).toBeLessThanOrEqual(MAX_RECORD_ERRORS + 1);
    expect(record.errors?.at(-1)?.name).toBe('ErrorRecordCut');
    expect(JSON.stringify(record).length).toBeLessThan(200_000);
    const holes = new AggregateError([], 'sparse');
    holes.errors = new Array(2e7);
    expect(() => JSON.stringify(toRecord(holes))).not.toThrow();
  });

  it('the cut of primitive members keeps an ambiguous effect among what it cut', () => {
    const error = new AggregateError(
      [...new Array(MAX_RECORD_ERRORS + 5).fill('x'), ambiguousError()],
      'many',
    );
    const text = JSON.stringify(toRecord(error));
    expect(text).toContain('ErrorRecordCut');
    expect(isAmbiguousEffect(fromRecord(text))).toBe(true);
  });

  // A FanOutError's `errors` has one entry per branch, undefined for a fulfilled one: those are
  // no errors, and were recorded as 19,999 `NonError: undefined` records.
  it('a FanOutError of 20,000 branches with one failure records that failure only, never the successes', async () => {
    const n = 20_000;
    const branches = Array.from({ length: n }, (_, i) => async () => {
      if (i === n - 1) throw Object.assign(new Error('last failed'), { code: 'EFAIL' });
      return i;
    });
    const error = await fanOut(branches, { policy: 'wait-all' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(TetherError);
    const record = toRecord(error);
    const json = JSON.stringify(record);
    expect(json).not.toContain('NonError');
    expect(record.cause).toMatchObject({ message: 'last failed', code: 'EFAIL' });
    expect(record.message).toContain(`failed: ${n - 1}`);
    // Only cut records (what was not read) besides the failure itself, were it read.
    for (const member of record.errors ?? [])
      expect(['ErrorRecordCut', 'ErrorRecordRepeat']).toContain(member.name);
  });

  it('a FanOutError of 3 branches, the middle one failed: its errors record holds that one failure only', async () => {
    const error = await fanOut([async () => 1, async () => Promise.reject(new Error('mid')), async () => 3], {
      policy: 'wait-all',
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    // One member: the failure, a repeat of the cause recorded above it (both fulfilled branches left out).
    const record = toRecord(error);
    expect(record.cause).toMatchObject({ message: 'mid' });
    expect(record.errors?.map((e) => e.name)).toEqual(['ErrorRecordRepeat']);
  });

  it('records hostile errors without throwing', () => {
    const hostile = Object.defineProperty(new Error('hostile'), 'cause', {
      get() {
        throw new Error('getter');
      },
    });
    Object.assign(hostile, { report: { big: 1n } });
    const rec = toRecord(hostile);
    expect(rec.message).toBe('hostile');
    expect(rec.report).toBeUndefined();
    expect(toRecord('boom')).toEqual({ name: 'NonError', message: 'boom' });
    expect(toRecord(null)).toEqual({ name: 'NonError', message: 'null' });
  });
});

describe('fromRecord never throws on what is no record', () => {
  it.each([
    [42, /got number 42/],
    [null, /got null/],
    [undefined, /got undefined/],
    ['not json {', /is not JSON/],
    ['[1, 2]', /got an array of 2/],
    [[], /got an array of 0/],
    [true, /got boolean true/],
  ])('%j', (value, message) => {
    const error = fromRecord(value);
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toBeInstanceOf(TetherError);
    expect(error.message).toMatch(message);
  });

  it('takes a record missing fields or with wrong types, keeping what it can', () => {
    const bare = fromRecord({ code: 'AMBIGUOUS_EFFECT' });
    expect(bare).toBeInstanceOf(TetherError);
    expect(bare.message).toMatch(/no message/);
    expect(isAmbiguousEffect(bare)).toBe(true);
    const odd = fromRecord({
      name: 5,
      message: { x: 1 },
      code: 'ENOENT',
      tag: 7,
      exitCode: 'x',
      errors: 'no',
    }) as Error & {
      code: string;
    };
    expect(odd.code).toBe('ENOENT');
    expect(odd.message).toMatch(/message was object/);
    expect('tag' in odd).toBe(false);
    expect(isAmbiguousEffect(fromRecord('{"message":"x","errors":[{"code":"AMBIGUOUS_EFFECT"}]}'))).toBe(
      true,
    );
    expect(isAmbiguousEffect(fromRecord({ code: 'AMBIGUOUS_EFFECTS', message: 'near miss' }))).toBe(false);
  });
});
