// One walk of the process table per round: pid, ppid, state, start time, comm, group, session.
import { readdirSync } from 'node:fs';
import { nativeProc } from './native.js';
import { isFdExhaustion, readInto, sharedBuffer } from './read.js';
import { isKernelThread, type ProcStat, parseStatBuffer } from './stat.js';

/** One round's view of the process table, kernel threads left out. */
export interface Snapshot {
  procRoot: string;
  /** Every user-space process seen, by pid. */
  processes: Map<number, ProcStat>;
  /** pid → pids whose ppid it is. */
  children: Map<number, number[]>;
  /** When the walk began: `performance.now()` (ms, monotonic clock). */
  takenAt: number;
  /** Milliseconds the walk took (monotonic clock). */
  durationMs: number;
}

/** Thrown by `takeSnapshot` when `procRoot` cannot be listed (no /proc): code `NO_PROC`. */
export class NoProcError extends Error {
  readonly code = 'NO_PROC';
  constructor(procRoot: string, cause: unknown) {
    super(`cannot list ${procRoot}: ${(cause as Error).message}`, { cause });
  }
}

let taken = 0;

/** How many snapshots this process has taken (for the benchmark of shared rounds). */
export function snapshotCount(): number {
  return taken;
}

/**
 * Walks `procRoot` once and reads each `/proc/<pid>/stat` through one reused buffer.
 * A process that exits mid-walk is simply absent. Throws `NoProcError` when `procRoot`
 * cannot be listed or holds no process at all (not a procfs).
 */
export function takeSnapshot(procRoot = '/proc'): Snapshot {
  const started = performance.now();
  taken += 1;
  let stats: ProcStat[];
  try {
    stats = nativeProc()?.snapshot(procRoot) ?? walk(procRoot);
  } catch (error) {
    // Only the listing of procRoot itself (readdir: `scandir`) says there is no procfs there.
    if ((error as NodeJS.ErrnoException).syscall !== 'scandir') throw error;
    if (isFdExhaustion(error))
      throw new Error(`cannot list ${procRoot}: no fd left (${(error as Error).message})`, { cause: error });
    throw new NoProcError(procRoot, error);
  }
  const processes = new Map<number, ProcStat>();
  const children = new Map<number, number[]>();
  for (const stat of stats) {
    if (isKernelThread(stat)) continue;
    processes.set(stat.pid, stat);
    const siblings = children.get(stat.ppid);
    if (siblings) siblings.push(stat.pid);
    else children.set(stat.ppid, [stat.pid]);
  }
  if (processes.size === 0) {
    throw new NoProcError(procRoot, new Error('no process entries (is procfs mounted there?)'));
  }
  return { procRoot, processes, children, takenAt: started, durationMs: performance.now() - started };
}

// The JS walk: readdir, then each stat through the shared buffer (the native one: native.ts).
function walk(procRoot: string): ProcStat[] {
  const names = readdirSync(procRoot);
  const stats: ProcStat[] = [];
  for (const name of names) {
    const first = name.charCodeAt(0);
    if (first < 48 || first > 57) continue;
    const r = readInto(`${procRoot}/${name}/stat`);
    if (r.kind !== 'ok') continue;
    const stat = parseStatBuffer(sharedBuffer(), r.length);
    if (stat !== undefined) stats.push(stat);
  }
  return stats;
}

/**
 * The pid chain from `pid` up to (and including) PID 1, one stat read per ancestor. Throws
 * `NoProcError` when `pid` itself cannot be read there (no procfs at `procRoot`).
 */
export function ancestorsOf(procRoot: string, pid: number): number[] {
  const chain: number[] = [];
  let current = pid;
  while (current > 0 && !chain.includes(current)) {
    const r = readInto(`${procRoot}/${current}/stat`);
    if (r.kind !== 'ok') {
      if (current === pid) throw new NoProcError(procRoot, new Error(`no readable stat for pid ${pid}`));
      break;
    }
    chain.push(current);
    current = parseStatBuffer(sharedBuffer(), r.length)?.ppid ?? 0;
  }
  return chain;
}
