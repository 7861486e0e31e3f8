// tether sandbox exec|run|sweep --via 'PREFIX' …: a command, an agent session or a sweep inside a
// container, through an exec channel given as a command prefix (docs/sandbox.md).

import { fstatSync, readFileSync } from 'node:fs';
import type { Readable } from 'node:stream';
import type { Command } from 'commander';
import { TetherError } from '../errors.js';
import { Ledger } from '../ledger/ledger.js';
import { parseDuration } from '../options.js';
import { createTag, parseTag } from '../proc/tag.js';
import {
  commandChannel,
  ExecStatusUnknownError,
  exec,
  run,
  SandboxError,
  type SandboxExecResult,
  type SandboxRunResult,
  sweep,
} from '../sandbox/index.js';
import { shareRecorded, stopRecorded } from '../sandbox/resident-server.js';
import { splitWords } from '../sandbox/words.js';
import type { SweepReport } from '../sweep/report.js';
import {
  EXIT_AMBIGUOUS_EFFECT,
  EXIT_CLIENT_FAILED,
  EXIT_CLIENT_NOT_STARTED,
  EXIT_INPUT_CUT,
  EXIT_OUTPUT_CLOSED,
  EXIT_STATUS_UNKNOWN,
  EXIT_SWEEP_FAILED,
  EXIT_TIMED_OUT,
  EXIT_USAGE,
} from './exit-codes.js';
import { type OutputFile, openOutputFile } from './output-file.js';
import { type PhaseFlags, phaseBudgets, phaseOptions } from './phases.js';
import { notSeenLines, renderReport, seconds } from './render.js';
import {
  CommandStderr,
  cancelNote,
  missingShellLine,
  noNonceLines,
  runCancelNote,
  sweepGotNoNonce,
} from './sandbox-ends.js';
import { scriptCommand } from './script.js';

export { splitWords } from '../sandbox/words.js';

// The options both sandbox subcommands take.
// `--via` is required, checked before the action rather than by commander's own check: that one
// runs before its unknown-option check, so a misspelt option ahead of `--via` (`--timout 5s
// --via …`, which ends option parsing there) was reported as `--via` missing (found by a new
// user's trial).
function channelOptions(command: Command): Command {
  return phaseOptions(
    command
      .option('--via <prefix>', "the exec channel as a command prefix: 'docker exec -i ID' (required)")
      .option('--shell <argv>', "the container's POSIX shell", 'sh')
      .hook('preAction', (self) => {
        if (self.opts().via === undefined)
          self.error("error: required option '--via <prefix>' not specified");
      }),
  ).option('--budget <duration>', 'the whole sweep, retries of an unreachable channel included', '3m');
}

/** Adds `tether sandbox exec|run|sweep` and `tether script NAME` to the CLI. */
export function addSandboxCommands(program: Command): void {
  const sandbox = program
    .command('sandbox')
    .description('run or sweep inside a container through an exec channel (docs/sandbox.md)');
  channelOptions(
    sandbox
      .command('exec')
      .description(
        'run CMD in the container under the completion wrapper; exits with its status on a proven end, ' +
          '125 on an unknown end (its session swept), 121 on an ambiguous effect (docs/cli.md)',
      ),
  )
    .option(
      '--tag <name>',
      'the session tag to export (TETHER_SESSION_<32 hex digits>); default: a fresh one',
    )
    .option(
      '--silence <duration>',
      'stop the call when the exec client has said nothing for this long; exit 124 (0: never)',
      '30m',
    )
    .option(
      '--json',
      'print the end (the error, its code and report, or the status) as one JSON line on stderr',
    )
    .option(
      '--sweep',
      "sweep the command's session in the container at every end, a proven one too (as sandbox run, with these statuses); 121 when it cannot be swept",
    )
    .option(
      '--resident',
      'run through the resident helper in the container, kept across tether processes on this machine (docs/sandbox.md, "One server across processes"): a call is one exec',
    )
    .argument('<command...>', 'the command and its arguments (after --)')
    .passThroughOptions()
    .action(sandboxExecCommand);
  channelOptions(
    sandbox
      .command('run')
      .description(
        'run CMD in the container as an agent session: at every end the session is swept there, ' +
          'before the exec client is ended; exits as tether run does (docs/sandbox.md#agent-sessions)',
      ),
  )
    .option('--timeout <duration>', 'end the session this long after it started (0: never); exit 124')
    .option(
      '--tag <name>',
      'the session tag to export (TETHER_SESSION_<32 hex digits>); default: a fresh one',
    )
    .option(
      '--silence <duration>',
      'stop the command when the exec client has said nothing for this long; exit 124 (0: never — an agent may say nothing until its end; --timeout bounds the session)',
      '0',
    )
    .option(
      '--json',
      'print the end (the status fields and the report, or the error) as one JSON line on stderr',
    )
    .option('--report-file <file>', "write the session's sweep report as JSON to this file")
    .option(
      '--ledger <path|url>',
      'record the session in this ledger (a SQLite file or a postgres:// URL) before the command starts; tether recover ends it if tether is killed',
    )
    .option(
      '--resident',
      'run through the resident helper in the container, kept across tether processes on this machine (docs/sandbox.md, "One server across processes"): a call is one exec',
    )
    .argument('<command...>', 'the command and its arguments (after --)')
    .passThroughOptions()
    .action(sandboxRunCommand);
  channelOptions(
    sandbox.command('sweep').description('stop every process carrying one session tag inside the container'),
  )
    .requiredOption('--tag <name>', 'TETHER_SESSION_<32 hex digits>')
    .option('--json', 'print the report as JSON on stdout')
    .action(sandboxSweepCommand);
  sandbox
    .command('stop-resident')
    .description(
      "end the resident helper's server that tether processes of this machine share through --via (--resident): exit 0 when it said it stops, 1 when none was recorded or it did not answer, 122 when the channel did not reach the container (the record kept), 125 on invalid usage",
    )
    .option('--via <prefix>', "the exec channel as a command prefix: 'docker exec -i ID' (required)")
    .option('--shell <argv>', "the container's POSIX shell", 'sh')
    .option(
      '--json',
      'print the outcome as one JSON object on stdout: { stopped, outcome, channel, shell, message }',
    )
    .hook('preAction', (self) => {
      if (self.opts().via === undefined) self.error("error: required option '--via <prefix>' not specified");
    })
    .action(sandboxStopResidentCommand);
  program
    .command('script')
    .description('print a sandbox program (sweep, wrap or write) for callers in other languages')
    .argument('<name>', 'sweep | wrap | write')
    .action(scriptCommand);
}

/**
 * Where a `tether sandbox exec|run|sweep|stop-resident --json` writes its errors as one JSON object
 * (`errorJson`), a usage error's too (an unknown option, a bad value): stderr, stdout for
 * `sweep` and `stop-resident` (the stream of their own JSON). Undefined for any other command line, or one without `--json`
 * before its first `--` (after it, the words are the command's).
 */
export function jsonErrorsTo(args: readonly string[]): NodeJS.WritableStream | undefined {
  const [group, name] = args;
  if (group !== 'sandbox' || !['exec', 'run', 'sweep', 'stop-resident'].includes(name ?? '')) return;
  const own = args.indexOf('--') < 0 ? args : args.slice(0, args.indexOf('--'));
  if (!own.includes('--json')) return;
  return name === 'sweep' || name === 'stop-resident' ? process.stdout : process.stderr;
}

/** Options shared by both subcommands (durations as typed). */
export interface SandboxFlags extends PhaseFlags {
  via: string;
  shell: string;
  budget: string;
  json?: boolean;
}

function sweepOptions(flags: SandboxFlags) {
  return {
    ...phaseBudgets(flags),
    budgetMs: parseDuration('--budget', flags.budget),
    shell: splitWords('--shell', flags.shell),
  };
}

/**
 * An error as JSON for --json: `{ code, message, tag?, cause?, report? }` — its code, message,
 * tag, its cause's code and the sweep's report when there are.
 */
export function errorJson(error: TetherError, tag?: string): string {
  const report = (error as { report?: unknown }).report;
  const cause = (error.cause as { code?: string } | undefined)?.code;
  return `${JSON.stringify({ code: error.code, message: error.message, ...(tag ? { tag } : {}), ...(cause ? { cause } : {}), ...(report ? { report } : {}) })}\n`;
}

/**
 * The top level of a `--json` end: everything the caller must know — the end's own blind spots
 * and notes, then the report's (`report.blindSpots`, `report.notes`: the sweep's, and how the
 * commands ran, a fall back to the env tag alone included), each once, in that order
 * (docs/sandbox.md, "Command line"). `{ blindSpots, notes }`.
 */
function mustKnow(
  blindSpots: readonly string[],
  notes: readonly string[],
  report: SweepReport | undefined,
): { blindSpots: string[]; notes: string[] } {
  return {
    blindSpots: [...new Set([...blindSpots, ...(report?.blindSpots ?? [])])],
    notes: [...new Set([...notes, ...(report?.notes ?? [])])],
  };
}

// The status of a sandbox error (docs/cli.md#sandbox-exec-exit-status).
function errorStatus(error: SandboxError | ExecStatusUnknownError): number {
  switch (error.code) {
    case 'EXEC_STATUS_UNKNOWN':
      return EXIT_STATUS_UNKNOWN;
    case 'AMBIGUOUS_EFFECT':
      return EXIT_AMBIGUOUS_EFFECT;
    case 'INPUT_CUT':
      return EXIT_INPUT_CUT;
    case 'CHANNEL_UNREACHABLE':
      return error.cause instanceof Error ? EXIT_CLIENT_NOT_STARTED : EXIT_SWEEP_FAILED;
    default:
      return EXIT_SWEEP_FAILED;
  }
}

// What a stop by the --silence bound says: how long the bound was, and the flag as typed (`the
// exec client was silent for the --silence bound: the command was stopped (no output for 2 s:
// --silence 2s)`).
function silenceNote(silenceMs: number, typed: string, what: string): string {
  return `the exec client was silent for the --silence bound: ${what} was stopped (no output for ${seconds(silenceMs)}: --silence ${typed})`;
}

// "status 3" / "signal SIGKILL" for messages.
function clientEnd(r: SandboxExecResult): string {
  return r.clientSignal ? `was ended by ${r.clientSignal}` : `exited with status ${r.clientStatus}`;
}

const CANCEL_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

// What a call into the container listens to while it runs: SIGINT, SIGTERM and SIGHUP cancel it
// (`signal`; `cancelledBy` names the first); our stdout's reader going away (`… | head -1`,
// EPIPE) stops it in the library, and `outputClosed` says so. `detach` removes both listeners.
function watchCall(): {
  signal: AbortSignal;
  cancelledBy: () => string | undefined;
  outputClosed: () => boolean;
  detach: () => void;
} {
  const abort = new AbortController();
  let by: string | undefined;
  const onSignal = (name: NodeJS.Signals) => {
    by ??= name;
    abort.abort();
  };
  for (const s of CANCEL_SIGNALS) process.on(s, onSignal);
  let closed = false;
  const onStdoutError = (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') closed = true;
  };
  process.stdout.on('error', onStdoutError);
  return {
    signal: abort.signal,
    cancelledBy: () => by,
    outputClosed: () => closed,
    detach() {
      for (const s of CANCEL_SIGNALS) process.off(s, onSignal);
      process.stdout.off('error', onStdoutError);
    },
  };
}

/**
 * `tether sandbox exec`: passes the command's stdout and stderr through byte-exact (minus the
 * completion line) and exits with its status on a proven end; 120 when it said 0 and the client
 * failed, 122 when the client could not start, 123 on a cut script, 125 on an unknown end
 * settled by the sweep, 121 on an ambiguous effect, 141 when our stdout's reader went away.
 * Every end prints the session tag on stderr (`tether: session --tag NAME`; with --json, one
 * JSON line holding `tag`). SIGINT, SIGTERM and SIGHUP cancel: a sweep, then the client's end.
 */
export async function sandboxExecCommand(
  argv: string[],
  flags: SandboxFlags & { tag?: string; silence: string; sweep?: boolean; resident?: boolean },
): Promise<void> {
  const channel = commandChannel(splitWords('--via', flags.via));
  if (flags.resident) shareRecorded(channel);
  const sweepOpts = sweepOptions(flags);
  const silenceMs = parseDuration('--silence', flags.silence);
  const tag = flags.tag === undefined ? createTag() : parseTag(flags.tag);
  const call = watchCall();
  const stdin = commandInput(flags.resident === true);
  const commandStderr = new CommandStderr();
  const notes: string[] = [];
  let json: Record<string, unknown> = {};
  // A proven end that was cancelled, said once the status is final; the session's report to print.
  let cancelled: SandboxExecResult | undefined;
  let report: SweepReport | undefined;
  // The end, for --json's top level.
  let ended: SandboxExecResult | undefined;
  try {
    const options = {
      tag,
      shell: sweepOpts.shell,
      ...(stdin ? { input: stdin } : {}),
      stdout: process.stdout,
      stderr: commandStderr,
      signal: call.signal,
      silenceMs,
      // The exit status is the command's: a failed end is rendered, not thrown.
      reject: false,
      sweep: { graceMs: sweepOpts.graceMs, killAfterMs: sweepOpts.killAfterMs, budgetMs: sweepOpts.budgetMs },
      ...(flags.resident ? { resident: true } : {}),
    };
    // --sweep: an agent session of one command (sandbox.run), swept at every end; its unproven
    // end is thrown as exec's is, to the same statuses.
    const r = flags.sweep ? await sweptExec(channel, argv, options) : await exec(channel, argv, options);
    commandStderr.endLine();
    // The session's sweep, --sweep's or a cancel's: said as sandbox run says it.
    if (flags.sweep || r.isCanceled) report = r.report;
    if (r.isCanceled) cancelled = r;
    // A signal after the command's end (while a leftover held its output, the 2 s after its
    // line) reached no call: the session is swept now, as every cancel sweeps it, and the status
    // stays the command's (a fresh user's trial: ignored, its `sleep 30 &` left running).
    const late = call.cancelledBy();
    if (late && !r.isCanceled && !flags.sweep) {
      report = await sweep(channel, tag, {
        shell: sweepOpts.shell,
        graceMs: sweepOpts.graceMs,
        killAfterMs: sweepOpts.killAfterMs,
        budgetMs: sweepOpts.budgetMs,
      });
      notes.push(`${late} came after the command's end: the session was swept in the container`);
    }
    if (r.streamHeld) {
      notes.push(
        "a process the command left still held its output 2 s after its end: the exec client was ended (the status is the command's)",
      );
    }
    if (r.stoppedBy === 'silence') {
      // As `sandbox run` and timeout(1): 124 for a time bound — the sweep's TERM ended the command
      // and its line arrived (143 before, where `sandbox run` said 124) — 137 when it had to be KILLed.
      process.exitCode = r.exitCode === 137 ? 137 : EXIT_TIMED_OUT;
      notes.push(silenceNote(silenceMs, flags.silence, 'the call'));
    } else if (r.exitCode === 0 && !r.ok) {
      notes.push(`the command exited with 0 but the exec client ${clientEnd(r)}`);
      process.exitCode = EXIT_CLIENT_FAILED;
    } else {
      process.exitCode = r.exitCode;
    }
    json = {
      tag: r.tag,
      failed: r.failed,
      // Deprecated (read `failed`): written until the next minor release.
      ok: r.ok,
      exitCode: r.exitCode,
      isCanceled: r.isCanceled,
      clientStatus: r.clientStatus,
      clientSignal: r.clientSignal,
      streamHeld: r.streamHeld,
      stoppedBy: r.stoppedBy,
      blindSpots: r.blindSpots,
      ...(r.report ? { report: r.report } : {}),
    };
    ended = r;
  } catch (error) {
    commandStderr.endLine();
    if (!(error instanceof ExecStatusUnknownError) && !(error instanceof SandboxError)) throw error;
    if (flags.json) process.stderr.write(errorJson(error, tag.name));
    else printFailure(error, flags, channel.describe);
    // A session --sweep could not sweep (its cause, the sweep's error): what it started may run.
    process.exitCode =
      error.cause instanceof TetherError && flags.sweep ? EXIT_AMBIGUOUS_EFFECT : errorStatus(error);
  } finally {
    call.detach();
    if (stdin && !Buffer.isBuffer(stdin)) {
      stdin.unpipe();
      stdin.destroy();
    }
  }
  if (call.outputClosed() && process.exitCode !== EXIT_AMBIGUOUS_EFFECT) {
    notes.push('stdout was closed by its reader (EPIPE): the command was stopped and its session swept');
    process.exitCode = EXIT_OUTPUT_CLOSED;
  }
  if (cancelled) notes.unshift(cancelNote(call.cancelledBy(), cancelled, Number(process.exitCode)));
  if (flags.json) {
    if (ended)
      process.stderr.write(
        `${JSON.stringify({ ...json, ...mustKnow(ended.blindSpots, notes, ended.report) })}\n`,
      );
  } else {
    for (const note of notes) process.stderr.write(`tether: ${note}\n`);
    if (report) printSweptReport(report);
    // The tag, on every end: what the command left (a proven end sweeps nothing) or started late
    // is swept with it (docs/sandbox.md#docker).
    process.stderr.write(`tether: session --tag ${tag.name}\n`);
  }
}

/**
 * `tether sandbox run`: the command as an agent session in the container (`sandbox.run`),
 * stdin (when not a terminal), stdout and stderr passed through. Exits as `tether run` does: the
 * command's status on a proven end (128+N for a signal N, as the wrapper's shell saw it), 124
 * when `--timeout` ended it (its own status when it had to be KILLed: 137), 125 when its end is
 * unknown (the session swept); and as `sandbox exec` for what only a channel does: 120 (it said
 * 0, the client did not), 122 (the client could not start), 123 (a cut script), 141 (our stdout's
 * reader went away), 121 when the session could not be swept (an ambiguous effect: what it
 * started may still run). SIGINT, SIGTERM and SIGHUP end the session: the sweep in the
 * container, then the client's end. Every end prints the tag (`tether: session --tag NAME`).
 */
export async function sandboxRunCommand(
  argv: string[],
  flags: SandboxFlags & {
    tag?: string;
    silence: string;
    timeout?: string;
    reportFile?: string;
    ledger?: string;
    resident?: boolean;
  },
): Promise<void> {
  const channel = commandChannel(splitWords('--via', flags.via));
  if (flags.resident) shareRecorded(channel);
  const sweepOpts = sweepOptions(flags);
  const silenceMs = parseDuration('--silence', flags.silence);
  const timeout =
    flags.timeout === undefined ? 0 : parseDuration('--timeout', flags.timeout, { infinite: true });
  const tag = flags.tag === undefined ? createTag() : parseTag(flags.tag);
  // Opened before the command runs: one that cannot be is refused now (125), not after it.
  const reportFile = flags.reportFile
    ? openOutputFile('--report-file', flags.reportFile, 'replace')
    : undefined;
  let ledger: Ledger | undefined;
  if (flags.ledger !== undefined)
    try {
      ledger = await Ledger.open(flags.ledger);
    } catch (error) {
      reportFile?.close();
      const code = error instanceof TetherError ? error.code : 'LEDGER_UNAVAILABLE';
      const message = `cannot record the session in the ledger ${flags.ledger}: ${(error as Error).message}`;
      const cause = (error as { cause?: unknown }).cause;
      refuseRecord(new TetherError(code, message, { cause }), flags.json === true, tag.name);
      return;
    }
  const call = watchCall();
  const stdin = commandInput(flags.resident === true);
  const commandStderr = new CommandStderr();
  try {
    const r = await run(channel, argv, {
      tag,
      shell: sweepOpts.shell,
      ...(stdin ? { input: stdin } : {}),
      stdout: process.stdout,
      stderr: commandStderr,
      signal: call.signal,
      silenceMs,
      ...(Number.isFinite(timeout) && timeout > 0 ? { timeout } : {}),
      reject: false,
      sweep: { graceMs: sweepOpts.graceMs, killAfterMs: sweepOpts.killAfterMs, budgetMs: sweepOpts.budgetMs },
      ...(ledger ? { ledger } : {}),
      // An agent session: its command under the pushed helper, where it can be had.
      helper: true,
      ...(flags.resident ? { resident: true } : {}),
    });
    commandStderr.endLine();
    writeReportFile(reportFile, r.report);
    const notes: string[] = [];
    process.exitCode = runStatus(r, notes, silenceNote(silenceMs, flags.silence, 'the command'));
    if (call.outputClosed() && !r.error) {
      notes.push('stdout was closed by its reader (EPIPE): the command was stopped and its session swept');
      process.exitCode = EXIT_OUTPUT_CLOSED;
    }
    // A signal to tether: said as `sandbox exec` says it (it printed no word of the cancel: a
    // fresh user's trial).
    const by = call.cancelledBy();
    if (r.isCanceled && by) notes.unshift(runCancelNote(by, r, Number(process.exitCode)));
    printRunResult(r, notes, flags.json === true, ledger);
  } catch (error) {
    commandStderr.endLine();
    // The ledger's own errors (a tag already recorded is INVALID_TAG: ours was parsed above).
    const code = (error as TetherError).code;
    if (ledger && (code?.startsWith('LEDGER_') || code === 'INVALID_TAG')) {
      // Its begin was refused: nothing ran, nothing was swept (the message names the ledger).
      refuseRecord(error as TetherError, flags.json === true, tag.name);
      return;
    }
    if (!(error instanceof SandboxError)) throw error;
    if (error.report) writeReportFile(reportFile, error.report);
    process.exitCode = printRunFailure(error, flags, channel.describe, tag.name);
  } finally {
    call.detach();
    if (stdin && !Buffer.isBuffer(stdin)) {
      stdin.unpipe();
      stdin.destroy();
    }
    reportFile?.close();
    await ledger?.close().catch(() => {});
  }
}

// `sandbox run`'s result on stderr: one JSON line with --json (`failed` and `isCanceled`, and the
// deprecated `ok` for one more release), else its error, notes, the report when it has something
// to say, where it is recorded, and the tag.
function printRunResult(
  r: SandboxRunResult,
  notes: string[],
  json: boolean,
  ledger: Ledger | undefined,
): void {
  if (json) {
    const error = r.error ? { code: r.error.code, message: r.error.message } : undefined;
    process.stderr.write(
      `${JSON.stringify({ tag: r.tag, failed: r.failed, ok: r.ok, exitCode: r.exitCode, status: process.exitCode, timedOut: r.timedOut, isCanceled: r.isCanceled, clientStatus: r.clientStatus, clientSignal: r.clientSignal, streamHeld: r.streamHeld, stoppedBy: r.stoppedBy, ...mustKnow(r.blindSpots, notes, r.report), ...(error ? { error } : {}), report: r.report })}\n`,
    );
    return;
  }
  if (r.error) process.stderr.write(`tether: ${r.error.message}\n`);
  for (const note of notes) process.stderr.write(`tether: ${note}\n`);
  printSweptReport(r.report);
  // "recorded" only when every write landed (a failed one is a LEDGER_WRITE_FAILED warning above).
  if (ledger && !r.report.warnings.some((w) => w.code === 'LEDGER_WRITE_FAILED'))
    process.stderr.write(`tether: recorded in ${ledger.location}: tether show ${r.tag}\n`);
  process.stderr.write(`tether: session --tag ${r.tag}\n`);
}

// The notes of a session that could not run (all) its commands under the helper — each says why
// (no helper in the target, and why; a command whose wrapper fell back, and what it said) —
// empty when every command ran under it.
function envTagAlone(report: SweepReport): string[] {
  return report.notes.filter(
    (n) =>
      / the session runs on the env tag alone$/.test(n) ||
      / fell back to the shell, on the env tag alone /.test(n),
  );
}

// A session's report on stderr, as `sandbox run` and `sandbox exec --sweep` print it: a fall back
// to the env tag alone first, as a `tether: warning:` line naming why (the result is still a
// success: what it left with a cleared environment is not found), then the report when it has
// something to say — or, with nothing to list after such a fall back, what the env tag cannot see:
// a quiet exit must not read as "nothing left running".
function printSweptReport(report: SweepReport): void {
  const why = envTagAlone(report);
  for (const line of why) process.stderr.write(`tether: warning: ${line}\n`);
  const rest = { ...report, notes: report.notes.filter((n) => !why.includes(n)) };
  if (report.stopped.length || report.survivors.length || report.warnings.length || !report.complete)
    process.stderr.write(`${renderReport(rest).join('\n')}\n`);
  else if (why.length)
    for (const line of notSeenLines(report.blindSpots ?? [])) process.stderr.write(`tether: ${line}\n`);
}

// `sandbox run`'s SandboxError on stderr, and its status: the --via client could not start
// (nothing ran: 122), or the session's sweep could not run or was cut (what it started may still
// run: 121); a bad option 2.
function printRunFailure(error: SandboxError, flags: SandboxFlags, channel: string, tag: string): number {
  if (flags.json) process.stderr.write(errorJson(error, tag));
  else {
    printFailure(error, flags, channel);
    process.stderr.write(`tether: session --tag ${tag}\n`);
  }
  if (error.code === 'INVALID_OPTION') return EXIT_USAGE;
  return error.code === 'CHANNEL_UNREACHABLE' && !(error.cause instanceof TetherError)
    ? EXIT_CLIENT_NOT_STARTED
    : EXIT_AMBIGUOUS_EFFECT;
}

// A sandbox error on stderr, with its report: what a client without stdin or a --shell the target
// lacks means, said in place of the library's message (which says the command may still run, or
// blames the --via client).
function printFailure(error: TetherError, flags: SandboxFlags, channel: string): void {
  const shell = missingShellLine(error, splitWords('--shell', flags.shell), flags.shell, channel);
  const lines = shell ? [shell] : sweepGotNoNonce(error) ? noNonceLines(channel) : [error.message];
  for (const line of lines) process.stderr.write(`tether: ${line}\n`);
  if (error.report) process.stderr.write(`${renderReport(error.report).join('\n')}\n`);
}

// `sandbox exec --sweep`: sandbox.run's result, its unproven end thrown as exec throws it.
/** The largest stdin read whole for `--resident` (a regular file), bytes; a larger one is streamed. */
export const RESIDENT_INPUT_MAX = 16 * 1024 * 1024;

// The command's stdin: none from a terminal; else this process's stdin as a stream — but with
// `--resident`, where it can be sent as bytes (cheaper than a stream, whose every byte is hashed
// and whose first 16 MiB are kept), /dev/null as none and a regular file up to RESIDENT_INPUT_MAX
// read whole (from where its offset is).
function commandInput(resident: boolean): Buffer | Readable | undefined {
  if (process.stdin.isTTY) return undefined;
  if (resident)
    try {
      const stat = fstatSync(0);
      if (stat.isCharacterDevice() && stat.rdev === DEV_NULL) return Buffer.alloc(0);
      if (stat.isFile() && stat.size <= RESIDENT_INPUT_MAX) return readFileSync(0);
    } catch {
      // not to be read here: a stream, as without --resident
    }
  return process.stdin;
}

// /dev/null's device number (major 1, minor 3), as fstat(2) gives it.
const DEV_NULL = (1 << 8) | 3;

async function sweptExec(
  channel: ReturnType<typeof commandChannel>,
  argv: string[],
  options: Parameters<typeof run>[2],
): Promise<SandboxExecResult> {
  const r = await run(channel, argv, options);
  if (r.error) throw r.error;
  return r as SandboxExecResult;
}

// What a ledger that cannot be opened or written means for the command, and what to do.
const NOT_STARTED =
  'the command was not started. Fix the ledger, choose another with --ledger PATH|URL, or leave --ledger out';

// A ledger that cannot be opened or refused the begin (`error` names it): the command was not
// started (125). With --json one object, as every error there (errorJson: its code, the message
// and what to do, the tag).
function refuseRecord(error: TetherError, json: boolean, tag: string): void {
  if (json)
    process.stderr.write(
      errorJson(new TetherError(error.code, `${error.message}; ${NOT_STARTED}`, { cause: error.cause }), tag),
    );
  else process.stderr.write(`tether: ${error.message}\ntether: ${NOT_STARTED}\n`);
  process.exitCode = EXIT_USAGE;
}

// `tether run`'s statuses for a sandbox session's end (see sandboxRunCommand); `silence`, the
// note of a stop by --silence (silenceNote).
function runStatus(r: SandboxRunResult, notes: string[], silence: string): number {
  // Stopped by --timeout, --silence or a signal to tether, its line lost, the session settled
  // (sandbox.run): as timeout(1), 124 for a time bound (--silence is one) — 137 when the sweep had
  // to KILL what it stopped; a signal's 143 (137).
  const code = (r.error as { code?: string } | undefined)?.code;
  const silenced = r.stoppedBy === 'silence';
  if (silenced) notes.push(silence);
  if (code === 'TIMED_OUT' || code === 'CANCELLED') {
    const killed = r.report.stopped.some((p) => p.endedBy === 'SIGKILL');
    return killed ? 128 + 9 : code === 'TIMED_OUT' || silenced ? EXIT_TIMED_OUT : 128 + 15;
  }
  if (r.error) return errorStatus(r.error as SandboxError);
  if (r.streamHeld)
    notes.push(
      "a process the command left still held its output 2 s after its end: the exec client was ended (the status is the command's)",
    );
  // As timeout(1): 124 when a time bound ended it (--timeout, --silence), unless it had to be
  // KILLed (128 + 9).
  if ((r.timedOut || silenced) && r.exitCode !== 137) return EXIT_TIMED_OUT;
  if (r.exitCode === 0 && !r.ok) {
    notes.push(`the command exited with 0 but the exec client ${clientEnd(r as SandboxExecResult)}`);
    return EXIT_CLIENT_FAILED;
  }
  return r.exitCode ?? EXIT_STATUS_UNKNOWN;
}

// The report file must not cost the command's status or the printed report.
function writeReportFile(file: OutputFile | undefined, report: unknown): void {
  const failed = file?.write(`${JSON.stringify(report, null, 2)}\n`);
  if (failed)
    process.stderr.write(`tether: could not write the report to ${file?.path}: ${failed.message}\n`);
}

/**
 * `tether sandbox stop-resident`: ends the server recorded for --via and --shell (stopRecorded);
 * exit 0 when it said it stops, 1 when none was recorded or it did not answer (its record then
 * removed), 122 when the channel did not reach the container (its record kept: the server may
 * run on), a line on stderr saying which — with --json, `{ stopped, outcome, channel, shell,
 * message }` on stdout instead.
 */
export async function sandboxStopResidentCommand(flags: {
  via: string;
  shell: string;
  json?: boolean;
}): Promise<void> {
  const channel = commandChannel(splitWords('--via', flags.via));
  const shell = splitWords('--shell', flags.shell);
  const outcome = await stopRecorded(channel, shell);
  const where = `${channel.describe} (--shell ${shell.join(' ')})`;
  const message = {
    stopped: `the resident helper's server in ${where} stopped`,
    none: `no resident helper's server is recorded for ${where}: nothing to stop`,
    silent: `the resident helper's server recorded for ${where} did not answer (gone, or crowded out): its record removed, nothing stopped`,
    unreached: `the channel ${channel.describe} did not reach the container: the server recorded for it may still run, its record is kept — try again once the channel works`,
  }[outcome];
  if (flags.json)
    process.stdout.write(
      `${JSON.stringify({ stopped: outcome === 'stopped', outcome, channel: channel.describe, shell, message })}\n`,
    );
  else process.stderr.write(`tether: ${message}\n`);
  process.exitCode = outcome === 'stopped' ? 0 : outcome === 'unreached' ? EXIT_CLIENT_NOT_STARTED : 1;
}

/**
 * `tether sandbox sweep`: the sweep program through the channel; exit 1 when not ok or not run,
 * 122 when the exec client could not be started.
 */
export async function sandboxSweepCommand(flags: SandboxFlags & { tag: string }): Promise<void> {
  const tag = parseTag(flags.tag);
  const channel = commandChannel(splitWords('--via', flags.via));
  try {
    const report = await sweep(channel, tag, sweepOptions(flags));
    if (flags.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else process.stderr.write(`${renderReport(report).join('\n')}\n`);
    if (!report.ok) process.exitCode = EXIT_SWEEP_FAILED;
  } catch (error) {
    if (!(error instanceof SandboxError)) throw error;
    if (flags.json) process.stdout.write(errorJson(error));
    else process.stderr.write(`tether: ${error.message}\n`);
    process.exitCode = errorStatus(error);
  }
}
