// sessionEntriesIn (src/proc/environ.ts): the tag records of an environ block, on captured bytes;
// and readEnviron of real processes once its time budget is reached, on both paths.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTag } from '../../src/index.js';
import { readEnviron, readEnvirons, sessionEntriesIn } from '../../src/proc/environ.js';
import { isAlive } from '../../src/proc/identity.js';
import { nativeProc, useNativeProc } from '../../src/proc/native.js';
import { READ_BUFFER_BYTES } from '../../src/proc/read.js';
import { type Decoy, killIfAlive, startSleeper } from '../support/zoo.js';

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

// A reader paused past its time budget (a GC pause, a loaded machine, the VM's clock jumping)
// after the chunk that held the whole environ: the one read left would have returned the end.
describe('an environ read that reaches its time budget', () => {
  const tag = createTag();
  const base = { PATH: process.env.PATH };
  let small: Decoy;
  let large: Decoy;
  beforeAll(async () => {
    // ~1 KiB of environ, read in one chunk; and one whose entry lies past the first 64 KiB chunk.
    small = await startSleeper(
      'small environ',
      { ...base, FILL: 'f'.repeat(1000), [tag.name]: '1' },
      tag.entry,
    );
    large = await startSleeper(
      'large environ',
      { ...base, BIG: 'b'.repeat(100_000), [tag.name]: '1' },
      tag.entry,
    );
  });
  afterAll(() => {
    for (const d of [small, large]) if (d) killIfAlive(d.identity);
  });

  /** `f` on the JS path, then on the native one. */
  const onBothPaths = <T>(f: () => T): { js: T; native: T } => {
    const was = useNativeProc(false);
    try {
      const js = f();
      useNativeProc(true);
      expect(nativeProc(), 'premise broken: the native path is not built').not.toBeNull();
      return { js, native: f() };
    } finally {
      useNativeProc(was);
    }
  };

  it('reads an environ whole, not oversized, when the end follows the budget (both paths)', () => {
    const r = onBothPaths(() => ({
      single: readEnviron('/proc', small.identity.pid, false, 0),
      batch: readEnvirons('/proc', [small.identity.pid], [false], 0),
    }));
    for (const read of [r.js.single, r.js.batch[0], r.native.single, r.native.batch[0]]) {
      expect(read).toMatchObject({ kind: 'ok', entries: [tag.entry], oversized: false });
    }
    expect(isAlive(small.identity), 'premise broken: the reader read a process that has exited').toBe(true);
  });

  it('still stops undecided (oversized) when more bytes follow the budget (both paths)', () => {
    const r = onBothPaths(() => ({
      paused: readEnviron('/proc', large.identity.pid, false, 0),
      unpaused: readEnviron('/proc', large.identity.pid, false),
    }));
    for (const read of [r.js.paused, r.native.paused]) {
      // The first chunk (64 KiB) and the one byte that shows the environ goes on.
      expect(read).toMatchObject({ kind: 'ok', entries: [], oversized: true, bytes: READ_BUFFER_BYTES + 1 });
    }
    for (const read of [r.js.unpaused, r.native.unpaused]) {
      expect(read).toMatchObject({ kind: 'ok', entries: [tag.entry], oversized: false });
    }
  });

  it('reads it whole when the clock jumps past the deadline during the read (JS path)', () => {
    // The deadline is taken, then each look at the clock finds it 200 ms later: the pause, made
    // deterministic. (Only the JS path's clock can be moved from here.)
    const was = useNativeProc(false);
    let now = performance.now();
    const clock = vi.spyOn(performance, 'now').mockImplementation(() => (now += 200));
    try {
      const r = readEnviron('/proc', small.identity.pid, false);
      expect(r).toMatchObject({ kind: 'ok', entries: [tag.entry], oversized: false });
    } finally {
      clock.mockRestore();
      useNativeProc(was);
    }
  });
});
