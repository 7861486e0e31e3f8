// `sandbox.exec` with a ledger: the call recorded as a session located by its channel's argv
// (docs/ledger.md, "Recording"). Its end's state follows the outcome rules: a proven end is
// `succeeded` (ok) or `failed` (`cancelled` for a caller's cancel); an unknown end the sweep
// settled (EXEC_STATUS_UNKNOWN) is `failed`; AMBIGUOUS_EFFECT is `ambiguous`.
import { TetherError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import type { SessionOutcome, SessionState } from '../ledger/types.js';
import type { ErrorRecord } from '../outcome/record.js';
import type { SweepReport } from '../sweep/report.js';
import type { ExecChannel } from './channel.js';
import type { SandboxExecResult } from './exec-result.js';

/** A begun record: `settle` writes the end of the call and hands its result (or error) on. */
export interface SandboxRecord {
  settle(call: Promise<SandboxExecResult>): Promise<SandboxExecResult>;
}

/**
 * Writes the call's record (`running`) before anything starts. Throws `INVALID_OPTION` for a
 * channel without `argv` (recover could not reach it again), and the ledger's own TetherError
 * (`LEDGER_LOCKED`, `LEDGER_UNAVAILABLE`…) when the write fails: the call then never started.
 */
export async function beginSandboxRecord(
  ledger: Ledger,
  channel: ExecChannel,
  tag: string,
  argv: string[],
): Promise<SandboxRecord> {
  const prefix = channel.argv;
  if (!Array.isArray(prefix) || prefix.length === 0)
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ledger with the channel ${JSON.stringify(channel.describe)}: a recorded call needs a channel with argv (commandChannel(prefix)), through which tether recover can reach the target again`,
    );
  await ledger.begin({ tag, location: { kind: 'sandbox', channel: [...prefix] }, command: argv });
  return {
    async settle(call) {
      let result: SandboxExecResult | undefined;
      let thrown: unknown;
      try {
        result = await call;
      } catch (error) {
        thrown = error;
      }
      const end = result ? resultEnd(result) : errorEnd(thrown);
      const report = result?.report ?? (thrown as { report?: SweepReport } | undefined)?.report;
      try {
        const settled = await ledger.settle(tag, end.state, {
          outcome: end.outcome,
          ...(report ? { report } : {}),
        });
        if (!settled.applied && report) await ledger.recordSweep(tag, report);
      } catch (error) {
        report?.warnings.push({
          code: 'LEDGER_WRITE_FAILED',
          message: `ledger ${ledger.location}: the end of the call (${end.state}) was not recorded: ${(error as Error).message}; it stays running there until tether recover sweeps it`,
        });
        if (result) result.ledgerError = error as Error;
      }
      if (result) return result;
      throw thrown;
    },
  };
}

type End = { state: Exclude<SessionState, 'running' | 'recovered' | 'parked'>; outcome: SessionOutcome };

// A proven end: the command's status; a caller's cancel is `cancelled`.
function resultEnd(result: SandboxExecResult): End {
  const outcome = { exitCode: result.exitCode, signal: result.clientSignal, error: null };
  if (result.ok) return { state: 'succeeded', outcome };
  if (result.stoppedBy === 'cancel') return { state: 'cancelled', outcome };
  return { state: 'failed', outcome };
}

// A rejected call: ambiguous when it says so, else failed (its end was settled, or it never ran).
function errorEnd(error: unknown): End {
  const code = (error as { code?: unknown })?.code;
  const record: ErrorRecord = {
    name: (error as Error)?.name ?? 'Error',
    message: (error as Error)?.message ?? String(error),
    ...(typeof code === 'string' ? { code } : {}),
  };
  const state = code === 'AMBIGUOUS_EFFECT' ? 'ambiguous' : 'failed';
  return { state, outcome: { exitCode: null, signal: null, error: record } };
}
