// What a sandbox.exec call's end means, decided in one place: the ladder below follows the
// tables of docs/sandbox.md ("The completion line", "Errors (`code`)"); the CLI's exit status
// for each outcome is in src/cli/exit-codes.ts.
import type { SessionTag } from '../proc/tag.js';
import type { Encoding } from '../session/collect.js';
import { commandFields, failureOf } from '../session/result.js';
import type { SweepReport } from '../sweep/report.js';
import type { ClientExit, ExecChannel } from './channel.js';
import type { Completion } from './completion.js';
import { ClientNotStartedError, ExecStatusUnknownError, nameProcesses, SandboxError } from './errors.js';
import type { CallOutput } from './exec-output.js';
import type { SandboxExecResult } from './exec-result.js';
import { endReasonOf, type StopReason } from './exec-stops.js';
import { describeExit, type SandboxSweepOptions, sweep } from './sweep.js';
import { END_LINE_BLIND_SPOT, RESIDENT_KEY_BLIND_SPOT } from './sweep-output.js';

/** Everything the decision reads: how the client and the line ended, and what a stop did. */
export interface CallEnd {
  channel: ExecChannel;
  argv: string[];
  /** performance.now() ms when the client was started. */
  started: number;
  encoding: Encoding;
  /** Reject a failed proven end (`reject`, default true). */
  reject: boolean;
  maxBuffer: number;
  tag: SessionTag;
  exit: ClientExit;
  completion: Completion | undefined;
  output: CallOutput;
  stoppedBy: StopReason | null;
  /** A stop's sweep: its report, or the error it ended with. */
  stopped: SweepReport | Error | undefined;
  silenceMs: number;
  /** The sweep an unknown end runs, when no stop already swept (with the caller's signal). */
  sweepOptions: SandboxSweepOptions;
}

// The ladder, first match wins: nothing ran → CHANNEL_UNREACHABLE; a cut script → INPUT_CUT;
// the line → a proven end; no line → the unknown end's sweep decides (it always throws) — a
// client that failed before the wrapper announced itself and fails the same way for the sweep
// never started the command (CHANNEL_UNREACHABLE, ClientNotStartedError, not retried).
export async function decide(end: CallEnd): Promise<SandboxExecResult<string | Buffer>> {
  const { channel, completion, exit, output, tag } = end;
  const said = describeExit(exit, Buffer.concat(output.err));
  if (exit.error && !completion && output.out.length === 0 && output.err.length === 0) {
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
  if (completion?.kind === 'exit') return provenEnd(end, completion.status);
  const failedFirst = failedBeforeStart(end);
  if (failedFirst === undefined) return unknownEnd(end, said);
  try {
    return await unknownEnd(
      { ...end, sweepOptions: { ...end.sweepOptions, clientFailedWith: failedFirst } },
      said,
    );
  } catch (error) {
    const sweepError = (error as Error).cause;
    if (!(sweepError instanceof ClientNotStartedError)) throw error;
    // The sweep's client's stderr was collected (the command's may have been streamed): named.
    const sweepSaid = (sweepError.cause as Error).message;
    throw new ClientNotStartedError(
      `the command was not run in ${channel.describe}: ${said}, before the wrapper announced itself; the sweep's client failed the same way at once (${sweepSaid}): nothing ran, not retried`,
      failedFirst,
      { cause: new Error(said), tag: tag.name },
    );
  }
}

// The status of a client that exited by itself, failing (≠ 0), before the wrapper's start
// announcement arrived and with no stop of tether's: else undefined.
function failedBeforeStart(end: CallEnd): number | undefined {
  const { exit, output } = end;
  if (output.announced || end.stoppedBy !== null || end.stopped !== undefined) return undefined;
  if (exit.error || exit.signal !== null || exit.status === null || exit.status === 0) return undefined;
  return exit.status;
}

// The line arrived: the command's status; `ok` only when the client agrees (or was ended by us).
// A failed one rejects (`reject`), with the same fields.
function provenEnd(end: CallEnd, status: number): SandboxExecResult<string | Buffer> {
  const { exit, output } = end;
  const byUs = output.endedAfterLine;
  const decode = (list: Buffer[]) =>
    end.encoding === 'buffer' ? Buffer.concat(list) : Buffer.concat(list).toString('utf8');
  const ok = status === 0 && (exit.status === 0 || byUs);
  const reason = endReasonOf(end.stoppedBy);
  const result: SandboxExecResult<string | Buffer> = {
    ...commandFields(
      { command: end.argv.join(' '), tag: end.tag.name },
      { exitCode: status, signal: null },
      { stdout: decode(output.out), stderr: decode(output.err) },
      performance.now() - end.started,
      !ok || end.stoppedBy !== null,
      reason,
    ),
    exitCode: status,
    ok,
    clientStatus: byUs ? null : exit.status,
    clientSignal: byUs ? null : exit.signal,
    streamHeld: byUs,
    cancelled: reason === 'cancel',
    stoppedBy: end.stoppedBy,
    // The helper's end line rests on no shell: only the helper, non-dumpable, held the nonce. The
    // resident helper's rests on its key's agreement.
    blindSpots: output.key
      ? [RESIDENT_KEY_BLIND_SPOT]
      : output.announcedByHelper
        ? []
        : [END_LINE_BLIND_SPOT],
  };
  if (output.overflowed) result.maxBufferExceeded = output.overflowed;
  if (output.outputError) result.outputError = output.outputError;
  if (end.stopped && !(end.stopped instanceof Error)) result.report = end.stopped;
  if (!result.failed || !end.reject) return result;
  throw failureOf(result, reason, {
    timeoutMs: end.silenceMs,
    maxBuffer: end.maxBuffer,
    overflowed: output.overflowed,
    ...(end.stoppedBy === 'silence'
      ? { what: 'the silence bound: no output for that long' }
      : status === 0
        ? {
            what: `Command exited with 0 but the exec client did not (${describeExit(exit, Buffer.alloc(0))})`,
          }
        : {}),
  });
}

// No line: the session is swept in the target (a stop already did), and the call fails with
// what that sweep could prove — EXEC_STATUS_UNKNOWN when settled, AMBIGUOUS_EFFECT otherwise.
async function unknownEnd(end: CallEnd, said: string): Promise<never> {
  const command = JSON.stringify(end.argv.join(' ').slice(0, 80));
  const what = `the end of ${command} in ${end.channel.describe} is unknown (no completion line; ${said}${stopNote(end)})`;
  const report = await settle(end, what);
  if (!report.ok) {
    const left = report.survivors.length
      ? `still running after SIGKILL: ${nameProcesses(report.survivors)}`
      : `the sweep did not finish: ${report.warnings.map((w) => w.message).join('; ')}`;
    throw new SandboxError('AMBIGUOUS_EFFECT', `${what}; ${left}`, { report, tag: end.tag.name });
  }
  // What the sweep could not see is said with what it found: never "nothing left running"
  // from a sweep blind to a kind of process (env-cleared ones, for the env tag alone).
  const blind = report.blindSpots?.length ? `; not seen: ${report.blindSpots.join('; ')}` : '';
  const stoppedWhat = `${
    report.stopped.length
      ? `the sweep stopped ${nameProcesses(report.stopped)}`
      : blind
        ? 'the sweep found no process carrying the session tag'
        : 'the sweep found nothing left running'
  }${blind}`;
  const unreadable = report.unreadable.length
    ? `; left running, environ unreadable: ${nameProcesses(report.unreadable)}`
    : '';
  throw new ExecStatusUnknownError(
    `${what}; ${stoppedWhat}${unreadable}`,
    report,
    end.exit.status,
    end.tag.name,
  );
}

// The unknown end's sweep (or the stop's); one that failed is an AMBIGUOUS_EFFECT. A cancel
// arriving during that sweep cuts its budget to the cancel budget (the sweep's own listener).
async function settle(end: CallEnd, what: string): Promise<SweepReport> {
  try {
    const r = end.stopped ?? (await sweep(end.channel, end.tag, end.sweepOptions));
    if (r instanceof Error) throw r;
    return r;
  } catch (error) {
    const e = error as SandboxError;
    throw new SandboxError('AMBIGUOUS_EFFECT', `${what}, and the sweep could not settle it: ${e.message}`, {
      cause: error,
      ...(e.report ? { report: e.report } : {}),
      unsettled: e.unsettled ?? [],
      tag: end.tag.name,
    });
  }
}

// "; cancelled" and the like: which stop, if any, came before the unknown end.
function stopNote(end: CallEnd): string {
  switch (end.stoppedBy) {
    case 'silence':
      return `; the exec client was silent for ${end.silenceMs} ms`;
    case 'output-error':
      return `; the output stream failed: ${(end.output.outputError as Error).message}`;
    case 'cancel':
      return '; cancelled';
    default:
      return '';
  }
}
