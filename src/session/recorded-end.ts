// The end a session's record gets, by the outcome rules (docs/outcomes.md): from its sweep's
// report, how its commands ended and whether tether stopped it. Pure: src/session/record.ts
// writes it.
import { TetherError } from '../errors.js';
import type { SessionOutcome, SessionState } from '../ledger/types.js';
import { toRecord } from '../outcome/record.js';
import type { ProcessRecord, SweepReport } from '../sweep/report.js';
import type { EndReason } from './result.js';

/** How a command of the session ended, as far as the record needs it. */
export interface CommandEnd {
  exitCode: number | null;
  signal: string | null;
  error?: TetherError;
}

/** Why the session was ended before its commands had: a caller's cancel, or a deadline. */
export type StopReason = Extract<EndReason, 'cancel' | 'timeout'>;

/** What the record's end is: a state the ledger accepts after `running`, and its outcome. */
export interface RecordedEnd {
  state: Exclude<SessionState, 'running' | 'recovered' | 'parked'>;
  outcome: SessionOutcome;
}

/**
 * The end a session's record gets (the outcome rules, docs/outcomes.md): a report that is not
 * `ok` (a survivor, a sweep that could not run or finish) is `ambiguous` whatever else happened
 * — a cancel included: the end was not proven; else a caller's cancel (`abort`, or `end()` while
 * a command ran) is `cancelled`; a deadline (`timeout`) and any command that failed (exit ≠ 0,
 * a signal, a start failure, an unknown status) are `failed`; else `succeeded`. `outcome` is the
 * last command's status (or the first failed one's) with the error that names the end.
 */
export function sessionEnd(
  report: SweepReport,
  commands: readonly CommandEnd[],
  stop: StopReason | 'ended-early' | undefined,
  tag: string,
): RecordedEnd {
  const failed = commands.find((c) => c.error !== undefined || c.exitCode !== 0);
  const last = failed ?? commands.at(-1);
  const status = { exitCode: last?.exitCode ?? null, signal: last?.signal ?? null };
  const ended = (state: RecordedEnd['state'], error: TetherError | null): RecordedEnd => ({
    state,
    outcome: { ...status, error: error && toRecord(error) },
  });
  if (!report.ok) {
    const cause = report.survivors.length
      ? new TetherError(
          'SURVIVORS',
          `${report.survivors.length} process(es) survived the sweep: ${names(report.survivors)}`,
          { tag },
        )
      : new TetherError(
          'SWEEP_INCOMPLETE',
          `the sweep did not finish: ${report.warnings.map((w) => w.message).join('; ') || 'no proof'}`,
          { tag },
        );
    return ended(
      'ambiguous',
      new TetherError('AMBIGUOUS_EFFECT', `the end of session ${tag} could not be proven: ${cause.message}`, {
        tag,
        cause,
        ...status,
      }),
    );
  }
  if (stop === 'cancel' || stop === 'ended-early')
    return ended(
      'cancelled',
      new TetherError('CANCELLED', `session ${tag} was cancelled (its end is proven)`, { tag, ...status }),
    );
  if (stop === 'timeout')
    return ended(
      'failed',
      new TetherError('TIMED_OUT', `session ${tag} timed out (its end is proven)`, { tag, ...status }),
    );
  if (failed?.error) return ended('failed', failed.error);
  if (failed) {
    const how = failed.signal
      ? `was ended by ${failed.signal}`
      : failed.exitCode === null
        ? 'ended with an unknown status'
        : `exited ${failed.exitCode}`;
    return ended(
      'failed',
      new TetherError('COMMAND_FAILED', `a command of session ${tag} ${how}`, { tag, ...status }),
    );
  }
  return ended('succeeded', null);
}

function names(list: ProcessRecord[]): string {
  return list
    .slice(0, 5)
    .map((p) => `pid ${p.pid} (${(p.cmdline || p.comm).slice(0, 60)})`)
    .join(', ');
}
