// Errors of sandbox mode (decisions.md D13, D15). Each is a TetherError with a stable `code`.
import { TetherError, type TetherErrorCode } from '../errors.js';
import type { ProcessRecord, SweepReport } from '../sweep/report.js';

/**
 * A sandbox failure: `CHANNEL_UNREACHABLE`, `SWEEP_CUT`, `INPUT_CUT`, `WRITE_REFUSED` or
 * `AMBIGUOUS_EFFECT`. `report` is the sweep's (partial when cut); `unsettled` the processes a
 * cut sweep signalled without saying how they ended.
 */
export class SandboxError extends TetherError {
  readonly unsettled: ProcessRecord[];
  constructor(
    code: TetherErrorCode,
    message: string,
    options: { cause?: unknown; report?: SweepReport; unsettled?: ProcessRecord[]; tag?: string } = {},
  ) {
    // `tag` (of a `sandbox.exec` call: to sweep it later) and `report` are TetherError's fields.
    super(code, message, options);
    this.name = 'SandboxError';
    this.unsettled = options.unsettled ?? [];
  }
}

/**
 * `EXEC_STATUS_UNKNOWN`: the command's completion line never arrived, so its end is unknown;
 * its session was swept in the container and `report` says what was stopped. Never retried
 * blindly: the command may have done part of its work.
 */
export class ExecStatusUnknownError extends TetherError {
  declare readonly report: SweepReport;
  /** The exec client's own exit status (often 0 on a lost stream), or null. */
  readonly clientStatus: number | null;
  /** The session tag of the call (`TETHER_SESSION_<hex>`): what started late can be swept with it. */
  declare readonly tag: string;
  constructor(message: string, report: SweepReport, clientStatus: number | null, tag: string = report.tag) {
    super('EXEC_STATUS_UNKNOWN', message, { report, tag });
    this.name = 'ExecStatusUnknownError';
    this.clientStatus = clientStatus;
  }
}

/**
 * `CHANNEL_UNREACHABLE` for a command that never started: its exec client exited with
 * `clientStatus` before the wrapper announced itself, and the first attempt of the sweep that
 * followed failed the same way (that status, the sweep program silent too) — a client that
 * cannot start (its own usage error, no such container, a refused connection), not a cut
 * stream: not retried. `cause`: the client's failure, as it said it.
 */
export class ClientNotStartedError extends SandboxError {
  /** The status both exec clients exited with. */
  readonly clientStatus: number;
  constructor(message: string, clientStatus: number, options: { cause: Error; tag?: string }) {
    super('CHANNEL_UNREACHABLE', message, options);
    this.name = 'ClientNotStartedError';
    this.clientStatus = clientStatus;
  }
}

/** One line naming processes: "pid 12 (sleep 30), pid 14 (sh -c …)". */
export function nameProcesses(list: { pid: number; cmdline: string; comm: string }[]): string {
  return list.map((p) => `pid ${p.pid} (${(p.cmdline || p.comm).slice(0, 60)})`).join(', ');
}
