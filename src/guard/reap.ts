// The init's reaper: becomes a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER) and reaps the
// zombies reparented to it, as tini does, without ever taking the status of a child libuv waits
// for. libuv reaps the children Node spawned by pid (waitpid(pid, WNOHANG) for each of its
// process handles, on SIGCHLD); a waitpid(-1) here would take the main command's status before
// libuv sees it, and Node would never report its exit. So this reaper never waits for "any
// child": it lists this process's zombie children in /proc (ppid = us, state Z), leaves out
// every pid it was told libuv owns (`spare`), and reaps each of the rest by its pid. A zombie
// child of ours cannot be reaped by anyone else, so its pid names it until we reap it
// (docs/guard-init.md, "Reaping").
import { errnoName, libc } from '../libc.js';
import { takeSnapshot } from '../proc/snapshot.js';

const PR_SET_CHILD_SUBREAPER = 36;
const WNOHANG = 1;
const EINVAL = 22;

/**
 * Whether this process reaps orphans: `pid-1` (it is PID 1 of its namespace: the kernel
 * reparents orphans to it already), `subreaper` (prctl(2) PR_SET_CHILD_SUBREAPER succeeded), or
 * `none` with `why` (koffi cannot load, or the prctl failed: EINVAL before Linux 3.4).
 */
export interface SubreaperState {
  mode: 'pid-1' | 'subreaper' | 'none';
  why?: string;
}

/** Makes this process a child subreaper, unless it is PID 1 (which reaps orphans already). */
export function becomeSubreaper(): SubreaperState {
  if (process.pid === 1) return { mode: 'pid-1' };
  const c = libc();
  if (!c)
    return { mode: 'none', why: 'koffi cannot load: orphans of the command are not reparented to the guard' };
  const prctl = c.lib.func('int prctl(int, ...)');
  const r = prctl(
    PR_SET_CHILD_SUBREAPER,
    'unsigned long',
    1,
    'unsigned long',
    0,
    'unsigned long',
    0,
    'unsigned long',
    0,
  );
  if (r === 0) return { mode: 'subreaper' };
  const errno = c.errno();
  const why =
    errno === EINVAL
      ? 'prctl(PR_SET_CHILD_SUBREAPER) is refused (EINVAL): it needs Linux 3.4 or later'
      : `prctl(PR_SET_CHILD_SUBREAPER) failed: ${errnoName(errno)}`;
  return { mode: 'none', why };
}

/** One reaped zombie: its pid and raw wait status (wait(2): exit code << 8, or the signal number). */
export interface Reaped {
  pid: number;
  status: number;
}

/**
 * Reaps the zombie children of this process that libuv does not own: `pass()` walks
 * `procRoot` once for this process's children in state Z and `waitpid(pid, WNOHANG)`s each
 * one not `spare`d (never `waitpid(-1)`, which would take a status libuv waits for). Each reaped
 * one goes to `onReaped` and `count`. `usable` is false when koffi cannot load (no waitpid):
 * then nothing is reaped. Never throws; a walk that fails is tried again at the next pass.
 */
export class Reaper {
  /** Pids libuv waits for (the main command): never reaped here. */
  private readonly spared = new Set<number>();
  // biome-ignore lint/suspicious/noExplicitAny: a koffi function handle.
  private readonly waitpid: any;
  /** Zombies reaped so far. */
  count = 0;

  constructor(
    private readonly procRoot = '/proc',
    private readonly onReaped?: (r: Reaped) => void,
  ) {
    const c = libc();
    this.waitpid = c ? c.lib.func('int waitpid(int, _Out_ int *, int)') : undefined;
  }

  /** False when koffi cannot load: zombies are then left to the kernel (PID 1's end). */
  get usable(): boolean {
    return this.waitpid !== undefined;
  }

  /** Never reaps `pid` (a child Node spawned: libuv reaps it and reports its status). */
  spare(pid: number): void {
    this.spared.add(pid);
  }

  /** Forgets a spared pid once libuv has reaped it (its `exit` event fired). */
  unspare(pid: number): void {
    this.spared.delete(pid);
  }

  /**
   * One pass: every zombie child of this process in `/proc` not spared is reaped with
   * waitpid(pid, WNOHANG). Returns how many were reaped. Never throws for a process that is
   * gone (a zombie listed but no longer our child: ECHILD) or for /proc (nothing reaped).
   */
  pass(): number {
    if (!this.waitpid) return 0;
    let snapshot: ReturnType<typeof takeSnapshot>;
    try {
      snapshot = takeSnapshot(this.procRoot);
    } catch {
      return 0; // no process table now: the next pass (SIGCHLD or the timer) tries again
    }
    let reaped = 0;
    for (const pid of snapshot.children.get(process.pid) ?? []) {
      if (this.spared.has(pid) || snapshot.processes.get(pid)?.state !== 'Z') continue;
      const status = [0];
      // 0: a zombie leader whose other threads still run (not waitable yet); -1: EINTR, or
      // ECHILD (not our child any more). Either way the next pass looks again.
      if (this.waitpid(pid, status, WNOHANG) !== pid) continue;
      reaped += 1;
      this.onReaped?.({ pid, status: status[0] as number });
    }
    this.count += reaped;
    return reaped;
  }
}
