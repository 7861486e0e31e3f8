// spawn(): one command as its own session, swept on every exit path (clean exit, failure,
// start failure, abort, timeout, an exception in the caller's `await using` block).
import type { ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { SessionTag } from '../proc/tag.js';
import { AllOutput } from './all.js';
import { DEFAULT_MAX_BUFFER, effectiveMaxBuffer } from './collect.js';
import { armStops, type Stops } from './deadline.js';
import { boundFor, sessionEncoding } from './encoding.js';
import { feedInput } from './input.js';
import type { SignalName } from './kill.js';
import { COMMAND_KEYS, pick, SESSION_KEYS } from './known-options.js';
import { type CommandOptions, checkCommand, checkSpawnOptions } from './options.js';
import { helperLost, outputOverflow, Session, type SessionProcess } from './session.js';
import type { SpawnOptions } from './spawn-options.js';
import { planSpawn, type SpawnPlan } from './spawn-plan.js';
import { type Result, type SpawnOutput, settle } from './spawn-result.js';

export type { SpawnOptions } from './spawn-options.js';
export { type Result, SpawnError, type SpawnOutput } from './spawn-result.js';

/** The type of `stdout`/`stderr`/`all` for options `O`: lines, Buffers, or text. */
export type SpawnOutputOf<O> = O extends { encoding: 'buffer' }
  ? Buffer
  : O extends { lines: true }
    ? O extends { encoding: 'hex' | 'base64' | 'base64url' | 'latin1' | 'ascii' }
      ? string
      : string[]
    : string;

// A running command and the promise of its Result; `await` it, or `await using` it.
export interface Subprocess<T extends SpawnOutput = string> extends PromiseLike<Result<T>> {
  readonly pid: number | undefined;
  /** The session tag's name, `TETHER_SESSION_<32 hex>`, as the result's `tag`. */
  readonly tag: string;
  /** The session's variable: its `name` (= `tag`) and its environ `entry`, `NAME=1`. */
  readonly tagVariable: SessionTag;
  /**
   * The process Node started: the command, or the helper that runs it (see
   * `SessionProcess.child`). Signal the command with `kill()`: a SIGKILL sent to the helper
   * ends the helper alone, and the session then ends at once (a sweep, warning `HELPER_LOST`).
   */
  readonly child: ChildProcess;
  /**
   * Sends `signal` (a name, `'SIGRTMIN+n'`…, or a number from 1 to 64; default `killSignal`) to
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
 * Runs `command` with `args` (no shell unless `shell`; `spawn(command, options)` as execa's
 * call with the arguments left out) as a session: the variable `TETHER_SESSION_<hex>=1` is exported to
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
  options?: O,
): Subprocess<SpawnOutputOf<O>>;
// biome-ignore lint/complexity/noBannedTypes: no options, the default encoding.
export function spawn<O extends SpawnOptions = {}>(
  command: string,
  args?: readonly string[],
  options?: O,
): Subprocess<SpawnOutputOf<O>>;
// biome-ignore lint/complexity/noBannedTypes: no options, the default encoding.
export function spawn<O extends SpawnOptions = {}>(
  command: string,
  argsOrOptions?: readonly string[] | O,
  optionsAfterArgs?: O,
): Subprocess<SpawnOutputOf<O>> {
  // execa's `(file, options)`: the arguments left out. Anything else that is not an array is
  // `args`, and checkCommand refuses it (a string would be spread one argument per character).
  const optionsOnly = isPlainObject(argsOrOptions) && optionsAfterArgs === undefined;
  const args = (optionsOnly ? [] : (argsOrOptions ?? [])) as readonly string[];
  const options = (optionsOnly ? argsOrOptions : (optionsAfterArgs ?? {})) as O;
  // Every option is checked before anything starts (the session's own in its constructor).
  checkSpawnOptions(options);
  // The command's options as the session takes them (its encodings are 'utf8' and 'buffer': the
  // plan checks execa's), before the plan reads any of them (`env`'s getters).
  checkCommand(command, args, { ...options, encoding: undefined });
  const plan = planSpawn(command, args, options);
  checkCommand(plan.file, plan.args, plan.options);
  const s = new Session(pick(plan.options, SESSION_KEYS));
  const proc = startIn(s, plan.file, plan.args, pick(plan.options, COMMAND_KEYS));
  const all = plan.shape.all ? allOf(proc, plan) : undefined;
  const stops = stopsOf(s, proc, plan, options);
  feedInput(proc.stdin, options.input, options.inputFile);
  // The command's status can no longer be known, and nothing reaps its subtree: end it now.
  void helperLost(proc)?.then(() => void s.end());
  // A buffer past `maxBuffer` ends the session: the sweep stops the command and what it started.
  void outputOverflow(proc)?.then(() => stops.stop('max-buffer'));
  const result = settle(s, proc, stops, plan, all) as Promise<Result<SpawnOutputOf<O>>>;
  // A caller that only disposes, or only reads `child`, is not crashed by a rejection it never
  // asked for (an unhandled rejection); awaiting `result` or the handle still gets it.
  result.catch(() => undefined);
  return handle(s, proc, result, stops, plan);
}

// The stops of the command: its timeout and signals. The ledger's record ends cancelled (or
// failed TIMED_OUT), unless ambiguous; past maxBuffer the command failed (MAX_BUFFER): an
// ordinary end, not a cancel. A `killSignal` goes to the command first, then the sweep.
function stopsOf(s: Session, proc: SessionProcess<string | Buffer>, plan: SpawnPlan, o: SpawnOptions): Stops {
  try {
    return armStops(o.timeout, [o.signal, o.cancelSignal], (why) => {
      if (why !== 'max-buffer' && plan.killSignal !== undefined) proc.kill(plan.killSignal);
      void (why === 'max-buffer' ? s.end() : s.cancel(why));
    });
  } catch (error) {
    // The command runs, and the caller gets no handle to end it (a signal whose `aborted` or
    // `addEventListener` throws): it is swept now, synchronously, before the error goes on.
    s.endSync();
    throw error;
  }
}

// `all`'s reader, beside the session's: both streams' bounds together, as execa's, never past
// what can be decoded (`effectiveMaxBuffer`, `boundFor`).
function allOf(proc: SessionProcess<string | Buffer>, plan: SpawnPlan): AllOutput | undefined {
  const o = plan.options as { buffer?: boolean; maxBuffer?: number };
  if (o.buffer === false) return undefined;
  const { encoding } = plan.shape;
  const both = effectiveMaxBuffer(2 * (o.maxBuffer ?? DEFAULT_MAX_BUFFER), sessionEncoding(encoding));
  return new AllOutput([proc.stdout, proc.stderr], boundFor(encoding, both));
}

// The command started in `s`. What the start throws (CONTAINMENT_UNAVAILABLE…): this session ran
// nothing, and is not left for the exit hook. Swept synchronously all the same: were anything
// started before the throw, it is ended before the error reaches the caller, who gets no handle.
function startIn(
  s: Session,
  command: string,
  args: readonly string[],
  options: CommandOptions,
): SessionProcess<string | Buffer> {
  try {
    return s.spawn(command, args, options);
  } catch (error) {
    s.endSync();
    throw error;
  }
}

// The handle the caller holds: the command's pid, streams and kill, and the awaitable result.
function handle<T extends SpawnOutput>(
  s: Session,
  proc: SessionProcess<string | Buffer>,
  result: Promise<Result<T>>,
  stops: Stops,
  plan: SpawnPlan,
): Subprocess<T> {
  return {
    pid: proc.pid,
    tag: s.tag,
    tagVariable: s.tagVariable,
    child: proc.child,
    kill: (signal) => proc.kill(signal ?? plan.killSignal),
    stdin: proc.stdin,
    stdout: proc.stdout,
    stderr: proc.stderr,
    result,
    // biome-ignore lint/suspicious/noThenProperty: a Subprocess is awaitable, like execa's.
    then: (onFulfilled, onRejected) => result.then(onFulfilled, onRejected),
    catch: (onRejected) => result.catch(onRejected),
    finally: (onFinally) => result.finally(onFinally),
    async [Symbol.asyncDispose]() {
      stops.stop('cancel');
      await result.catch(() => undefined);
    },
  };
}

// An object that is no array (and not null): options, not arguments.
function isPlainObject(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
