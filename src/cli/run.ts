// tether run [--timeout D] [-s SIG] [-k D] [--kill-budget D] [--preserve-status] [--containment auto]
//   [--keep GLOB=TTL]… [--json] [--report-file FILE] [--events FILE] [--ledger PATH|URL | --no-ledger]
//   -- CMD [ARGS…]
// timeout(1)'s conventions (docs/cli.md#tether-run): 124 when the timeout fired, 125 for tether's
// own failure, 126/127 when CMD cannot start, 128+N when signal N ended it.
import { statSync } from 'node:fs';
import { constants } from 'node:os';
import { resolve } from 'node:path';
import { type Containment, parseContainment } from '../containment/select.js';
import { TetherError } from '../errors.js';
import { parseDuration } from '../options.js';
import { type ExitResult, Session } from '../session/session.js';
import { commandGroupOf } from '../sweep/command-group.js';
import { compileKeep, type KeepRule } from '../sweep/keep.js';
import type { SweepReport } from '../sweep/report.js';
import { EVENTS_VERSION, type EventLog, type ExitedEvent, openEventLog } from './events.js';
import {
  EXIT_CANNOT_EXECUTE,
  EXIT_LEDGER_FAILED,
  EXIT_NOT_FOUND,
  EXIT_SIGNAL_OFFSET,
  EXIT_STATUS_UNKNOWN,
  EXIT_TETHER_FAILED,
  EXIT_TIMED_OUT,
} from './exit-codes.js';
import { parseKeepFlags } from './keep.js';
import { type OutputFile, openOutputFile } from './output-file.js';
import { type PhaseFlags, phaseBudgets } from './phases.js';
import { progressLine } from './progress.js';
import { renderReport } from './render.js';
import { beginRecording, isLedgerError, openRunLedger, type RunLedger, refuseLedger } from './run-ledger.js';
import { RunStops } from './run-stops.js';
import { ENDING_SIGNALS, type ParsedSignal, parseSignal, passedSignals } from './signals.js';

/** Parsed options of `tether run`, as commander gives them (durations and signal as typed). */
export interface RunFlags extends PhaseFlags {
  timeout?: string;
  signal: string;
  preserveStatus?: boolean;
  containment: string;
  json?: boolean;
  quiet?: boolean;
  reportFile?: string;
  events?: string;
  /** `--keep GLOB=TTL`, repeatable (src/cli/keep.ts). */
  keep?: string[];
  keepOwner?: string;
  /** `--ledger PATH|URL`, or false for `--no-ledger`; undefined: TETHER_LEDGER or the default. */
  ledger?: string | false;
}

/** A `tether run` with every flag checked and in its units: what `runCommand` runs. */
export interface RunPlan {
  command: string;
  args: string[];
  /** The TERM phase (`-k/--kill-after`, `--grace`), ms. */
  graceMs: number;
  /** The KILL phase budget (`--kill-budget`), ms. */
  killAfterMs: number;
  containment: Containment;
  /** `--keep GLOB=TTL` with `--keep-owner` (src/cli/keep.ts). */
  keep: KeepRule[];
  /** `--timeout`, ms; 0 for none. */
  timeoutMs: number;
  /** What the payload gets when the timeout fires (`--signal`, default SIGTERM). */
  signal: ParsedSignal;
  preserveStatus: boolean;
  json: boolean;
  /** `--quiet`: no waiting lines, and the report only when it has an error or warning to say. */
  quiet: boolean;
  reportFile?: string;
  events?: string;
  /** `--ledger PATH|URL`, false for `--no-ledger`, undefined for TETHER_LEDGER or the default. */
  ledger: string | false | undefined;
}

/**
 * Checks every flag of `tether run` and converts it; `tether launcher` checks a launcher's
 * options with it too. Throws `TetherError` `INVALID_OPTION` naming the flag (a bad duration or
 * signal, `--grace` and `--kill-after` at odds, a bad `--keep` or its glob, `--keep` with
 * `--containment pid-namespace`, an empty command): exit status 125, before anything runs. Files and
 * the ledger are opened by `runCommand`, not here.
 */
export function runPlan(argv: string[], flags: RunFlags): RunPlan {
  const { graceMs, killAfterMs } = phaseBudgets(flags);
  // `inf` is timeout(1)'s "no timeout", as 0 is.
  const timeout =
    flags.timeout === undefined ? 0 : parseDuration('--timeout', flags.timeout, { infinite: true });
  const timeoutMs = Number.isFinite(timeout) ? timeout : 0;
  const signal = parseSignal('--signal', flags.signal);
  const containment = parseContainment('--containment', flags.containment);
  const keep = parseKeepFlags(flags.keep ?? [], flags.keepOwner);
  compileKeep(keep); // each glob as the session will compile it (`keep[0].match`)
  if (keep.length > 0 && Array.isArray(containment) && containment.includes('pid-namespace'))
    throw new TetherError(
      'INVALID_OPTION',
      'invalid --keep with --containment pid-namespace: the kernel kills every process of a PID namespace when its init ends, so nothing could be kept (drop one of them)',
    );
  if (
    flags.reportFile !== undefined &&
    flags.events !== undefined &&
    sameFile(flags.reportFile, flags.events)
  )
    throw new TetherError(
      'INVALID_OPTION',
      `invalid --report-file ${JSON.stringify(flags.reportFile)} with --events ${JSON.stringify(flags.events)}: they name the same file, and the report would replace the events (give each its own file)`,
    );
  const [command, ...args] = argv as [string, ...string[]];
  if (!command)
    throw new TetherError(
      'INVALID_OPTION',
      'invalid command: an empty string (expected a program name or path)',
    );
  return {
    command,
    args,
    graceMs,
    killAfterMs,
    containment,
    keep,
    timeoutMs,
    signal,
    preserveStatus: flags.preserveStatus === true,
    json: flags.json === true,
    quiet: flags.quiet === true,
    ...(flags.reportFile !== undefined ? { reportFile: flags.reportFile } : {}),
    ...(flags.events !== undefined ? { events: flags.events } : {}),
    ledger: flags.ledger,
  };
}

/**
 * Runs the payload as a session with stdio passed through and sets `process.exitCode`
 * (docs/cli.md#exit-status). Throws `TetherError` for tether's own failure before the payload
 * runs (usage, an unopenable `--events` or `--report-file`, `CONTAINMENT_UNAVAILABLE`): the CLI
 * prints it and exits 125, after an `end` event with the error when the event log is open.
 */
export async function runCommand(argv: string[], flags: RunFlags): Promise<void> {
  const plan = runPlan(argv, flags);
  // The report and events files are opened before the payload runs (one that cannot be is
  // refused now, not after it), and the report is written through that descriptor at the end.
  const report =
    plan.reportFile !== undefined ? openOutputFile('--report-file', plan.reportFile, 'replace') : undefined;
  let events: EventLog | undefined;
  try {
    events = plan.events !== undefined ? openEventLog(plan.events) : undefined;
  } catch (error) {
    report?.close();
    throw error;
  }
  try {
    process.exitCode = await runSession(plan, events, report);
  } catch (error) {
    if (error instanceof TetherError)
      events?.write({
        type: 'end',
        status: EXIT_TETHER_FAILED,
        timedOut: false,
        error: { code: error.code, message: error.message },
      });
    throw error;
  } finally {
    events?.close();
    report?.close();
  }
}

// The payload in a session, its timeout and the signals to tether; resolves to the exit status.
async function runSession(
  plan: RunPlan,
  events: EventLog | undefined,
  reportFile: OutputFile | undefined,
): Promise<number> {
  // The ledger is opened and the session recorded before the payload starts (125 if not).
  const opened = await openRunLedger(plan.ledger);
  if (!opened.ok) return EXIT_LEDGER_FAILED;
  const { ledger } = opened;
  const progress = progressLine(process.stderr, { quiet: plan.quiet });
  const s = new Session({
    graceMs: plan.graceMs,
    killAfterMs: plan.killAfterMs,
    containment: plan.containment,
    keep: plan.keep,
    onProgress: progress.update,
    ...(events ? { onEvent: (event) => events.write({ ...event }) } : {}),
    ...(ledger ? { ledger, ledgerRequired: true } : {}),
  });
  // The begin lands before the payload's go: a shared store's awaited here, SQLite's spool
  // written by `spawn` while the helper starts (docs/ledger.md, "Recording").
  const recording = ledger ? await beginRecording(ledger, s, [plan.command, ...plan.args]) : undefined;
  if (ledger && !recording) return EXIT_LEDGER_FAILED;
  const started = await startPayload(plan, s, recording);
  if (typeof started === 'number') return started;
  const { proc, caught, early, hold } = started;
  events?.write({
    type: 'started',
    version: EVENTS_VERSION,
    tag: s.tag,
    pid: proc.pid ?? null,
    command: [plan.command, ...plan.args],
    timeoutMs: plan.timeoutMs || null,
    signal: plan.signal.name,
  });
  const group = proc.pid === undefined ? undefined : payloadGroup(plan, s, proc);
  const { command, graceMs, timeoutMs, signal } = plan;
  const stops = new RunStops({
    command,
    graceMs,
    timeoutMs,
    signal,
    session: s,
    proc,
    group,
    events,
    progress,
    recording,
  });
  stops.armTimeout();
  for (const signal of caught) {
    process.on(signal, stops.forward);
    process.off(signal, hold);
  }
  for (const signal of early.splice(0)) stops.forward(signal);
  try {
    const exit = await proc.exited;
    stops.settle();
    progress.clear();
    events?.write({ type: 'exited', ...exitFields(exit) });
    const report = await stops.endSession();
    await recording?.close();
    progress.clear();
    events?.write({ type: 'swept', report });
    printReport(plan, report, ledger?.location, reportFile);
    const status = exitStatus(plan, exit, stops.timedOut);
    events?.write({ type: 'end', status, timedOut: stops.timedOut });
    return status;
  } finally {
    for (const signal of caught) process.off(signal, stops.forward);
  }
}

/**
 * Starts the payload with every signal tether handles held: one that arrives while it starts is
 * kept in `early` and handled as any other once the payload runs; with no listener yet, Node's
 * default action for INT, TERM, HUP or QUIT would end tether with the payload running, leaving its
 * end to the helper's dead man's switch (seen under load: a SIGINT sent as soon as the payload
 * wrote a line, before the listeners were added). A start that throws ends the session (a begin
 * already written gets its end: `failed`) and resolves the exit status (125 for the ledger's
 * refusal), or rethrows.
 */
async function startPayload(plan: RunPlan, s: Session, recording: RunLedger | undefined) {
  const caught = [...ENDING_SIGNALS, ...passedSignals()];
  const early: NodeJS.Signals[] = [];
  const hold = (signal: NodeJS.Signals) => early.push(signal);
  for (const signal of caught) process.on(signal, hold);
  try {
    const proc = s.spawn(plan.command, plan.args, { stdio: 'inherit' });
    return { proc, caught, early, hold };
  } catch (error) {
    for (const signal of caught) process.off(signal, hold);
    await s.end();
    await recording?.close();
    if (!recording || !isLedgerError(error)) throw error;
    refuseLedger(recording.ledger.location, error);
    return EXIT_LEDGER_FAILED;
  }
}

// The payload's process group as its start found it: the payload, its helper, and the keep rules
// (src/sweep/command-group.ts).
function payloadGroup(plan: RunPlan, s: Session, proc: ReturnType<Session['spawn']>) {
  const helper = proc.child.pid !== proc.pid ? proc.child.pid : undefined;
  const bound = { entry: s.tagVariable.entry, notBefore: s.startTicks };
  return commandGroupOf('/proc', proc.pid as number, helper, bound, compileKeep(plan.keep));
}

// Whether two paths name one file: the same path, or (both there) the same device and inode — a
// link to it, or another spelling of it.
function sameFile(a: string, b: string): boolean {
  if (resolve(a) === resolve(b)) return true;
  try {
    const x = statSync(a);
    const y = statSync(b);
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false; // one is not there yet: two names for a file not made yet are two files
  }
}

// The `exited` event's fields: how the payload ended, or why it could not start.
function exitFields(exit: ExitResult): Omit<ExitedEvent, 'type'> {
  if (exit.error) {
    const errno = (exit.error.cause as NodeJS.ErrnoException | undefined)?.code;
    return { error: { code: exit.error.code, message: exit.error.message, ...(errno ? { errno } : {}) } };
  }
  const signalNumber = exit.signal ? constants.signals[exit.signal] : exit.signalNumber;
  return {
    exitCode: exit.exitCode,
    signal: exit.signal,
    ...(signalNumber !== undefined ? { signalNumber } : {}),
    durationMs: Math.round(exit.durationMs),
  };
}

// The report on stderr: as JSON with --json, else the table when there is something to say,
// and then where the session is recorded (`tether show TAG` prints it again).
function printReport(
  plan: RunPlan,
  report: SweepReport,
  ledger: string | undefined,
  reportFile: OutputFile | undefined,
): void {
  // Writing the report must not cost the payload's exit status or the printed report.
  const failed = reportFile?.write(`${JSON.stringify(report, null, 2)}\n`);
  if (failed)
    process.stderr.write(`tether: could not write the report to ${reportFile?.path}: ${failed.message}\n`);
  if (plan.json) process.stderr.write(`${JSON.stringify(report)}\n`);
  else if (plan.quiet) {
    // Errors only: survivors, what could not be read or done, a sweep that did not finish.
    if (report.survivors.length || report.unreadable.length || report.warnings.length || !report.complete)
      process.stderr.write(`${renderReport(report).join('\n')}\n`);
  } else if (
    report.stopped.length ||
    report.kept.length ||
    report.survivors.length ||
    report.unreadable.length ||
    report.warnings.length ||
    report.notes.length ||
    !report.complete
  ) {
    process.stderr.write(`${renderReport(report).join('\n')}\n`);
    // "recorded" only when every write landed: a failed one is a LEDGER_WRITE_FAILED warning,
    // printed above with what recover will do.
    const unrecorded = report.warnings.some((w) => w.code === 'LEDGER_WRITE_FAILED');
    if (ledger && !unrecorded)
      process.stderr.write(`tether: recorded in ${ledger}: tether show ${report.tag}\n`);
  }
}

/**
 * The exit status of a run (docs/cli.md#exit-status): 127/126 when CMD could not start; after a
 * timeout that fired, 124 — or 128 + 9 when the payload had to be ended by SIGKILL, as GNU
 * timeout(1) tells a forced kill, and the payload's own status with `--preserve-status`;
 * otherwise the payload's status, 128 + N for signal N, 125 when it is unknown.
 */
function exitStatus(plan: RunPlan, exit: ExitResult, timedOut: boolean): number {
  if (exit.error) {
    const code = (exit.error.cause as NodeJS.ErrnoException | undefined)?.code;
    process.stderr.write(
      code === 'ENOENT'
        ? `tether: cannot start ${JSON.stringify(plan.command)}: command not found\n`
        : `tether: ${exit.error.message}\n`,
    );
    return code === 'ENOENT' ? EXIT_NOT_FOUND : EXIT_CANNOT_EXECUTE;
  }
  const signal = exit.signal ? constants.signals[exit.signal] : exit.signalNumber;
  const sigkill = constants.signals.SIGKILL;
  if (timedOut && !plan.preserveStatus && signal !== sigkill) return EXIT_TIMED_OUT;
  if (signal !== undefined) return EXIT_SIGNAL_OFFSET + signal;
  if (exit.exitCode !== null) return exit.exitCode;
  // The helper was killed before it reported the command's end: never pass that as success.
  process.stderr.write(
    `tether: the exit status of ${JSON.stringify(plan.command)} is unknown (its helper was killed)\n`,
  );
  return EXIT_STATUS_UNKNOWN;
}
