// parseStat (src/proc/stat.ts) on captured /proc/<pid>/stat lines.
import { describe, expect, it } from 'vitest';
import { isKernelThread, parseStat } from '../../src/proc/stat.js';

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
