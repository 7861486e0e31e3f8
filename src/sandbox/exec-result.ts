// The result of a sandbox exec with a proven end: its own file, so that the modules that build
// it (exec-outcome.ts) and record it (exec-record.ts) need not import the exec that runs them.
import type { CommandResult, StopReason } from '../session/result.js';
import type { SweepReport } from '../sweep/report.js';

/**
 * A proven end (the completion line arrived): the result shape of `spawn()` (`command`,
 * `exitCode`, `signal` — always null: the wrapper's shell reports a signal N as `exitCode`
 * 128+N —, `stdout`, `stderr`, `failed` = not `ok` or stopped, `timedOut` = stopped by the
 * silence bound, `isCanceled` = `cancelled`, `durationMs`, `tag`, `report`), plus the exec
 * client's own end.
 */
export interface SandboxExecResult<T extends string | Buffer = string> extends CommandResult<T> {
  /**
   * `exitCode` 0 and `clientStatus` 0: the only success.
   * @deprecated Read `failed` (true where this is false, and for a call tether stopped), as
   * every result says it; still set, and written in JSON, until the next minor release.
   */
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
  stdout: T;
  stderr: T;
  tag: string;
  /**
   * True when `signal` aborted the call (`stoppedBy: 'cancel'`).
   * @deprecated Read `isCanceled`, as every result says it; still set, and written in JSON,
   * until the next minor release.
   */
  cancelled: boolean;
  /** Which collected stream passed `maxBuffer` (the call was then stopped: `stoppedBy: 'max-buffer'`). */
  maxBufferExceeded?: 'stdout' | 'stderr';
  /** Why the call was stopped before the client exited, or null; `report` is then that stop's sweep. */
  stoppedBy: Exclude<StopReason, 'timeout'> | null;
  /** The error of the caller's `stdout`/`stderr` stream that stopped the call (EPIPE…). */
  outputError?: Error;
  /**
   * With `ledger`: the error of a write of the call's end the ledger refused (the record then
   * stays `running` until `tether recover` sweeps it). Also a `LEDGER_WRITE_FAILED` warning of
   * `report` when there is one.
   */
  ledgerError?: Error;
  report?: SweepReport;
  /**
   * What this result rests on that tether cannot check, in sentences: END_LINE_BLIND_SPOT (the
   * line is the wrapper's word only while no process of the session's uid reads or traces the
   * wrapper) unless the helper held the nonce and wrote the line (docs/sandbox.md, "The helper
   * holds the nonce"); `report.blindSpots` says the sweep's.
   */
  blindSpots: string[];
}
