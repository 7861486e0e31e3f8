// The env-tag test: which session entries `NAME=1` does a process's environ hold (ADR-127 §2)?
import { readdirSync } from 'node:fs';
import { readInto } from './read.js';

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

const TAG_PREFIX = Buffer.from('TETHER_SESSION_');
const TAG_RECORD_LENGTH = TAG_PREFIX.length + 32 + 2; // TETHER_SESSION_<32 hex>=1

/**
 * Every session entry (`TETHER_SESSION_<32 hex>=1`, whole records only) in
 * `buf[0, length)`, a NUL-delimited environ block. One pass, so that the sweeps of many
 * sessions ending together read each environ once per round.
 */
export function sessionEntriesIn(buf: Buffer, length: number): string[] {
  const entries: string[] = [];
  let from = 0;
  for (;;) {
    const at = buf.indexOf(TAG_PREFIX, from);
    if (at < 0 || at + TAG_RECORD_LENGTH > length) return entries;
    const end = at + TAG_RECORD_LENGTH;
    if (
      (at === 0 || buf[at - 1] === 0) &&
      (end === length || buf[end] === 0) &&
      buf[end - 2] === 0x3d && // '='
      buf[end - 1] === 0x31 // '1'
    ) {
      const entry = buf.toString('latin1', at, end);
      if (/^TETHER_SESSION_[0-9a-f]{32}=1$/.test(entry)) entries.push(entry);
    }
    from = at + 1;
  }
}

/** Thread ids of `pid` (empty when the process is gone). */
export function listTasks(procRoot: string, pid: number): number[] {
  try {
    return readdirSync(`${procRoot}/${pid}/task`).map(Number).filter(Number.isInteger);
  } catch {
    return [];
  }
}
