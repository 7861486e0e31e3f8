// sandbox.exec (ADR-127 amendment §7): a command inside a container proves its end. It runs
// under the completion wrapper; the completion line found → a proven end; missing → an unknown
// end: the command's session is swept in the container and the call fails with
// ExecStatusUnknownError, or AMBIGUOUS_EFFECT when the sweep could not settle it. Never a
// success carrying partial output.
import type { Readable, Writable } from 'node:stream';
import { TetherError } from '../errors.js';
import { checkMs, MAX_TIMER_MS } from '../options.js';
import { createTag, parseTag, type SessionTag } from '../proc/tag.js';
import type { SweepReport } from '../sweep/report.js';
import type { ClientExit, ExecChannel } from './channel.js';
import { type Completion, CompletionStripper, createNonce } from './completion.js';
import { ExecStatusUnknownError, nameProcesses, SandboxError } from './errors.js';
import { program } from './programs.js';
import { OUTPUT_CAP_MS, within } from './run.js';
import { checkShell, describeExit, type SandboxSweepOptions, sweep } from './sweep.js';

/** Scripts above this size (bytes) go through a temp file whose size is checked (amendment §7). */
export const SCRIPT_ARG_MAX = 100 * 1024;

/**
 * Default bound on a silent exec client, ms: no byte on its stdout or stderr for this long and
 * the call is stopped (the session swept, the client ended) — 30 minutes.
 */
export const SILENCE_MS = 30 * 60_000;

/** Why a call was stopped before its client exited: a cancel, a failed output stream, silence. */
export type StopReason = 'cancel' | 'output-error' | 'silence';

/** Options of `sandbox.exec`. */
export interface SandboxExecOptions {
  /** The session tag exported to the command (a fresh one by default). */
  tag?: SessionTag | string;
  /** The target's POSIX shell that runs the wrapper, as argv. Default `['sh']`. */
  shell?: string[];
  /**
   * A script for the interpreter `argv` (e.g. `['bash']`): up to 100 KB it is passed as
   * `argv… -c SCRIPT`; above, it is streamed to a private temp file in the target and run as
   * `argv… -s` reading that file, only once the file's size is the size sent.
   */
  script?: string | Buffer;
  /** The command's stdin (not with `script`): bytes, or a stream piped in. Default: empty. */
  input?: string | Buffer | Readable;
  /** Stream the command's stdout / stderr here as they arrive (the result then holds none). */
  stdout?: Writable;
  stderr?: Writable;
  /**
   * A cancel: sweeps the session in the target (10 s budget), then ends the client. Also cuts
   * the budget of the sweep an unknown end runs to 10 s when it aborts during that sweep.
   */
  signal?: AbortSignal;
  /**
   * Bound on a silent client, ms: when neither stdout nor stderr has brought a byte for this
   * long, the call is stopped as a cancel is (`stoppedBy: 'silence'`). 0: no bound. Default
   * 1 800 000 (30 min, `SILENCE_MS`). Time the caller's own `stdout`/`stderr` stream held the
   * output back (backpressure) does not count.
   */
  silenceMs?: number;
  /** Options of the sweep an unknown end or a stop runs; its `shell` defaults to `shell`. */
  sweep?: Omit<SandboxSweepOptions, 'signal'>;
}

/** A proven end (the completion line arrived). */
export interface SandboxExecResult {
  /** `exitCode` 0 and `clientStatus` 0: the only success. */
  ok: boolean;
  /** The command's status as the wrapper's shell saw it (128+N for a signal N). */
  exitCode: number;
  /**
   * The exec client's own exit status: null when a signal ended it (`clientSignal`), or when
   * tether ended it 2 s after the line because a leftover still held the stream (`streamHeld`;
   * then not held against `ok`).
   */
  clientStatus: number | null;
  /** The signal that ended the client, or null. */
  clientSignal: NodeJS.Signals | null;
  /** A process the command left still held the output 2 s after the line: tether ended the client. */
  streamHeld: boolean;
  /** The command's stdout minus the completion line, byte-exact (empty when streamed). */
  stdout: Buffer;
  stderr: Buffer;
  tag: string;
  /** True when `signal` aborted the call (`stoppedBy: 'cancel'`). */
  cancelled: boolean;
  /** Why the call was stopped before the client exited, or null; `report` is then that stop's sweep. */
  stoppedBy: StopReason | null;
  /** The error of the caller's `stdout`/`stderr` stream that stopped the call (EPIPE…). */
  outputError?: Error;
  report?: SweepReport;
}

/**
 * Runs `argv` in the target of `channel` under the completion wrapper, with the session tag
 * exported to it (`env TAG=1 SHELL -c WRAPPER …`) and the nonce as the first line of its stdin.
 * Resolves on a proven end (check `ok`). A stop — `signal`, a `stdout`/`stderr` stream that
 * fails (EPIPE: its reader went away), `silenceMs` — sweeps the session, then ends the client.
 * Throws `ExecStatusUnknownError` (`EXEC_STATUS_UNKNOWN`, with the sweep's `report`) when the
 * line never arrived and the sweep settled the session; `SandboxError` `AMBIGUOUS_EFFECT` when
 * it could not (`cause`: `SWEEP_CUT` / `CHANNEL_UNREACHABLE`, or `report` with survivors);
 * `INPUT_CUT` when a large script arrived cut (nothing ran); `CHANNEL_UNREACHABLE` when the
 * exec client itself could not start (nothing left this machine); `INVALID_OPTION` on bad input.
 */
export async function exec(
  channel: ExecChannel,
  argv: string[],
  options: SandboxExecOptions = {},
): Promise<SandboxExecResult> {
  if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string') || !argv[0]) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid command ${JSON.stringify(argv)}: expected a non-empty argv whose first element names a program`,
    );
  }
  if (options.script !== undefined && options.input !== undefined) {
    throw new TetherError(
      'INVALID_OPTION',
      'invalid options: `input` and `script` both feed stdin; give one',
    );
  }
  const tag =
    options.tag === undefined
      ? createTag()
      : typeof options.tag === 'string'
        ? parseTag(options.tag)
        : options.tag;
  const shell = checkShell(options.shell);
  const silenceMs = checkMs('silenceMs', options.silenceMs ?? SILENCE_MS);
  // The sweep an unknown end or a stop runs uses the command's shell: a container without `sh`
  // has no other.
  const sweepOptions: Omit<SandboxSweepOptions, 'signal'> = { shell, ...options.sweep };
  const nonce = createNonce();
  const wrapper = ['env', tag.entry, ...shell, '-c', program('wrap'), 'tether-wrap'];
  let input: Buffer | Readable | undefined =
    typeof options.input === 'string' ? Buffer.from(options.input) : options.input;
  let fullArgv: string[];
  let scriptMode = false;
  if (options.script === undefined) {
    fullArgv = [...wrapper, 'run', ...argv];
  } else {
    const script = Buffer.from(options.script);
    if (script.length <= SCRIPT_ARG_MAX) {
      fullArgv = [...wrapper, 'run', ...argv, '-c', script.toString('utf8')];
    } else {
      fullArgv = [...wrapper, 'script', String(script.length), ...argv, '-s'];
      input = script;
      scriptMode = true;
    }
  }

  const client = channel.exec(fullArgv);
  client.stdin.on('error', () => {}); // a wrapper that refused reads no more: not a crash
  const stripper = new CompletionStripper(nonce);
  const out: Buffer[] = [];
  const err: Buffer[] = [];

  // A stop (a cancel, a failed output stream, silence) sweeps first, while the client still runs
  // (ADR-127 §2: before the client's kill).
  let stoppedBy: StopReason | null = null;
  let stopSweep: Promise<SweepReport | Error> | undefined;
  let onStop: () => void = () => {};
  const stopRequested = new Promise<'stop'>((resolve) => (onStop = () => resolve('stop')));
  let clientExited = false;
  const stop = (reason: StopReason) => {
    if (stoppedBy || clientExited) return;
    stoppedBy = reason;
    stopSweep = sweep(channel, tag, { ...sweepOptions, signal: AbortSignal.abort() }).catch((e: Error) => e);
    onStop();
  };

  // The caller's streams: backpressure pauses the client's stream; an error (EPIPE) stops the
  // call — the output can no longer be delivered — and what comes after is discarded.
  let outputError: Error | undefined;
  let lastByte = performance.now();
  let held = 0; // streams paused for the caller's backpressure
  const onOutputError = (error: Error) => {
    outputError ??= error;
    client.stdout.resume();
    client.stderr.resume();
    stop('output-error');
  };
  for (const w of new Set([options.stdout, options.stderr])) w?.on('error', onOutputError);
  const deliver = (into: Writable | undefined, from: Readable, list: Buffer[], b: Buffer) => {
    if (b.length === 0) return;
    if (!into) {
      list.push(b);
      return;
    }
    if (outputError) return;
    if (!into.write(b) && !from.isPaused()) {
      from.pause();
      held += 1;
      into.once('drain', () => {
        held -= 1;
        lastByte = performance.now();
        from.resume();
      });
    }
  };
  const toOut = (b: Buffer) => deliver(options.stdout, client.stdout, out, b);
  const closed = (stream: Readable, onData: (b: Buffer) => void, onEnd?: () => void) =>
    new Promise<void>((resolve) => {
      let ended = false;
      const end = () => {
        if (ended) return;
        ended = true;
        onEnd?.();
        resolve();
      };
      stream.on('data', (b: Buffer) => {
        lastByte = performance.now();
        onData(b);
      });
      stream.once('end', end);
      stream.once('close', end);
      stream.once('error', end);
    });
  // Once the line has arrived, the command has ended and its stdout is all here: a leftover
  // holding the stream open must not hold the call more than 2 s (ADR-127 §5). The client is
  // then ended by us, and its status is not held against the command.
  let lineTimer: NodeJS.Timeout | undefined;
  let endedAfterLine = false;
  const onStdout = (c: Buffer) => {
    toOut(stripper.push(c));
    if (stripper.completion && !lineTimer) {
      lineTimer = setTimeout(() => {
        endedAfterLine = true;
        client.kill();
      }, OUTPUT_CAP_MS);
    }
  };
  const streams = Promise.all([
    closed(client.stdout, onStdout, () => toOut(stripper.end())),
    closed(client.stderr, (c) => deliver(options.stderr, client.stderr, err, c)),
  ]);
  // The nonce goes first on stdin, where the command cannot read it (docs/sandbox.md); in script
  // mode with the temp dir's own token after it — the dir's name shows, so it is never the nonce.
  const nonceLine = Buffer.from(scriptMode ? `${nonce} ${createNonce()}\n` : `${nonce}\n`);
  if (input === undefined) client.stdin.end(nonceLine);
  else if (Buffer.isBuffer(input)) client.stdin.end(Buffer.concat([nonceLine, input]));
  else {
    client.stdin.write(nonceLine);
    input.pipe(client.stdin);
  }

  // The bound on a silent client: checked when it could have run out, re-armed otherwise.
  let silenceTimer: NodeJS.Timeout | undefined;
  const armSilence = () => {
    const left = lastByte + silenceMs - performance.now();
    silenceTimer = setTimeout(
      () => {
        if (held > 0 || performance.now() - lastByte < silenceMs - 1) armSilence();
        else stop('silence');
      },
      Math.max(0, Math.min(left, MAX_TIMER_MS)),
    );
  };
  if (silenceMs > 0) armSilence();

  const onAbort = () => stop('cancel');
  if (options.signal?.aborted) onAbort();
  else options.signal?.addEventListener('abort', onAbort, { once: true });
  let exit: ClientExit;
  let stopped: SweepReport | Error | undefined;
  try {
    const first = await Promise.race([client.exited, stopRequested]);
    if (first === 'stop') {
      stopped = await (stopSweep as Promise<SweepReport | Error>);
      // The sweep ended the command: the wrapper's line is on its way. Then end the client.
      await within(client.exited, OUTPUT_CAP_MS);
      client.kill();
    }
    exit = await client.exited;
    clientExited = true;
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
    clearTimeout(silenceTimer);
  }
  // Past the client's exit, a leftover holding the output must not hold us (ADR-127 §5).
  await within(streams, OUTPUT_CAP_MS);
  clearTimeout(lineTimer);
  client.kill();
  for (const w of new Set([options.stdout, options.stderr])) w?.off('error', onOutputError);
  if (!stripper.completion) toOut(stripper.end());

  const completion: Completion | undefined = stripper.completion;
  const said = describeExit(exit, Buffer.concat(err));
  if (exit.error && !completion && out.length === 0 && err.length === 0) {
    // The client never started here: the argv never left this machine, nothing ran.
    throw new SandboxError('CHANNEL_UNREACHABLE', `the command was not run in ${channel.describe}: ${said}`, {
      cause: exit.error,
      tag: tag.name,
    });
  }
  if (completion?.kind === 'refused') {
    throw new SandboxError(
      'INPUT_CUT',
      `the script arrived cut in ${channel.describe}: ${completion.received} of ${completion.expected} bytes; nothing ran`,
      { tag: tag.name },
    );
  }
  if (completion?.kind === 'exit') {
    const result: SandboxExecResult = {
      ok: completion.status === 0 && (exit.status === 0 || endedAfterLine),
      exitCode: completion.status,
      clientStatus: endedAfterLine ? null : exit.status,
      clientSignal: endedAfterLine ? null : exit.signal,
      streamHeld: endedAfterLine,
      stdout: Buffer.concat(out),
      stderr: Buffer.concat(err),
      tag: tag.name,
      cancelled: stoppedBy === 'cancel',
      stoppedBy,
    };
    if (outputError) result.outputError = outputError;
    if (stopped && !(stopped instanceof Error)) result.report = stopped;
    return result;
  }

  // An unknown end: sweep the command's session in the target (a stop already did). A cancel
  // arriving during that sweep cuts its budget to the cancel budget.
  const why =
    stoppedBy === 'silence'
      ? `; the exec client was silent for ${silenceMs} ms`
      : stoppedBy === 'output-error'
        ? `; the output stream failed: ${(outputError as Error).message}`
        : stoppedBy === 'cancel'
          ? '; cancelled'
          : '';
  const what = `the end of ${JSON.stringify(argv.join(' ').slice(0, 80))} in ${channel.describe} is unknown (no completion line; ${said}${why})`;
  let report: SweepReport;
  try {
    const r =
      stopped ??
      (await sweep(channel, tag, { ...sweepOptions, ...(options.signal ? { signal: options.signal } : {}) }));
    if (r instanceof Error) throw r;
    report = r;
  } catch (error) {
    const e = error as SandboxError;
    throw new SandboxError('AMBIGUOUS_EFFECT', `${what}, and the sweep could not settle it: ${e.message}`, {
      cause: error,
      ...(e.report ? { report: e.report } : {}),
      unsettled: e.unsettled ?? [],
      tag: tag.name,
    });
  }
  if (!report.ok) {
    const left = report.survivors.length
      ? `still running after SIGKILL: ${nameProcesses(report.survivors)}`
      : `the sweep did not finish: ${report.warnings.map((w) => w.message).join('; ')}`;
    throw new SandboxError('AMBIGUOUS_EFFECT', `${what}; ${left}`, { report, tag: tag.name });
  }
  const stoppedWhat = report.stopped.length
    ? `the sweep stopped ${nameProcesses(report.stopped)}`
    : 'the sweep found nothing left running';
  const unreadable = report.unreadable.length
    ? `; left running, environ unreadable: ${nameProcesses(report.unreadable)}`
    : '';
  throw new ExecStatusUnknownError(`${what}; ${stoppedWhat}${unreadable}`, report, exit.status, tag.name);
}
