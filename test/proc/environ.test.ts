// sessionEntriesIn (src/proc/environ.ts): the tag records of an environ block, on captured bytes.
import { describe, expect, it } from 'vitest';
import { sessionEntriesIn } from '../../src/proc/environ.js';

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
