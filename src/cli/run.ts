// tether run [--grace 5s] [--kill-after 3s] [--containment auto] [--json] [--report-file FILE]
//            [--ledger PATH|URL | --no-ledger] -- CMD [ARGS…]
import { closeSync, openSync, writeFileSync } from 'node:fs';
import { constants } from 'node:os';
import { parseContainment } from '../containment/select.js';
import { TetherError } from '../errors.js';
import { parseDuration } from '../options.js';
import { Session } from '../session/session.js';
import type { SweepReport } from '../sweep/report.js';
import {
  EXIT_CANNOT_EXECUTE,
  EXIT_NOT_FOUND,
  EXIT_SIGNAL_OFFSET,
  EXIT_STATUS_UNKNOWN,
} from './exit-codes.js';
import { progressLine } from './progress.js';
import { renderReport } from './render.js';
import { beginRecording, openRunLedger } from './run-ledger.js';

/** Parsed options of `tether run` (durations as the user typed them). */
export interface RunFlags {
  grace: string;
  killAfter: string;
  containment: string;
  json?: boolean;
  reportFile?: string;
  /** `--ledger PATH|URL`, or false for `--no-ledger`; undefined: TETHER_LEDGER or the default. */
  ledger?: string | false;
}

// Every catchable signal whose default action would end tether without its sweep (signal(7));
// SIGKILL cannot be caught (closed by the subreaper helper), SIGSEGV/SIGBUS/SIGFPE/SIGILL are Node's.
const FORWARDED = [
  'SIGINT',
  'SIGTERM',
  'SIGHUP',
  'SIGQUIT',
  'SIGUSR1',
  'SIGUSR2',
  'SIGALRM',
  'SIGVTALRM',
  'SIGPROF',
  'SIGXCPU',
  'SIGXFSZ',
  'SIGIO',
  'SIGPWR',
] as const;

/** Runs the payload as a session with stdio passed through; sets `process.exitCode`. */
export async function runCommand(argv: string[], flags: RunFlags): Promise<void> {
  const graceMs = parseDuration('--grace', flags.grace);
  const killAfterMs = parseDuration('--kill-after', flags.killAfter);
  const containment = parseContainment('--containment', flags.containment);
  const [command, ...args] = argv as [string, ...string[]];
  if (!command)
    throw new TetherError(
      'INVALID_OPTION',
      'invalid command: an empty string (expected a program name or path)',
    );
  // Refuse an unwritable report file before the payload runs, not after it.
  if (flags.reportFile) checkWritable('--report-file', flags.reportFile);
  // The ledger is opened and the session recorded before the payload starts (exit 125 if not).
  const opened = await openRunLedger(flags.ledger);
  if (!opened.ok) return;
  const { ledger } = opened;
  const progress = progressLine(process.stderr);
  const s = new Session({
    graceMs,
    killAfterMs,
    containment,
    onProgress: progress.update,
    ...(ledger ? { ledger } : {}),
  });
  const recording = ledger ? await beginRecording(ledger, s, argv) : undefined;
  if (ledger && !recording) return;
  const proc = s.spawn(command, args, { stdio: 'inherit' });

  // A signal to tether goes to the payload first, then the session ends (the sweep).
  const forward = (signal: NodeJS.Signals) => {
    proc.kill(signal);
    void s.cancel(); // recorded as a cancel (ambiguous if the sweep cannot prove the end)
  };
  for (const signal of FORWARDED) process.on(signal, forward);

  const exit = await proc.exited;
  const report = await s.end();
  await recording?.close();
  progress.clear();
  for (const signal of FORWARDED) process.off(signal, forward);

  if (flags.reportFile) writeReportFile(flags.reportFile, report);
  if (flags.json) process.stderr.write(`${JSON.stringify(report)}\n`);
  else if (
    report.stopped.length ||
    report.survivors.length ||
    report.unreadable.length ||
    report.warnings.length ||
    report.notes.length ||
    !report.complete
  ) {
    process.stderr.write(`${renderReport(report).join('\n')}\n`);
  }

  if (exit.error) {
    const code = (exit.error.cause as NodeJS.ErrnoException | undefined)?.code;
    process.stderr.write(
      code === 'ENOENT'
        ? `tether: cannot start ${JSON.stringify(command)}: command not found\n`
        : `tether: ${exit.error.message}\n`,
    );
    process.exitCode = code === 'ENOENT' ? EXIT_NOT_FOUND : EXIT_CANNOT_EXECUTE;
    return;
  }
  const signal = exit.signal ? constants.signals[exit.signal] : exit.signalNumber;
  if (signal !== undefined) process.exitCode = EXIT_SIGNAL_OFFSET + signal;
  else if (exit.exitCode !== null) process.exitCode = exit.exitCode;
  else {
    // The helper was killed before it reported the command's end: never pass that as success.
    process.stderr.write(
      `tether: the exit status of ${JSON.stringify(command)} is unknown (its helper was killed)\n`,
    );
    process.exitCode = EXIT_STATUS_UNKNOWN;
  }
}

function checkWritable(option: string, path: string): void {
  try {
    closeSync(openSync(path, 'a'));
  } catch (error) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${option} ${JSON.stringify(path)}: ${(error as Error).message}`,
    );
  }
}

// Writing the report must not cost the payload's exit status or the printed report.
function writeReportFile(path: string, report: SweepReport): void {
  try {
    writeFileSync(path, `${JSON.stringify(report, null, 2)}\n`);
  } catch (error) {
    process.stderr.write(`tether: could not write the report to ${path}: ${(error as Error).message}\n`);
  }
}
