// tether run [--timeout D] [-s SIG] [-k D] [--kill-budget D] [--preserve-status] [--containment auto]
//   [--keep GLOB=TTL]… [--json] [--report-file FILE] [--events FILE] [--ledger PATH|URL | --no-ledger]
//   -- CMD [ARGS…]
// timeout(1)'s conventions (docs/cli.md#tether-run): 124 when the timeout fired, 125 for tether's
// own failure, 126/127 when CMD cannot start, 128+N when signal N ended it.
import { constants } from 'node:os';
import { type Containment, parseContainment } from '../containment/select.js';
import { TetherError } from '../errors.js';
import { signalName } from '../libc.js';
import { parseDuration } from '../options.js';
import type { StopReason } from '../session/record.js';
import { type ExitResult, Session } from '../session/session.js';
import { commandGroupOf, signalCommandGroup } from '../sweep/command-group.js';
import { compileKeep, type KeepRule } from '../sweep/keep.js';
import type { SweepReport } from '../sweep/report.js';
import { createSignaller } from '../sweep/signal.js';
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
import { beginRecording, isLedgerError, openRunLedger, refuseLedger } from './run-ledger.js';
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
  // A signal that arrives while the payload starts is held, then handled as any other (below):
  // with no listener yet, Node's default action for INT, TERM, HUP or QUIT would end tether with
  // the payload running, leaving its end to the helper's dead man's switch (seen under load: a
  // SIGINT sent as soon as the payload wrote a line, before the listeners below were added).
  const caught = [...ENDING_SIGNALS, ...passedSignals()];
  const early: NodeJS.Signals[] = [];
  const hold = (signal: NodeJS.Signals) => early.push(signal);
  for (const signal of caught) process.on(signal, hold);
  let proc: ReturnType<typeof s.spawn>;
  try {
    proc = s.spawn(plan.command, plan.args, { stdio: 'inherit' });
  } catch (error) {
    for (const signal of caught) process.off(signal, hold);
    // Nothing started. The session ends (a begin already written gets its end: `failed`).
    await s.end();
    await recording?.close();
    if (!ledger || !isLedgerError(error)) throw error;
    refuseLedger(ledger.location, error);
    return EXIT_LEDGER_FAILED;
  }
  // Why the payload was stopped, for the ledger: a signal to tether is a cancel, the timeout a
  // deadline (docs/ledger.md, "Recording"); undefined when it ended by itself.
  let stopReason: StopReason | undefined;
  // When the first stop signal reached the payload (performance.now() ms): the session's one
  // grace counts from then, so the sweep after a -k kill starts at its KILL phase for what had
  // that grace, instead of a second TERM phase from scratch (1 + 5 + 5 s over a TERM-ignoring
  // payload before; docs/cli.md#tether-run). A second ending signal sets it a whole grace back:
  // the grace is spent.
  let stoppedAt: number | undefined;
  const endSession = () => {
    const options = stoppedAt === undefined ? {} : { graceStartedAt: stoppedAt };
    return stopReason ? s.cancel(stopReason, options) : s.end(options);
  };
  events?.write({
    type: 'started',
    version: EVENTS_VERSION,
    tag: s.tag,
    pid: proc.pid ?? null,
    command: [plan.command, ...plan.args],
    timeoutMs: plan.timeoutMs || null,
    signal: plan.signal.name,
  });

  // What the payload starts in its process group gets the first stop signal too, as timeout(1)'s
  // kill(0, sig) gives it: the payload keeps tether's group, so never the group itself — each
  // descendant of the payload or its helper in that group, identity-checked. Before, `sh -c
  // 'sleep 30'` ignored a forwarded SIGINT while its sleep ran: 137 after -k, not 130 at once.
  const group =
    proc.pid === undefined
      ? undefined
      : commandGroupOf(
          '/proc',
          proc.pid,
          proc.child.pid !== proc.pid ? proc.child.pid : undefined,
          {
            entry: s.tagVariable.entry,
            notBefore: s.startTicks,
          },
          compileKeep(plan.keep),
        );
  const signaller = createSignaller();
  const signalGroup = (signal: number | NodeJS.Signals) => {
    if (!group) return;
    // Node has not reaped the helper while it reports no exit: its pid is still its own.
    const helperRunning = proc.child.exitCode === null && proc.child.signalCode === null;
    try {
      signalCommandGroup(group, signal, signaller, helperRunning);
    } catch {
      // No process table (NoProcError): the sweep says so in its report, and ends the rest.
    }
  };

  // Stopping, as timeout(1) does: the first signal (the timeout's, or an ending one forwarded)
  // goes to the payload first, so that its handler runs before any other signal, then to what
  // it started in its process group; SIGKILL follows -k/--kill-after later if it is still
  // running, and the session ends with it. Its exit ends the session sooner (the ordinary sweep
  // of what it left).
  let killTimer: NodeJS.Timeout | undefined;
  // While the command's own -k runs: what it waits for, on stderr (src/cli/progress.ts).
  let waitTicker: NodeJS.Timeout | undefined;
  const stop = (signal: number | NodeJS.Signals): boolean => {
    const delivered = proc.kill(signal);
    if (delivered && killTimer === undefined) {
      const sentAt = performance.now();
      stoppedAt = sentAt;
      signalGroup(signal);
      const name = typeof signal === 'number' ? (signalName(signal) ?? `signal ${signal}`) : signal;
      const what = `${plan.command} (pid ${proc.pid})`;
      waitTicker = setInterval(() => {
        const since = performance.now() - sentAt;
        progress.command(what, name, since, Math.max(0, plan.graceMs - since));
      }, 250);
      waitTicker.unref();
      killTimer = setTimeout(() => {
        clearInterval(waitTicker);
        const killed = proc.kill('SIGKILL');
        events?.write({ type: 'kill', signal: 'SIGKILL', afterMs: plan.graceMs, delivered: killed });
        void endSession();
      }, plan.graceMs);
    }
    return delivered;
  };

  // The timeout counts (status 124) only when its signal reached the payload: one that had
  // already ended keeps its own status.
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  if (plan.timeoutMs > 0)
    timer = setTimeout(() => {
      timer = undefined;
      stopReason ??= 'timeout';
      timedOut = stop(plan.signal.number);
      events?.write({
        type: 'timeout',
        afterMs: plan.timeoutMs,
        signal: plan.signal.name,
        delivered: timedOut,
      });
    }, plan.timeoutMs);

  // A signal to tether goes to the payload. INT/TERM/HUP/QUIT stop it (above; the timeout no
  // longer applies), and a second one is "now": the grace counts as spent, so the sweep that
  // starts at once sends its SIGTERM and goes on to SIGKILL without waiting (before, it waited
  // out the rest of the grace: 5.1 s over a TERM-ignoring payload however many signals came);
  // the others are the payload's alone. They also hurry the ledger: a Postgres that stopped answering then
  // holds the end's writes for 2 s, not a statement's 10 s deadline (docs/ledger.md, "The stores").
  const ending = new Set<string>(ENDING_SIGNALS);
  let endingSignals = 0;
  const forward = (signal: NodeJS.Signals) => {
    const ends = ending.has(signal);
    if (!ends) {
      const delivered = proc.kill(signal); // not inside events?.write(…): it would be skipped
      events?.write({ type: 'signal', signal, delivered, ends });
      return;
    }
    recording?.hurry();
    clearTimeout(timer);
    stopReason ??= 'abort';
    endingSignals++;
    const delivered = endingSignals === 1 ? stop(signal) : proc.kill(signal);
    events?.write({ type: 'signal', signal, delivered, ends });
    if (endingSignals > 1) {
      stoppedAt = performance.now() - plan.graceMs;
      clearInterval(waitTicker);
    }
    if (endingSignals > 1 || !delivered) void endSession();
  };
  for (const signal of caught) {
    process.on(signal, forward);
    process.off(signal, hold);
  }
  for (const signal of early.splice(0)) forward(signal);
  try {
    const exit = await proc.exited;
    clearTimeout(timer);
    clearTimeout(killTimer);
    clearInterval(waitTicker);
    progress.clear();
    events?.write({ type: 'exited', ...exitFields(exit) });
    const report = await endSession();
    await recording?.close();
    progress.clear();
    events?.write({ type: 'swept', report });
    printReport(plan, report, ledger?.location, reportFile);
    const status = exitStatus(plan, exit, timedOut);
    events?.write({ type: 'end', status, timedOut });
    return status;
  } finally {
    for (const signal of caught) process.off(signal, forward);
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
