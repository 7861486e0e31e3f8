// A session's record in the ledger (docs/ledger.md, "Recording"): `begin` before its first
// command starts, each sweep's report, and its end with the state the outcome rules give
// (src/session/recorded-end.ts). A write that fails once a command runs never costs the sweep:
// it is a `LEDGER_WRITE_FAILED` warning of the report, and the record stays as it was
// (`running`: `tether recover` then finds it once this process is gone, sweeps it, and records
// it `recovered`).
import type { Ledger } from '../ledger/ledger.js';
import { isPostgresUrl } from '../ledger/target.js';
import type { KeptProcess, SessionLocation } from '../ledger/types.js';
import type { ProcessRecord, SweepReport, SweepWarning } from '../sweep/report.js';
import { type CommandEnd, type StopReason, sessionEnd } from './recorded-end.js';

export type { CommandEnd, RecordedEnd, StopReason } from './recorded-end.js';

/**
 * A shared store's lease on a record, ms (docs/ledger.md, "Leases"): another machine's
 * `recover` takes the session over once it has not been renewed for this long.
 */
export const LEASE_MS = 30_000;
/** The renewals a lease outlives before it lapses: it is renewed every lease / 3 (10 s of 30 s). */
const BEATS_PER_LEASE = 3;

/**
 * One session's writes to the ledger, and its lease on a shared store. `begin` is idempotent:
 * the first call writes, later ones return its promise. `finish` never rejects: what it could
 * not write becomes a warning of the report it returns.
 */
export class SessionRecorder {
  private began: Promise<void> | undefined;
  private readonly commands: CommandEnd[] = [];
  private stop: StopReason | undefined;
  private heartbeat: NodeJS.Timeout | undefined;

  constructor(
    readonly ledger: Ledger,
    readonly tag: string,
    readonly location: SessionLocation,
  ) {}

  /**
   * Writes the record (`running`). With SQLite the row is inserted synchronously, inside this
   * call, before it returns its promise: a command spawned right after it starts recorded. With
   * a networked store the insert lands a round trip later (docs/ledger.md, "Recording").
   */
  begin(command: string[], leaseMs = this.defaultLeaseMs()): Promise<void> {
    this.began ??= this.ledger
      .begin({ tag: this.tag, location: this.location, command, ...(leaseMs ? { leaseMs } : {}) })
      .then(() => this.renew(leaseMs));
    return this.began;
  }

  /**
   * `begin` not awaited (the command starts meanwhile): a begin that fails is a
   * `LEDGER_WRITE_FAILED` warning pushed to `warnings` — the session's, so that its report says
   * the session was not recorded at whichever end comes (`endSync` too), and its sweep emits it
   * as a `warning` event.
   */
  beginUnawaited(command: string[], warnings: SweepWarning[]): void {
    this.begin(command).catch((error: unknown) => warnings.push(beginFailed(this.ledger, error)));
  }

  /**
   * Stops renewing the lease (its last renewal then lapses, and another machine's recover may
   * take the record over). `finish` calls it first; so does a session ended without writing its
   * end (`endSync`). Idempotent.
   */
  release(): void {
    clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }

  // A shared store (Postgres) holds records other machines' recover reads: a session there gets
  // a lease, renewed while it runs. A local store's record is judged by its supervisor's pid.
  private defaultLeaseMs(): number | undefined {
    return isPostgresUrl(this.ledger.location) ? LEASE_MS : undefined;
  }

  // Renewed every lease / 3 while the session runs, for library sessions as for `tether run`; a
  // failed renewal is retried at the next beat (the lease outlives two missed beats). Unref'd:
  // a session left unended does not keep its process alive, and its lease lapses with it.
  private renew(leaseMs: number | undefined): void {
    if (!leaseMs || this.heartbeat) return;
    this.heartbeat = setInterval(
      () => void this.ledger.heartbeat(this.tag, leaseMs).catch(() => {}),
      Math.max(1, Math.floor(leaseMs / BEATS_PER_LEASE)),
    );
    this.heartbeat.unref();
  }

  /**
   * `begin`, written before it returns (`Ledger.beginSync`: SQLite, the spool); throws the
   * ledger's error, and then the session is not recorded (a later `begin` may try again).
   */
  beginSync(command: string[], leaseMs?: number): void {
    if (this.began) return;
    this.ledger.beginSync({
      tag: this.tag,
      location: this.location,
      command,
      ...(leaseMs ? { leaseMs } : {}),
    });
    this.began = Promise.resolve();
  }

  /** True once `begin` was called. */
  get begun(): boolean {
    return this.began !== undefined;
  }

  commandEnded(end: CommandEnd): void {
    this.commands.push(end);
  }

  stopped(reason: StopReason): void {
    this.stop ??= reason;
  }

  /**
   * Writes the sweep's report and the end (`sessionEnd`), and the kept processes the report
   * lists. Resolves to `report`, with a `LEDGER_WRITE_FAILED` warning for a write that failed.
   */
  async finish(report: SweepReport, endedEarly: boolean): Promise<SweepReport> {
    this.release(); // the end is written next (or, failing, left to the lease's lapse)
    if (!this.began) return report; // nothing ran: nothing was recorded
    try {
      await this.began;
    } catch (error) {
      // Once: `beginUnawaited` may have put it in the report already.
      const warning = beginFailed(this.ledger, error);
      if (!report.warnings.some((w) => w.code === warning.code && w.message === warning.message))
        report.warnings.push(warning);
      return report;
    }
    const end = sessionEnd(
      report,
      this.commands,
      this.stop ?? (endedEarly ? 'ended-early' : undefined),
      this.tag,
    );
    try {
      const kept = keptOf(report);
      if (kept.length > 0) await this.ledger.recordKept(this.tag, kept);
      // One write in the common case: the end with its report. An end the table refuses (an
      // operator's cancel landed first) still leaves the report as evidence.
      const settled = await this.ledger.settle(this.tag, end.state, { outcome: end.outcome, report });
      if (!settled.applied) await this.ledger.recordSweep(this.tag, report);
    } catch (error) {
      report.warnings.push(
        failed(
          this.ledger,
          `the end of the session (${end.state}) was not recorded: ${(error as Error).message}; it stays running there until tether recover sweeps it`,
        ),
      );
    }
    return report;
  }
}

function beginFailed(ledger: Ledger, error: unknown): { code: 'LEDGER_WRITE_FAILED'; message: string } {
  return failed(ledger, `the session was not recorded (its begin failed): ${(error as Error).message}`);
}

function failed(ledger: Ledger, what: string): { code: 'LEDGER_WRITE_FAILED'; message: string } {
  return { code: 'LEDGER_WRITE_FAILED', message: `ledger ${ledger.location}: ${what}` };
}

// The report's kept processes (the `keep` option), read defensively: older reports have none.
function keptOf(report: SweepReport): KeptProcess[] {
  const kept = (report as { kept?: (KeptProcess & Partial<ProcessRecord>)[] }).kept ?? [];
  return kept.map((k) => ({
    pid: k.pid,
    startTime: k.startTime,
    cmdline: k.cmdline,
    match: k.match,
    owner: k.owner,
    expiresAt: k.expiresAt,
  }));
}
