// Identity of a process: pid + start time (field 22 of /proc/<pid>/stat), so that a reused pid
// is never mistaken for the process an earlier scan found.
import { readFileSync } from 'node:fs';
import { listTasks } from './environ.js';
import { nativeProc } from './native.js';
import { CLOCK_TICKS_PER_SECOND, type Identity } from './process-id.js';
import { readInto, sharedBuffer } from './read.js';
import { type ProcStat, parseStatBuffer } from './stat.js';

export { CLOCK_TICKS_PER_SECOND, type Identity, identityKey } from './process-id.js';

/** Reads and parses `/proc/<pid>/stat`; undefined when the process is gone. */
export function readStat(procRoot: string, pid: number): ProcStat | undefined {
  const native = nativeProc();
  if (native) return native.stat(procRoot, pid);
  const r = readInto(`${procRoot}/${pid}/stat`);
  return r.kind === 'ok' ? parseStatBuffer(sharedBuffer(), r.length) : undefined;
}

/**
 * `readStat`, and undefined also when it throws (denied, EMFILE: no fd left for the read): for a
 * caller that then knows the process by what it already has, or not at all.
 */
export function readStatOrNone(procRoot: string, pid: number): ProcStat | undefined {
  try {
    return readStat(procRoot, pid);
  } catch {
    return undefined;
  }
}

/**
 * A process is alive while its pid holds the same start time and it is not a dead zombie.
 * A zombie leader whose other threads still run (state Z, live tasks besides the leader) is
 * alive: its threads can still fork and hold resources.
 */
export function isAliveStat(procRoot: string, stat: ProcStat): boolean {
  if (stat.state === 'X') return false;
  if (stat.state !== 'Z') return true;
  return listTasks(procRoot, stat.pid).some((tid) => tid !== stat.pid);
}

/** Ground truth used by tests and checks: is this exact process (pid + start time) still alive? */
export function isAlive(id: Identity, procRoot = '/proc'): boolean {
  const stat = readStat(procRoot, id.pid);
  return stat !== undefined && stat.startTime === id.startTime && isAliveStat(procRoot, stat);
}

/** Identity of a live pid, or undefined. */
export function identityOf(pid: number, procRoot = '/proc'): Identity | undefined {
  const stat = readStat(procRoot, pid);
  return stat && isAliveStat(procRoot, stat) ? { pid, startTime: stat.startTime } : undefined;
}

let self: Identity | undefined;

/**
 * This process's identity (its pid and start time), read from `/proc/self/stat` once per
 * process. Throws when it cannot be read (no /proc).
 */
export function selfIdentity(): Identity {
  self ??= identityOf(process.pid);
  if (!self) throw new Error(`cannot read /proc/${process.pid}/stat: is /proc mounted?`);
  return self;
}

/**
 * The current time as clock ticks since boot (from `/proc/uptime`, 10 ms resolution), the unit
 * of `startTime`: a process with `startTime >= ticksNow()` read now started after this call.
 */
export function ticksNow(procRoot = '/proc'): number {
  const uptime = readFileSync(`${procRoot}/uptime`, 'latin1');
  const seconds = Number.parseFloat(uptime);
  return Math.floor(seconds * CLOCK_TICKS_PER_SECOND);
}
