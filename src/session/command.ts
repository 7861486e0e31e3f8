// A command running in a session, as `session.spawn()` hands it out: awaitable, killable, its
// streams the command's. And what `spawn()` (src/session/spawn.ts) and the adapters learn of it
// beside its result: whether its helper was lost, and which stream passed `maxBuffer`.
import type { ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { OutputStream } from './collect.js';
import type { SignalName } from './kill.js';
import type { ExitResult } from './result.js';

// A command running in a session: the child process and a promise of how it ended.
export interface SessionProcess<T extends string | Buffer = string> extends PromiseLike<ExitResult<T>> {
  /** The command's pid (as this PID namespace sees it). */
  readonly pid: number | undefined;
  /**
   * The process Node started: the command itself, or — with the subreaper layer — the helper
   * that runs it. Signal the command with `kill()`, not `child.kill()`: a signal sent to the
   * helper is not the command's (SIGKILL ends the helper alone; the session then reports
   * `HELPER_LOST`). Its stdio streams are the command's.
   */
  readonly child: ChildProcess;
  /**
   * Sends `signal` (a name Node knows such as `'SIGINT'`, a real-time name `'SIGRTMIN'`,
   * `'SIGRTMIN+n'`, `'SIGRTMAX-n'`, `'SIGRTMAX'`, or a number from 1 to 64; default
   * `'SIGTERM'`) to the command itself, identity-checked (pidfd, see docs/sweep.md): never to a
   * process that took its pid. True when sent; false when the command has ended (or never
   * started). Throws `TetherError` `INVALID_OPTION` for a signal that is not one (signal(7)):
   * 0, a negative or fractional number, one above 64, an unknown name.
   */
  kill(signal?: SignalName | number): boolean;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** Resolves (never rejects) once the command exited and its output closed or hit the cap. */
  readonly exited: Promise<ExitResult<T>>;
}

/** `spawn()`'s view of a command's helper: resolves if that helper is lost (HELPER_LOST). */
const lostHelpers = new WeakMap<SessionProcess<string | Buffer>, Promise<void>>();

/** Resolves when the helper of `proc` is lost (killed before it reported the command's end). */
export function helperLost(proc: SessionProcess<string | Buffer>): Promise<void> | undefined {
  return lostHelpers.get(proc);
}

/** `spawn()`'s view of a command's buffers: resolves when one passed `maxBuffer`. */
const overflows = new WeakMap<SessionProcess<string | Buffer>, Promise<'stdout' | 'stderr'>>();

/** Resolves with the stream (`stdout`/`stderr`) of `proc` that passed `maxBuffer`, if one does. */
export function outputOverflow(
  proc: SessionProcess<string | Buffer>,
): Promise<'stdout' | 'stderr'> | undefined {
  return overflows.get(proc);
}

/**
 * The handle of a command: `exited` and its `then`, with the helper's loss and the buffers'
 * overflow registered for `helperLost` and `outputOverflow`.
 */
export function sessionProcess<T extends string | Buffer>(parts: {
  pid: number | undefined;
  child: ChildProcess;
  kill: (signal?: SignalName | number) => boolean;
  exited: Promise<ExitResult<T>>;
  lost: Promise<void>;
  overflow: Promise<OutputStream>;
}): SessionProcess<T> {
  const { pid, child, kill, exited } = parts;
  const proc: SessionProcess<T> = {
    pid,
    child,
    kill,
    stdin: child.stdin,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    // biome-ignore lint/suspicious/noThenProperty: a SessionProcess is awaitable, like execa's.
    then: (onFulfilled, onRejected) => exited.then(onFulfilled, onRejected),
  };
  lostHelpers.set(proc as SessionProcess<string | Buffer>, parts.lost);
  overflows.set(proc as SessionProcess<string | Buffer>, parts.overflow);
  return proc;
}
