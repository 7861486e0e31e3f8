// Ground truth for the tests, read straight from /proc (proc(5)) and never through src/: a check
// of what survived must hold even when the code under test broke its own reader. Every read is
// a plain readFileSync of the whole file; a process that is gone (or unreadable) reads as
// undefined or empty, never as an exception.
import { readdirSync, readFileSync } from 'node:fs';

/** A process, named so that a reused pid is never taken for it: `startTime` in clock ticks since boot. */
export interface ProcessId {
  pid: number;
  startTime: number;
}

/** The fields of one `/proc/<pid>/stat` line the tests look at. */
export interface Stat {
  pid: number;
  /** Field 2, without its parentheses; may hold spaces and parentheses. */
  comm: string;
  /** Field 3: R, S, D, Z, T, t, X, I, … */
  state: string;
  /** Field 4. */
  ppid: number;
  /** Field 20: live threads of the thread group (a zombie leader counts itself). */
  threads: number;
  /** Field 22: clock ticks since boot at which the process started. */
  startTime: number;
  /** Every field as text, numbered as in proc(5): `fields[22]` is the start time (`fields[0]` is empty). */
  fields: readonly string[];
}

/**
 * Parses one `/proc/<pid>/stat` line. `comm` may hold spaces and ')', so the line is cut at the
 * LAST ')'. Undefined for text that is not a whole stat line (a truncated read, or no comm).
 */
export function parseStatLine(text: string): Stat | undefined {
  const open = text.indexOf(' (');
  const close = text.lastIndexOf(')');
  if (open <= 0 || close < open) return undefined;
  const rest = text
    .slice(close + 2)
    .trimEnd()
    .split(' ');
  if (rest.length < 20) return undefined; // fields 3..22 at least
  const fields = ['', text.slice(0, open), text.slice(open + 2, close), ...rest];
  return {
    pid: Number(fields[1]),
    comm: fields[2] as string,
    state: fields[3] as string,
    ppid: Number(fields[4]),
    threads: Number(fields[20]),
    startTime: Number(fields[22]),
    fields,
  };
}

/** `/proc/<pid>/stat` of a pid (a number or a /proc entry's name), or undefined once it is gone. */
export function readStat(pid: number | string): Stat | undefined {
  try {
    return parseStatLine(readFileSync(`/proc/${pid}/stat`, 'latin1'));
  } catch {
    return undefined;
  }
}

/**
 * A dead zombie: exited, only its status left to reap (state X, or Z with no live thread). A
 * zombie leader whose other threads still run is not one: its threads can fork and hold resources.
 */
export function isDeadZombie(stat: Stat): boolean {
  return stat.state === 'X' || (stat.state === 'Z' && stat.threads <= 1);
}

/** True while that very process (pid and start time) exists and is not a dead zombie. */
export function isAlive(id: ProcessId): boolean {
  const stat = readStat(id.pid);
  return stat !== undefined && stat.startTime === id.startTime && !isDeadZombie(stat);
}

/** The identity of a live pid (not a dead zombie), or undefined. */
export function identityOf(pid: number): ProcessId | undefined {
  const stat = readStat(pid);
  return stat && !isDeadZombie(stat) ? { pid, startTime: stat.startTime } : undefined;
}

/** The state letter of a pid (field 3), or `gone`. */
export function stateOf(pid: number): string {
  return readStat(pid)?.state ?? 'gone';
}

/** The parent pid (field 4), or 0 once the process is gone. */
export function ppidOf(pid: number): number {
  return readStat(pid)?.ppid ?? 0;
}

/** The pids listed in /proc now, this process's own included. */
export function pids(): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map(Number);
}

/** The stat of every process in /proc now whose parent is `ppid` (dead zombies included). */
export function childrenOf(ppid: number): Stat[] {
  const out: Stat[] = [];
  for (const pid of pids()) {
    const stat = readStat(pid);
    if (stat?.ppid === ppid) out.push(stat);
  }
  return out;
}

/** `/proc/<pid>/cmdline` with its NULs as spaces, or '' once the process is gone. */
export function cmdlineOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ').trim();
  } catch {
    return '';
  }
}

/** `/proc/<pid>/environ` as text (NUL-separated), or '' once gone or unreadable. */
export function environOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/environ`, 'latin1');
  } catch {
    return '';
  }
}

/**
 * The environ of a process, read through a live thread (`task/<tid>/environ`) when the leader's
 * reads empty (a leader thread that exited while another runs); '' once gone or unreadable.
 */
export function environOfAnyThread(pid: number): string {
  const environ = environOf(pid);
  if (environ.length > 0) return environ;
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return '';
  }
  for (const tid of tids) {
    try {
      const text = readFileSync(`/proc/${pid}/task/${tid}/environ`, 'latin1');
      if (text.length > 0) return text;
    } catch {
      // that thread is gone
    }
  }
  return '';
}

/** The value of `name` in the NUL-separated `environ` (its first record), or undefined. */
export function entryOf(environ: string, name: string): string | undefined {
  const record = environ.split('\0').find((e) => e.startsWith(`${name}=`));
  return record === undefined ? undefined : record.slice(name.length + 1);
}

/** True when the NUL-separated `environ` holds exactly the record `entry` (`NAME=value`). */
export function hasEntry(environ: string, entry: string): boolean {
  return environ.split('\0').includes(entry);
}
