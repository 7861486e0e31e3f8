// spawn(): one command as its own session, swept on every exit path (clean exit, failure,
// start failure, abort, timeout, an exception in the caller's `await using` block).
import type { ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { TetherError } from '../errors.js';
import type { SessionTag } from '../proc/tag.js';
import type { SweepReport } from '../sweep/report.js';
import { DEFAULT_MAX_BUFFER, effectiveMaxBuffer, type OutputOf } from './collect.js';
import { armStops, type Stops } from './deadline.js';
import type { SignalName } from './kill.js';
import { type CommandOptions, checkCommand, checkSpawnOptions, type SessionOptions } from './options.js';
import { CommandError, failureOf } from './result.js';
import { type ExitResult, helperLost, outputOverflow, Session, type SessionProcess } from './session.js';

/** Options of `spawn()`: the session's and the command's, plus when to give up. */
export interface SpawnOptions extends SessionOptions, CommandOptions {
  /** Aborting it ends the session: the sweep stops the command and everything it started. */
  signal?: AbortSignal;
  /**
   * Milliseconds after which the session is ended as by an abort (`timedOut: true`). 0, as
   * undefined, is no timeout (as execa's, Node's and timeout(1)'s 0).
   */
  timeout?: number;
  /**
   * Reject a failed command (`failed`) with a `CommandError`: `COMMAND_FAILED`, `TIMED_OUT`,
   * `CANCELLED` or `MAX_BUFFER`. Default true; false resolves with the result instead (as
   * execa's and `execFile`'s `reject: false`).
   */
  reject?: boolean;
}

/**
 * The outcome of a command run as a session: the result shape (docs/sessions.md, "Result
 * fields") — `failed` is exit code ≠ 0 or unknown, a signal, a timeout, an abort or
 * `maxBuffer` passed — and the sweep that ended the session.
 */
export interface Result<T extends string | Buffer = string> extends Omit<ExitResult<T>, 'error'> {
  /** The sweep that ended the session (see docs/report.md). */
  report: SweepReport;
}

/** Rejection of `Subprocess.result` when the command could not start; the sweep still ran. */
export class SpawnError<T extends string | Buffer = string> extends CommandError<T> {
  declare readonly report: SweepReport;
  constructor(error: TetherError, result: Result<T>) {
    super('SPAWN_FAILED', error.message, result, error.cause);
    this.name = 'SpawnError';
  }
}

// A running command and the promise of its Result; `await` it, or `await using` it.
export interface Subprocess<T extends string | Buffer = string> extends PromiseLike<Result<T>> {
  readonly pid: number | undefined;
  readonly tag: SessionTag;
  /**
   * The process Node started: the command, or the helper that runs it (see
   * `SessionProcess.child`). Signal the command with `kill()`: a SIGKILL sent to the helper
   * ends the helper alone, and the session then ends at once (a sweep, warning `HELPER_LOST`).
   */
  readonly child: ChildProcess;
  /**
   * Sends `signal` (a name, `'SIGRTMIN+n'`…, or a number from 1 to 64; default `'SIGTERM'`) to
   * the command itself, identity-checked. True when sent, false once it has ended. Throws
   * `INVALID_OPTION` for what is no signal (0, 65, an unknown name: `SessionProcess.kill`).
   */
  kill(signal?: SignalName | number): boolean;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /**
   * Resolves after the command exited and the sweep ended. Rejects, after the sweep too, with
   * `SpawnError` (`SPAWN_FAILED`) when it could not start, and — unless `reject: false` — with
   * `CommandError` when it failed: `COMMAND_FAILED`, `TIMED_OUT`, `CANCELLED`, `MAX_BUFFER`.
   */
  readonly result: Promise<Result<T>>;
  /** `result.catch`: a failed command rejects by default, so the handle takes `.catch` too. */
  catch<U = never>(onRejected?: ((error: unknown) => U | PromiseLike<U>) | null): Promise<Result<T> | U>;
  /** `result.finally`. */
  finally(onFinally?: (() => void) | null): Promise<Result<T>>;
  /** Ends the session now (as an abort) and waits for the sweep. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Runs `command` (no shell) as a session: the variable `TETHER_SESSION_<hex>=1` is exported to
 * it, and when it exits — or on abort, timeout or dispose — every process carrying the variable,
 * and every descendant of one, is swept (TERM, grace, KILL; decisions.md D3). Throws `TetherError`
 * `INVALID_OPTION`, before anything starts, for a bad duration (`timeout`, `graceMs`…), a bad
 * option or argument type (`args` not an array of strings — holes too —, a non-object
 * `options`/`env`, an `env` whose entries throw when read, a bad `cwd`/`stdio`/`procRoot`, a
 * `signal` that is not an AbortSignal, an `onEvent`/`onProgress` that is not a function); `result` rejects with
 * `SpawnError` (`SPAWN_FAILED`) when the command cannot start (ENOENT, EACCES, E2BIG, a NUL
 * byte in an argument). A helper lost while the command runs (killed: `HELPER_LOST`) ends the
 * session at once: its status is unknown, and the sweep stops the command and what it started.
 */
// biome-ignore lint/complexity/noBannedTypes: no options, the default encoding.
export function spawn<O extends SpawnOptions = {}>(
  command: string,
  args: readonly string[] = [],
  options: O = {} as O,
): Subprocess<OutputOf<O>> {
  // Every option is checked before anything starts (the session's own in its constructor).
  checkCommand(command, args, options);
  checkSpawnOptions(options);
  const s = new Session(options);
  const proc = startIn(s, command, args, options);
  let stops: Stops;
  try {
    // The ledger's record ends cancelled (or failed TIMED_OUT), unless ambiguous; past maxBuffer
    // the command failed (MAX_BUFFER): an ordinary end, not a cancel.
    stops = armStops(options.timeout, [options.signal], (why) => {
      void (why === 'maxBuffer' ? s.end() : s.cancel(why));
    });
  } catch (error) {
    // The command runs, and the caller gets no handle to end it (a signal whose `aborted` or
    // `addEventListener` throws): it is swept now, synchronously, before the error goes on.
    s.endSync();
    throw error;
  }
  // The command's status can no longer be known, and nothing reaps its subtree: end it now.
  void helperLost(proc)?.then(() => void s.end());
  // A buffer past `maxBuffer` ends the session: the sweep stops the command and what it started.
  void outputOverflow(proc)?.then(() => stops.stop('maxBuffer'));
  const result = settle(s, proc, stops, options) as Promise<Result<OutputOf<O>>>;
  // A caller that only disposes, or only reads `child`, is not crashed by a rejection it never
  // asked for (an unhandled rejection); awaiting `result` or the handle still gets it.
  result.catch(() => undefined);
  return handle(s, proc, result, stops);
}

// The command started in `s`. What the start throws (CONTAINMENT_UNAVAILABLE…): this session ran
// nothing, and is not left for the exit hook. Swept synchronously all the same: were anything
// started before the throw, it is ended before the error reaches the caller, who gets no handle.
function startIn(
  s: Session,
  command: string,
  args: readonly string[],
  options: SpawnOptions,
): SessionProcess<string | Buffer> {
  try {
    return s.spawn(command, args, options);
  } catch (error) {
    s.endSync();
    throw error;
  }
}

// The result: once the command exited and the sweep ended, with what tether ended it for.
async function settle(
  s: Session,
  proc: SessionProcess<string | Buffer>,
  stops: Stops,
  options: SpawnOptions,
): Promise<Result<string | Buffer>> {
  let exited: ExitResult<string | Buffer>;
  try {
    exited = await proc.exited; // never rejects; were it to, the session is swept all the same
  } catch (e) {
    await s.end();
    throw e;
  } finally {
    stops.clear();
  }
  const { error, ...exit } = exited;
  // What ended the command, as of its end: a dispose during the sweep does not rewrite it (an
  // output that could not be decoded counts as past its bound).
  const why = stops.reason() ?? (exit.maxBufferExceeded ? 'maxBuffer' : undefined);
  const report = await s.end();
  const timedOut = why === 'timeout';
  const isCanceled = why === 'abort';
  const failed = exit.failed || why !== undefined;
  const done: Result<string | Buffer> = { ...exit, failed, timedOut, isCanceled, report };
  if (error) throw new SpawnError(error, done);
  if (failed && options.reject !== false)
    throw failureOf(done, why, {
      timeoutMs: options.timeout,
      maxBuffer: effectiveMaxBuffer(options.maxBuffer ?? DEFAULT_MAX_BUFFER, options.encoding ?? 'utf8'),
      overflowed: exit.maxBufferExceeded,
    });
  return done;
}

// The handle the caller holds: the command's pid, streams and kill, and the awaitable result.
function handle<T extends string | Buffer>(
  s: Session,
  proc: SessionProcess<string | Buffer>,
  result: Promise<Result<T>>,
  stops: Stops,
): Subprocess<T> {
  return {
    pid: proc.pid,
    tag: s.tag,
    child: proc.child,
    kill: (signal) => proc.kill(signal),
    stdin: proc.stdin,
    stdout: proc.stdout,
    stderr: proc.stderr,
    result,
    // biome-ignore lint/suspicious/noThenProperty: a Subprocess is awaitable, like execa's.
    then: (onFulfilled, onRejected) => result.then(onFulfilled, onRejected),
    catch: (onRejected) => result.catch(onRejected),
    finally: (onFinally) => result.finally(onFinally),
    async [Symbol.asyncDispose]() {
      stops.stop('abort');
      await result.catch(() => undefined);
    },
  };
}
