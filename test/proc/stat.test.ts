import { describe, expect, it } from 'vitest';
import { parseDuration } from '../../src/options.js';
import { sessionEntriesIn } from '../../src/proc/environ.js';
import { isKernelThread, parseStat } from '../../src/proc/stat.js';
import { createTag, parseTag, TAG_NAME_PATTERN, tagsIn } from '../../src/session/tag.js';

// Captured from a real /proc/<pid>/stat, with a comm holding spaces and parentheses.
const STAT =
  '4242 (a) b (c)) S 17 4242 4242 0 -1 4194304 120 0 0 0 1 2 0 0 20 0 3 0 987654 2519040 345 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0';

describe('parseStat', () => {
  it('cuts at the last parenthesis so a comm with spaces and parentheses survives', () => {
    const s = parseStat(STAT);
    expect(s).toMatchObject({ pid: 4242, comm: 'a) b (c)', state: 'S', ppid: 17, pgid: 4242, sid: 4242 });
    expect(s?.threads).toBe(3);
    expect(s?.startTime).toBe(987654);
  });
  it('refuses a truncated line instead of guessing fields', () => {
    expect(parseStat('4242 (sleep) S 1 2')).toBeUndefined();
    expect(parseStat('')).toBeUndefined();
  });
  it('recognises kernel threads by PF_KTHREAD', () => {
    const k = parseStat(STAT.replace(' 4194304 ', ' 2129984 '));
    expect(k && isKernelThread(k)).toBe(true);
    const u = parseStat(STAT);
    expect(u && isKernelThread(u)).toBe(false);
  });
});

describe('sessionEntriesIn', () => {
  const a = `TETHER_SESSION_${'a'.repeat(32)}`;
  const b = `TETHER_SESSION_${'0123456789abcdef'.repeat(2)}`;
  const block = (...records: string[]) => Buffer.from(`${records.join('\0')}\0`);
  const entries = (buf: Buffer, length = buf.length) => sessionEntriesIn(buf, length);
  it('finds every whole session record anywhere in the block', () => {
    expect(entries(block(`${a}=1`))).toEqual([`${a}=1`]);
    expect(entries(block('PATH=/bin', `${a}=1`, 'HOME=/', `${b}=1`))).toEqual([`${a}=1`, `${b}=1`]);
    expect(entries(Buffer.from(`X=1\0${a}=1`))).toEqual([`${a}=1`]); // last record without its NUL
  });
  it('does not take =10, a longer name, a prefix-sharing name, a value or a non-hex tag', () => {
    expect(entries(block(`${a}=10`))).toEqual([]);
    expect(entries(block(`X${a}=1`))).toEqual([]);
    expect(entries(block(`${a}_X=1`))).toEqual([]);
    expect(entries(block(`${a}0=1`))).toEqual([]);
    expect(entries(block(`OTHER=${a}=1`))).toEqual([]);
    expect(entries(block(`${a}=0`))).toEqual([]);
    expect(entries(block(`TETHER_SESSION_${'G'.repeat(32)}=1`))).toEqual([]);
  });
  it('only looks inside the given length', () => {
    const buf = block('A=1', `${a}=1`);
    expect(entries(buf, 4)).toEqual([]);
    expect(entries(buf, buf.length - 2)).toEqual([]); // the record cut before its "1"
  });
});

describe('tags', () => {
  it('draws 128-bit hex tags that never repeat', () => {
    const a = createTag();
    const b = createTag();
    expect(a.name).toMatch(TAG_NAME_PATTERN);
    expect(a.entry).toBe(`${a.name}=1`);
    expect(a.name).not.toBe(b.name);
  });
  it('parses NAME and NAME=1 and refuses anything looser', () => {
    const t = createTag();
    expect(parseTag(t.name).name).toBe(t.name);
    expect(parseTag(t.entry).name).toBe(t.name);
    for (const bad of ['', 'PATH', 'TETHER_SESSION_', `${t.name}=10`, t.name.toUpperCase(), `${t.name}0`]) {
      expect(() => parseTag(bad), bad).toThrow(expect.objectContaining({ code: 'INVALID_TAG' }));
    }
  });
  it('lists the tags of an environment, outer and inner', () => {
    const outer = createTag();
    const inner = createTag();
    const env = { [outer.name]: '1', [inner.name]: '1', [`${outer.name}_X`]: '1', PATH: '/bin' };
    expect(tagsIn(env).sort()).toEqual([outer.name, inner.name].sort());
  });
});

describe('parseDuration', () => {
  it('reads ms, s, m, h and bare seconds', () => {
    expect(parseDuration('--grace', '500ms')).toBe(500);
    expect(parseDuration('--grace', '1.5s')).toBe(1500);
    expect(parseDuration('--grace', '2m')).toBe(120_000);
    expect(parseDuration('--grace', '3')).toBe(3000);
  });
  it('names the option and the accepted forms on bad input', () => {
    expect(() => parseDuration('--grace', '5 sec')).toThrow(/--grace.*500ms, 5s/);
    expect(() => parseDuration('--kill-after', '-1s')).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    );
  });
});
