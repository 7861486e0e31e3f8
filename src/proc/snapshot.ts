// One walk of the process table per round: pid, ppid, state, start time, comm, group, session.
import { readdirSync } from 'node:fs';
import { nativeProc } from './native.js';
import { isFdExhaustion, readInto, sharedBuffer } from './read.js';
import { isKernelThread, type ProcStat, parseStatBuffer } from './stat.js';
import { ProcTable, type WalkEnviron } from './table.js';

export type { WalkEnviron } from './table.js';

/** One round's view of the process table, kernel threads left out. */
export interface Snapshot {
  procRoot: string;
  /** Every user-space process seen, by pid. */
  processes: ReadonlyMap<number, ProcStat>;
  /** pid → pids whose ppid it is, in the walk's order. */
  children: ReadonlyMap<number, readonly number[]>;
  /**
   * The native walk's packed records, which `processes` and `children` are views of — and, when
   * `takeSnapshot` was asked for them, the environs it read in the same pass. Undefined on the JS
   * path (its environs are read apart: src/proc/environ.ts).
   */
  table?: ProcTable;
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
 * A process that exits mid-walk is simply absent. With `environ`, the native walk also reads,
 * right after each stat, the environ of each process `environ` names (`snapshot.table`); the JS
 * walk ignores it. Throws `NoProcError` when `procRoot` cannot be listed or holds no process at
 * all (not a procfs), and what a read throws (EMFILE…).
 */
export function takeSnapshot(procRoot = '/proc', environ?: WalkEnviron): Snapshot {
  const started = performance.now();
  taken += 1;
  let stats: ProcStat[];
  try {
    const native = nativeProc();
    if (native) {
      const table = new ProcTable(native.walk(procRoot, environ));
      if (table.size === 0)
        throw new NoProcError(procRoot, new Error('no process entries (is procfs mounted there?)'));
      const { processes, children } = table;
      return {
        procRoot,
        processes,
        children,
        table,
        takenAt: started,
        durationMs: performance.now() - started,
      };
    }
    stats = walk(procRoot);
  } catch (error) {
    if (error instanceof NoProcError) throw error;
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
