// `tether run`'s ledger (docs/ledger.md, "Recording"): opened and the session begun BEFORE the
// payload starts — a ledger that cannot be opened or written stops tether with exit 125 and
// says which file or URL and what to do. A shared store's lease is the session's recorder's.
import { TetherError } from '../errors.js';
import { Ledger } from '../ledger/ledger.js';
import { redactUrl, resolveLedgerTarget } from '../ledger/target.js';
import type { Session } from '../session/session.js';
import { EXIT_LEDGER_FAILED } from './exit-codes.js';

/** A ledger `tether run` records in, and how to let go of it. */
export interface RunLedger {
  ledger: Ledger;
  /** Closes the ledger; never throws. */
  close(): Promise<void>;
  /**
   * Gives the ledger's writes under way and to come a short deadline (a store with `hurry`:
   * Postgres, src/ledger/postgres.ts), for a run told to stop by a signal.
   */
  hurry(): void;
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
 * lands before the payload starts) with the session's lease (its recorder renews it:
 * src/session/record.ts); a store that writes synchronously (the spool) is begun by the session's
 * first `spawn` (`ledgerRequired`). Prints why, sets 125 and resolves undefined when the write fails.
 */
export async function beginRecording(
  ledger: Ledger,
  session: Session,
  argv: string[],
): Promise<RunLedger | undefined> {
  // A store that writes synchronously is begun by the session's spawn, while its helper starts.
  if (!ledger.writesSynchronously)
    try {
      await session.begin(argv);
    } catch (error) {
      await ledger.close().catch(() => {});
      refuseLedger(ledger.location, error);
      return undefined;
    }
  return {
    ledger,
    async close() {
      await ledger.close().catch(() => {});
    },
    hurry() {
      (ledger.store as { hurry?: () => void }).hurry?.();
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
