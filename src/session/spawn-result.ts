// `spawn()`'s result: the session command's result (src/session/result.ts) once the sweep ended,
// with why tether ended it (`timedOut`, `isCanceled`), shaped as execa gives it (`encoding`,
// `stripFinalNewline`, `lines`, `all`) and its `command` as the caller wrote it.
import type { TetherError } from '../errors.js';
import type { SweepReport } from '../sweep/report.js';
import type { AllOutput } from './all.js';
import { DEFAULT_MAX_BUFFER, effectiveMaxBuffer } from './collect.js';
import type { Stops } from './deadline.js';
import { decode, sessionEncoding } from './encoding.js';
import { shapeLines } from './lines.js';
import { CommandError, commandFields, type EndReason, type ExitResult, failureOf } from './result.js';
import type { Session, SessionProcess } from './session.js';
import type { SpawnPlan } from './spawn-plan.js';

/** What `stdout`, `stderr` and `all` hold: text, bytes (`encoding: 'buffer'`), or lines (`lines`). */
export type SpawnOutput = string | Buffer | string[];

/**
 * The outcome of a command run as a session: the result shape (docs/sessions.md, "Result
 * fields") — `failed` is exit code ≠ 0 or unknown, a signal, a timeout, an abort or
 * `maxBuffer` passed — and the sweep that ended the session.
 */
export interface Result<T extends SpawnOutput = string>
  extends Omit<ExitResult<string>, 'error' | 'stdout' | 'stderr'> {
  stdout: T;
  stderr: T;
  /** With `all: true`: stdout and stderr interleaved in arrival order; else absent. */
  all?: T;
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

/**
 * The result, once the command exited and the sweep ended: resolved, or (a start failure; a
 * failure unless `reject: false`) the error carrying the same fields.
 */
export async function settle(
  s: Session,
  proc: SessionProcess<string | Buffer>,
  stops: Stops,
  plan: SpawnPlan,
  all: AllOutput | undefined,
): Promise<Result<SpawnOutput>> {
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
  const why = stops.reason() ?? (exit.maxBufferExceeded ? 'max-buffer' : undefined);
  const report = await s.end();
  const name = { command: plan.commandLine, tag: exit.tag };
  const fields = commandFields(name, exit, exit, exit.durationMs, exit.failed, why);
  const { failed } = fields;
  const done = shaped({ ...exit, ...fields, report }, plan, all);
  if (error) throw withOutput(new SpawnError(error, asText(done)), done);
  if (failed && plan.options.reject !== false) throw rejection(done, why, plan);
  return done;
}

// The result with its outputs as the caller asked for them.
function shaped(
  result: Omit<Result<string | Buffer>, 'all'>,
  plan: SpawnPlan,
  all: AllOutput | undefined,
): Result<SpawnOutput> {
  const { shape } = plan;
  const give = (value: string | Buffer) => shapeLines(decode(value, shape.encoding), shape);
  const done: Result<SpawnOutput> = { ...result, stdout: give(result.stdout), stderr: give(result.stderr) };
  // Bounded so that it decodes; were memory short for it all the same, it is empty, not a throw.
  if (all !== undefined) {
    const read = sessionEncoding(shape.encoding);
    done.all = orEmpty(
      () => give(all.value(read)),
      () => give(read === 'buffer' ? Buffer.alloc(0) : ''),
    );
  }
  return done;
}

// `make()`, or the empty output of its shape when it throws (ERR_STRING_TOO_LONG, no memory).
function orEmpty(make: () => SpawnOutput, empty: () => SpawnOutput): SpawnOutput {
  try {
    return make();
  } catch {
    return empty();
  }
}

// The error of a failed result: its message from the text of stderr, its fields the result's.
function rejection(
  done: Result<SpawnOutput>,
  why: EndReason | undefined,
  plan: SpawnPlan,
): CommandError<string | Buffer> {
  const o = plan.options as { timeout?: number; maxBuffer?: number; encoding?: 'utf8' | 'buffer' };
  const error = failureOf(asText(done), why, {
    timeoutMs: o.timeout,
    maxBuffer: effectiveMaxBuffer(o.maxBuffer ?? DEFAULT_MAX_BUFFER, o.encoding ?? 'utf8'),
    overflowed: done.maxBufferExceeded,
  });
  return withOutput(error, done);
}

// `result` with lines joined again: what an error's message quotes.
function asText<T extends string | Buffer>(result: Result<SpawnOutput>): Result<T> {
  const text = (v: SpawnOutput | undefined) => (Array.isArray(v) ? v.join('\n') : v);
  return { ...result, stdout: text(result.stdout), stderr: text(result.stderr) } as Result<T>;
}

// The error with the result's own outputs (lines stay lines) and `all`, as execa's error has them.
function withOutput<E extends CommandError<string | Buffer>>(error: E, done: Result<SpawnOutput>): E {
  const fields = error as unknown as Record<string, unknown>;
  fields.stdout = done.stdout;
  fields.stderr = done.stderr;
  if (done.all !== undefined) fields.all = done.all;
  return error;
}
