// parseStat (src/proc/stat.ts) on captured /proc/<pid>/stat lines, and readStat
// (src/proc/identity.ts) against the tests' own reader on a live process.
import { spawn } from 'node:child_process';
import { realpathSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readStat } from '../../src/proc/identity.js';
import { isKernelThread, parseStat } from '../../src/proc/stat.js';
import * as truth from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { waitFor } from '../support/zoo.js';

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

describe('readStat on a live process', () => {
  it("agrees field by field with the tests' reader when the comm holds spaces and parentheses", async () => {
    // The kernel names a process after the file it executed: a symlink to sleep called "a) b (c".
    const exe = join(testDir('tether-comm-'), 'a) b (c');
    symlinkSync(realpathSync('/bin/sleep'), exe);
    const child = spawn(exe, ['30'], { stdio: 'ignore' });
    try {
      const pid = child.pid as number;
      // Exec'd and asleep: its state and flags no longer change while the two readers look.
      await waitFor(
        `pid ${pid} to exec "a) b (c" and sleep`,
        () => truth.readStat(pid)?.comm === 'a) b (c' && truth.readStat(pid)?.state === 'S',
        5000,
      );
      const t = truth.readStat(pid);
      expect(t?.ppid, 'premise broken: the test reader misread the ppid').toBe(process.pid);
      expect(readStat('/proc', pid)).toEqual({
        pid,
        comm: 'a) b (c',
        state: t?.state,
        ppid: process.pid,
        pgid: Number(t?.fields[5]),
        sid: Number(t?.fields[6]),
        flags: Number(t?.fields[9]),
        threads: t?.threads,
        startTime: t?.startTime,
      });
    } finally {
      child.kill('SIGKILL');
    }
  });
});
