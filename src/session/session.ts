// A session: one tag, any number of commands run under it, one sweep at its end (ADR-127 §1–2).
import { type ChildProcess, type StdioOptions, spawn as spawnChild } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { checkMs, DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS, DEFAULT_OUTPUT_CAP_MS } from '../options.js';
import { TetherError } from '../outcome/errors.js';
import { type Identity, identityKey, readStat, ticksNow } from '../proc/identity.js';
import type { EventListener } from '../sweep/events.js';
import type { SweepReport } from '../sweep/report.js';
import type { Member } from '../sweep/scan.js';
import { type SweepProgress, sweep, sweepSync } from '../sweep/sweep.js';
import { outputClosed, releaseOutput } from './output.js';
import { createTag, type SessionTag, tagsIn } from './tag.js';

/** Options of a session. Durations in milliseconds. */
export interface SessionOptions {
  /** TERM phase budget of the sweep. Default 5000 (ADR-127 §2). */
  graceMs?: number;
  /** KILL phase budget. Default 3000. */
  killAfterMs?: number;
  /** How long a payload's output is awaited past its exit. Default 2000 (ADR-127 §5). */
  outputCapMs?: number;
  /** Where procfs is mounted. Default `/proc`; a path without one makes the sweep warn `NO_PROC`. */
  procRoot?: string;
  /** Receives `delegate_background` and `warning` events. */
  onEvent?: EventListener;
  /** Receives the sweep's progress after each round. */
  onProgress?: (progress: SweepProgress) => void;
}

/** Options of one command run in a session. */
export interface CommandOptions {
  cwd?: string;
  /** Environment of the command. Default `process.env`; the session's variable is always added. */
  env?: NodeJS.ProcessEnv;
  /** As `child_process.spawn`'s `stdio`. Default `'pipe'`. */
  stdio?: StdioOptions;
}

/** How one command ended. `durationMs` runs from spawn to exit. */
export interface ExitResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  durationMs: number;
  /** True when a process still held its stdout/stderr `outputCapMs` after its exit. */
  outputTimedOut: boolean;
  /** Set when the command could not be started (`SPAWN_FAILED`, `cause` is the errno error). */
  error?: TetherError;
}

// A command running in a session: the child process and a promise of how it ended.
export interface SessionProcess extends PromiseLike<ExitResult> {
  readonly pid: number | undefined;
  readonly child: ChildProcess;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** Resolves (never rejects) once the command exited and its output closed or hit the cap. */
  readonly exited: Promise<ExitResult>;
}

const live = new Set<Session>();
let exitHookInstalled = false;

// Last resort on exit paths the event loop does not survive (process.exit, an uncaught
// exception): every session not yet ended is swept synchronously before the process goes.
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const s of live) s.endSync();
  });
}

// One session: create with `session()`, run commands with `spawn`, finish with `end()`.
export class Session {
  /** The session's variable, exported to every command as `NAME=1`. */
  readonly tag: SessionTag;
  /** Clock ticks since boot when the session began: no carrier can be older. */
  readonly startTicks: number;
  readonly options: Readonly<SessionOptions>;
  private readonly known = new Map<string, Member>();
  private readonly spawned: Identity[] = [];
  private readonly running = new Set<SessionProcess>();
  private ending: Promise<SweepReport> | undefined;

  constructor(options: SessionOptions = {}) {
    checkMs('graceMs', options.graceMs ?? DEFAULT_GRACE_MS);
    checkMs('killAfterMs', options.killAfterMs ?? DEFAULT_KILL_AFTER_MS);
    checkMs('outputCapMs', options.outputCapMs ?? DEFAULT_OUTPUT_CAP_MS);
    this.options = { ...options };
    this.tag = createTag();
    // One tick of margin: a process started in this very tick is not missed.
    this.startTicks = safeTicks(options.procRoot) - 1;
    live.add(this);
    installExitHook();
  }

  /** True once `end()` has begun. */
  get ended(): boolean {
    return this.ending !== undefined;
  }

  /**
   * The environment a command of this session gets: `base`, every tag of the sessions this
   * process itself runs in (so nesting holds even for a custom `env`, ADR-127 §1), and `TAG=1`.
   */
  env(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
    const outer = Object.fromEntries(tagsIn(process.env).map((name) => [name, '1']));
    return { ...base, ...outer, [this.tag.name]: '1' };
  }

  /**
   * Starts `command` with `args` in this session (no shell). Throws `TetherError`
   * `SESSION_ENDED` once `end()` has begun. A start failure does not throw: `exited`
   * resolves with `error` (`SPAWN_FAILED`).
   */
  spawn(command: string, args: readonly string[] = [], options: CommandOptions = {}): SessionProcess {
    if (this.ending)
      throw new TetherError('SESSION_ENDED', `session ${this.tag.name} has ended: cannot spawn ${command}`);
    const started = performance.now();
    const child = spawnChild(command, args, {
      cwd: options.cwd,
      env: this.env(options.env),
      stdio: options.stdio ?? 'pipe',
    });
    const stat = child.pid === undefined ? undefined : readStat(this.procRoot, child.pid);
    if (stat) {
      // The spawn is an earlier find from the start: a payload that clears or overwrites its
      // own environ (env -i, a title rewrite) is still swept, with everything under it.
      const identity = { pid: stat.pid, startTime: stat.startTime };
      this.spawned.push(identity);
      this.known.set(identityKey(identity), { identity, stat, foundBy: 'carrier' });
    }
    const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
    const exited = new Promise<ExitResult>((resolve) => {
      child.once('error', (cause) => {
        if (child.pid !== undefined) return; // an error after a successful start (kill failed…)
        const error = new TetherError(
          'SPAWN_FAILED',
          `cannot start ${command}: ${(cause as Error).message}`,
          { cause },
        );
        resolve({
          exitCode: null,
          signal: null,
          durationMs: performance.now() - started,
          outputTimedOut: false,
          error,
        });
      });
      child.once('exit', (exitCode, signal) => {
        const durationMs = performance.now() - started;
        void outputClosed(child, closed, this.options.outputCapMs ?? DEFAULT_OUTPUT_CAP_MS).then((ok) => {
          resolve({ exitCode, signal, durationMs, outputTimedOut: !ok });
        });
      });
    });
    const proc: SessionProcess = {
      pid: child.pid,
      child,
      stdin: child.stdin,
      stdout: child.stdout,
      stderr: child.stderr,
      exited,
      // biome-ignore lint/suspicious/noThenProperty: a SessionProcess is awaitable, like execa's.
      then: (onFulfilled, onRejected) => exited.then(onFulfilled, onRejected),
    };
    this.running.add(proc);
    void exited.then(() => this.running.delete(proc));
    return proc;
  }

  /**
   * Ends the session: sweeps every process any of its commands started (its commands
   * themselves included, if still running) and resolves to the report. Idempotent: later
   * calls return the same promise. Never rejects for what the sweep could not do.
   */
  end(): Promise<SweepReport> {
    if (!this.ending) {
      this.ending = sweep(this.sweepOptions()).finally(() => {
        live.delete(this);
        for (const p of this.running) releaseOutput(p.child);
      });
    }
    return this.ending;
  }

  /** Synchronous end for exit paths; used by the process `exit` hook. */
  endSync(): SweepReport {
    live.delete(this);
    const report = sweepSync(this.sweepOptions());
    this.ending ??= Promise.resolve(report);
    return report;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.end();
  }

  private get procRoot(): string {
    return this.options.procRoot ?? '/proc';
  }

  private sweepOptions() {
    return {
      tag: this.tag,
      procRoot: this.options.procRoot,
      graceMs: this.options.graceMs,
      killAfterMs: this.options.killAfterMs,
      notBefore: this.startTicks,
      known: this.known,
      spawns: this.spawned,
      onEvent: this.options.onEvent,
      onProgress: this.options.onProgress,
    };
  }
}

function safeTicks(procRoot = '/proc'): number {
  try {
    return ticksNow(procRoot);
  } catch {
    return 0; // no /proc: the sweep will say so
  }
}

/** Starts a session (ADR-127 §1): a fresh tag, to run one or more commands under. */
export function session(options?: SessionOptions): Session {
  return new Session(options);
}
