// `tether run`'s ledger (docs/ledger.md, "Recording"): opened and the session begun BEFORE the
// payload starts — a ledger that cannot be opened or written stops tether with exit 125 and
// says which file or URL and what to do. A shared store gets the supervisor's lease, renewed
// while the payload runs.
import { TetherError } from '../errors.js';
import { Ledger } from '../ledger/ledger.js';
import { isPostgresUrl, redactUrl, resolveLedgerTarget } from '../ledger/target.js';
import type { Session } from '../session/session.js';
import { EXIT_LEDGER_FAILED } from './exit-codes.js';

/** The supervisor's lease on a shared store, ms: another machine's recover waits this long. */
export const LEASE_MS = 30_000;
/** How often the lease is renewed, ms. */
export const HEARTBEAT_MS = 10_000;

/** A ledger `tether run` records in, and how to let go of it. */
export interface RunLedger {
  ledger: Ledger;
  /** Stops the heartbeat and closes the ledger; never throws. */
  close(): Promise<void>;
}

/**
 * Opens the ledger of `--ledger PATH|URL` (else `TETHER_LEDGER`, else the XDG default), or none
 * for `--no-ledger` (`flag === false`). On failure prints why and what to do, sets exit status
 * 125 and resolves `{ ok: false }`: the payload must not start.
 */
export async function openRunLedger(
  flag: string | false | undefined,
): Promise<{ ok: true; ledger: Ledger | undefined } | { ok: false }> {
  if (flag === false) return { ok: true, ledger: undefined };
  try {
    // SQLite through its spool: the session lands without loading SQLite (docs/ledger.md, "The spool").
    return { ok: true, ledger: await Ledger.open(flag, { spool: true }) };
  } catch (error) {
    return refuseLedger(describeTarget(flag), error);
  }
}

/**
 * Writes the session's begin on a store that writes asynchronously (Postgres; awaited: the record
 * lands before the payload starts) with a lease, renewed every 10 s; a store that writes
 * synchronously (the spool) is begun by the session's first `spawn` (`ledgerRequired`). Prints
 * why, sets 125 and resolves undefined when the write fails.
 */
export async function beginRecording(
  ledger: Ledger,
  session: Session,
  argv: string[],
): Promise<RunLedger | undefined> {
  const shared = isPostgresUrl(ledger.location);
  // A store that writes synchronously is begun by the session's spawn, while its helper starts.
  if (!ledger.writesSynchronously)
    try {
      await session.begin(argv, shared ? LEASE_MS : undefined);
    } catch (error) {
      await ledger.close().catch(() => {});
      refuseLedger(ledger.location, error);
      return undefined;
    }
  // Renewed while the payload runs; a failed renewal is retried at the next beat (the lease
  // outlives two missed beats).
  const timer = shared
    ? setInterval(() => void ledger.heartbeat(session.tag.name, LEASE_MS).catch(() => {}), HEARTBEAT_MS)
    : undefined;
  timer?.unref();
  return {
    ledger,
    async close() {
      clearInterval(timer);
      await ledger.close().catch(() => {});
    },
  };
}

function describeTarget(flag: string | undefined): string {
  try {
    const t = resolveLedgerTarget(flag);
    return t.kind === 'sqlite' ? t.path : redactUrl(t.url);
  } catch {
    return String(flag);
  }
}

/** Whether `error` is one of the ledger's (`LEDGER_*`, or a tag already recorded). */
export function isLedgerError(error: unknown): error is TetherError {
  return error instanceof TetherError && (error.code.startsWith('LEDGER_') || error.code === 'INVALID_TAG');
}

/** Prints why the session could not be recorded and what to do (nothing has started); sets exit status 125. */
export function refuseLedger(where: string, error: unknown): { ok: false } {
  const message = error instanceof TetherError ? error.message : (error as Error).message;
  process.stderr.write(
    `tether: cannot record the session in the ledger ${where}: ${message}\n` +
      'tether: the command was not started. Fix the ledger, choose another with --ledger PATH|URL ' +
      '(or TETHER_LEDGER), or run without one: tether run --no-ledger -- CMD\n',
  );
  process.exitCode = EXIT_LEDGER_FAILED;
  return { ok: false };
}
