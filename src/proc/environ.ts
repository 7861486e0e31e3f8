// The env-tag test: does a process's environ hold the exact entry NAME=1 (ADR-127 §2)?
import { readdirSync } from 'node:fs';
import { readInto, sharedBuffer } from './read.js';

/** What reading one process's environ found. */
export type EnvironMatch = 'match' | 'no-match' | 'gone' | 'denied';

/**
 * True when `buf[0, length)` — a NUL-delimited environ block — holds `entry` (`NAME=1`) as one
 * whole record: at the start or right after a NUL, and followed by a NUL or the end. So
 * `NAME=10` and `XNAME=1` and `NAME_X=1` do not match.
 */
export function environHasEntry(buf: Buffer, length: number, entry: Buffer): boolean {
  let from = 0;
  for (;;) {
    const at = buf.indexOf(entry, from);
    if (at < 0 || at + entry.length > length) return false;
    const startsRecord = at === 0 || buf[at - 1] === 0;
    const end = at + entry.length;
    const endsRecord = end === length || buf[end] === 0;
    if (startsRecord && endsRecord) return true;
    from = at + 1;
  }
}

/** An environ read: its bytes are `sharedBuffer()[0, length)` until the next read. */
export type EnvironRead = { kind: 'ok'; length: number } | { kind: 'gone' } | { kind: 'denied' };

/**
 * Reads `/proc/<pid>/environ` into the shared buffer. When the leader thread has exited
 * (`leaderExited`: stat state Z while the group still has threads) the process-wide file is
 * empty, so the environ is read through one of its live threads, `task/<tid>/environ`.
 * An empty environ (a zombie, a kernel thread, `env -i`) reads as `ok` with length 0.
 */
export function readEnviron(procRoot: string, pid: number, leaderExited: boolean): EnvironRead {
  const paths = [`${procRoot}/${pid}/environ`];
  if (leaderExited) {
    for (const tid of listTasks(procRoot, pid)) {
      if (tid !== pid) paths.push(`${procRoot}/${pid}/task/${tid}/environ`);
    }
  }
  let sawDenied = false;
  let sawOk = false;
  for (const path of paths) {
    const r = readInto(path);
    if (r.kind === 'denied') sawDenied = true;
    if (r.kind !== 'ok') continue;
    sawOk = true;
    if (r.length > 0) return r;
  }
  if (sawDenied) return { kind: 'denied' };
  return sawOk ? { kind: 'ok', length: 0 } : { kind: 'gone' };
}

/** Reads a process's environ (see `readEnviron`) and tests it for `entry`. */
export function matchEnviron(
  procRoot: string,
  pid: number,
  entry: Buffer,
  leaderExited: boolean,
): EnvironMatch {
  const r = readEnviron(procRoot, pid, leaderExited);
  if (r.kind === 'denied') return 'denied';
  if (r.kind === 'gone') return 'gone';
  return environHasEntry(sharedBuffer(), r.length, entry) ? 'match' : 'no-match';
}

/** Thread ids of `pid` (empty when the process is gone). */
export function listTasks(procRoot: string, pid: number): number[] {
  try {
    return readdirSync(`${procRoot}/${pid}/task`).map(Number).filter(Number.isInteger);
  } catch {
    return [];
  }
}
