// One result shape for `spawn()`, `session.spawn()` and `sandbox.exec()`, shared by success and
// failure, built in one place; the error of a failed command carries the same fields, and its
// message comes from one ladder of conditions (first match wins), as execa's does.
import { TetherError, type TetherErrorCode } from '../errors.js';
import type { SweepReport } from '../sweep/report.js';

/** The fields every command result has (docs/sessions.md, "Result fields"). */
export interface CommandResult<T extends string | Buffer = string> {
  /** The command line, execa-style: the program and its arguments joined by spaces. */
  command: string;
  /** Null when a signal ended it, or when its status is unknown (a `HELPER_LOST` warning). */
  exitCode: number | null;
  /** The signal that ended it (`'SIGTERM'`…), or null. */
  signal: NodeJS.Signals | null;
  /** What it wrote, buffered (`buffer`, `maxBuffer`, `encoding`); empty when not buffered. */
  stdout: T;
  stderr: T;
  /** Exit code ≠ 0 or unknown, a signal, a timeout, an abort, or `maxBuffer` passed. */
  failed: boolean;
  /** A `timeout` (spawn) or the silence bound (sandbox.exec) ended it. */
  timedOut: boolean;
  /** An abort (`signal`, dispose) ended it. */
  isCanceled: boolean;
  /** From the start to the exit, ms (`performance.now()` clock). */
  durationMs: number;
  /** The session tag (`TETHER_SESSION_<hex>`) it ran under. */
  tag: string;
}

/**
 * Why tether stopped a command or a session before it ended by itself: one word per cause,
 * wherever one is said — `Session.cancel(reason)`, a sandbox session's `stoppedBy`,
 * `sandbox.exec`'s `stoppedBy`. `timeout`: a deadline passed; `cancel`: the caller's signal,
 * `stop()` or `cancel()`; `max-buffer`: a collected stream passed `maxBuffer`; `output-error`:
 * the caller's own output stream failed (EPIPE…); `silence`: the sandbox call's output went
 * quiet past its bound.
 */
export type StopReason = 'timeout' | 'cancel' | 'max-buffer' | 'output-error' | 'silence';

/**
 * Why tether ended a command before it exited on its own, if it did, as the result's fields
 * (`timedOut`, `isCanceled`, `MAX_BUFFER`) read it: `sandbox.exec`'s stops map to it once
 * (src/sandbox/exec-stops.ts `endReasonOf`: silence is a deadline; a failed output stream is the
 * call's failure, not an end of tether's: none).
 */
export type EndReason = Extract<StopReason, 'timeout' | 'cancel' | 'max-buffer'>;

/**
 * The fields every command result has, built in one place for `session.spawn()`, `spawn()` and
 * `sandbox.exec()`: `failed` is the caller's own verdict (a status ≠ 0 or unknown, a signal, a
 * bound passed, a client that failed) or any stop of tether's (`stop`), which also sets
 * `timedOut` and `isCanceled`.
 */
export function commandFields<T extends string | Buffer>(
  name: { command: string; tag: string },
  status: { exitCode: number | null; signal: NodeJS.Signals | null },
  streams: { stdout: T; stderr: T },
  durationMs: number,
  failed: boolean,
  stop?: EndReason,
): CommandResult<T> {
  return {
    command: name.command,
    exitCode: status.exitCode,
    signal: status.signal,
    stdout: streams.stdout,
    stderr: streams.stderr,
    failed: failed || stop !== undefined,
    timedOut: stop === 'timeout',
    isCanceled: stop === 'cancel',
    durationMs,
    tag: name.tag,
  };
}

/** What the ladder reads besides the result: the deadline and bound that applied. */
export interface FailureContext {
  timeoutMs?: number;
  maxBuffer?: number;
  /** Which stream passed `maxBuffer`. */
  overflowed?: 'stdout' | 'stderr';
  /** What failed, when the command's own status does not say it (sandbox.exec: the client failed). */
  what?: string;
}

// The error code of a failed result, first match wins: a bound passed, a deadline, an abort,
// then the command's own failure.
function codeOf(result: CommandResult<string | Buffer>, reason: EndReason | undefined): TetherErrorCode {
  if (reason === 'max-buffer') return 'MAX_BUFFER';
  if (result.timedOut) return 'TIMED_OUT';
  if (result.isCanceled) return 'CANCELLED';
  return 'COMMAND_FAILED';
}

// "Command failed with exit code 2: sh -c exit 2", and the first lines of stderr after it.
function messageOf(
  code: TetherErrorCode,
  result: CommandResult<string | Buffer> & { signalNumber?: number },
  context: FailureContext,
): string {
  const what =
    context.what !== undefined && code === 'COMMAND_FAILED'
      ? context.what
      : code === 'MAX_BUFFER'
        ? `Command's ${context.overflowed ?? 'output'} passed maxBuffer (${context.maxBuffer} bytes)`
        : code === 'TIMED_OUT'
          ? `Command timed out after ${context.timeoutMs} milliseconds${context.what === undefined ? '' : ` (${context.what})`}`
          : code === 'CANCELLED'
            ? 'Command was canceled'
            : result.signal !== null
              ? `Command was killed with ${result.signal}`
              : result.signalNumber !== undefined
                ? `Command was killed with signal ${result.signalNumber}`
                : result.exitCode === null
                  ? 'Command ended with an unknown status'
                  : `Command failed with exit code ${result.exitCode}`;
  const stderr = String(result.stderr).trim();
  const tail = stderr === '' ? '' : `\n${stderr.length > 2000 ? `${stderr.slice(0, 2000)}…` : stderr}`;
  return `${what}: ${result.command}${tail}`;
}

/**
 * The rejection of a failed command: `COMMAND_FAILED` (exit code ≠ 0, a signal, an unknown
 * status), `TIMED_OUT`, `CANCELLED` or `MAX_BUFFER`, with every field of the result as its own
 * property (`command`, `stdout`, `stderr`, `failed`, `timedOut`, `isCanceled`, `durationMs`,
 * `outputTimedOut`) besides TetherError's flat `tag`, `report`, `exitCode`, `signal`.
 */
export class CommandError<T extends string | Buffer = string>
  extends TetherError
  implements CommandResult<T>
{
  declare readonly tag: string;
  declare readonly exitCode: number | null;
  declare readonly signal: NodeJS.Signals | null;
  readonly command: string;
  readonly stdout: T;
  readonly stderr: T;
  readonly failed: boolean;
  readonly timedOut: boolean;
  readonly isCanceled: boolean;
  readonly durationMs: number;
  /** True when a process still held stdout/stderr past the output cap (spawn, session.spawn). */
  readonly outputTimedOut?: boolean;
  /** Which stream passed `maxBuffer` (code `MAX_BUFFER`): as the result's own field. */
  readonly maxBufferExceeded?: 'stdout' | 'stderr';
  constructor(
    code: TetherErrorCode,
    message: string,
    result: CommandResult<T> & {
      report?: SweepReport;
      outputTimedOut?: boolean;
      maxBufferExceeded?: 'stdout' | 'stderr';
    },
    cause?: unknown,
  ) {
    super(code, message, {
      ...(cause === undefined ? {} : { cause }),
      tag: result.tag,
      exitCode: result.exitCode,
      signal: result.signal,
      ...(result.report ? { report: result.report } : {}),
    });
    this.name = 'CommandError';
    this.command = result.command;
    this.stdout = result.stdout;
    this.stderr = result.stderr;
    this.failed = result.failed;
    this.timedOut = result.timedOut;
    this.isCanceled = result.isCanceled;
    this.durationMs = result.durationMs;
    if (result.outputTimedOut !== undefined) this.outputTimedOut = result.outputTimedOut;
    if (result.maxBufferExceeded !== undefined) this.maxBufferExceeded = result.maxBufferExceeded;
  }
}

/** The error a failed result rejects with (its code from the ladder above). */
export function failureOf<R extends CommandResult<string | Buffer> & { report?: SweepReport }>(
  result: R,
  reason: EndReason | undefined,
  context: FailureContext = {},
): CommandError<R['stdout']> {
  const code = codeOf(result, reason);
  return new CommandError(code, messageOf(code, result, context), result);
}

/** True when a command's end is a failure (`failed`), from its status and why it was ended. */
export function isFailure(
  exitCode: number | null,
  signal: string | null,
  reason: EndReason | undefined,
): boolean {
  return exitCode !== 0 || signal !== null || reason !== undefined;
}

/** The command line as a string, execa-style: program and arguments joined by spaces. */
export function commandLine(file: string, args: readonly string[]): string {
  return [file, ...args].join(' ');
}

/**
 * How one command ended: the command part of the result shape (`command`, `exitCode`,
 * `signal`, `stdout`, `stderr`, `failed`, `durationMs` from spawn to exit, `tag`).
 * `timedOut` and `isCanceled` are false here: a session sets no deadline on one command
 * (`spawn()` does, and sets them). `failed` is exit code ≠ 0 or unknown, a signal, or
 * `maxBuffer` passed.
 */
export interface ExitResult<T extends string | Buffer = string> extends CommandResult<T> {
  /** The number of the signal that ended it when Node has no name for it (real-time signals). */
  signalNumber?: number;
  /**
   * True only when tether was reading stdout/stderr and a process still held one of them open
   * `outputCapMs` after the exit (a leftover with the pipe: decisions.md D8). False when the
   * pipes closed, and when the caller (`buffer: false`) had not read a stream to its end.
   */
  outputTimedOut: boolean;
  /** Which buffered stream passed `maxBuffer` (the command was then ended with SIGTERM). */
  maxBufferExceeded?: 'stdout' | 'stderr';
  /** Set when the command could not be started (`SPAWN_FAILED`, `cause` is the errno error). */
  error?: TetherError;
}

/** How a command ended, before its output is awaited: a status, or a start failure. */
export type CommandEnd =
  | { exitCode: number | null; signal: NodeJS.Signals | null; signalNumber?: number }
  | { error: TetherError };

/**
 * The one builder of a session command's result (`ExitResult`): `base` names it, `end` is how it
 * ended, `output` what its streams kept (read now: a stream that cannot be decoded counts as
 * past its bound), `durationMs` from spawn to exit, `outputHeld` whether a leftover still held
 * a stream at the cap. `failed`: a start failure, an exit code ≠ 0 or unknown, a signal, or
 * `maxBuffer` passed.
 */
export function exitResult(
  base: { command: string; tag: string },
  end: CommandEnd,
  output: {
    value(): { stdout: string | Buffer; stderr: string | Buffer };
    readonly overflowed?: 'stdout' | 'stderr';
  },
  durationMs: number,
  outputHeld: boolean,
): ExitResult<string | Buffer> {
  const streams = output.value();
  if ('error' in end) {
    const fields = commandFields(base, { exitCode: null, signal: null }, streams, durationMs, true);
    return { ...fields, outputTimedOut: false, error: end.error };
  }
  const failed = end.exitCode !== 0 || end.signal !== null || output.overflowed !== undefined;
  const result: ExitResult<string | Buffer> = {
    ...commandFields(base, end, streams, durationMs, failed),
    outputTimedOut: outputHeld,
  };
  if (end.signalNumber !== undefined) result.signalNumber = end.signalNumber;
  if (output.overflowed) result.maxBufferExceeded = output.overflowed;
  return result;
}
