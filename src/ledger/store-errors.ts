// The three ways a store fails, each a TetherError naming the file or URL and what to do
// (docs/ledger.md, "Errors"). Shared by the SQLite and Postgres stores.
import { TetherError } from '../errors.js';

/**
 * The file or schema is not one tether wrote or can read: left exactly as it is. `advice` is what
 * to do (default: move it aside to start a new ledger, or restore it from a backup).
 */
export function ledgerCorrupt(location: string, why: string, cause?: unknown, advice?: string): TetherError {
  return new TetherError(
    'LEDGER_CORRUPT',
    `the ledger ${location} cannot be read: ${why}. It was left as it is (never reset): ${advice ?? 'move it aside to start a new ledger, or restore it from a backup'}`,
    cause === undefined ? {} : { cause },
  );
}

/** Another writer held the store past the busy timeout. */
export function ledgerLocked(location: string, why: string, cause?: unknown): TetherError {
  return new TetherError(
    'LEDGER_LOCKED',
    `the ledger ${location} is locked: ${why}. Try again; if it stays locked, find the process holding it (fuser ${location})`,
    cause === undefined ? {} : { cause },
  );
}

/** The store cannot be opened or written (read-only, full, unreachable, a missing driver). */
export function ledgerUnavailable(location: string, why: string, cause?: unknown): TetherError {
  return new TetherError(
    'LEDGER_UNAVAILABLE',
    `the ledger ${location} is unavailable: ${why}`,
    cause === undefined ? {} : { cause },
  );
}

/** Hooks a store may call, for the conformance suite's "killed inside a transaction" and "reader during a migration" checks. */
export interface StoreHooks {
  /**
   * Called inside a compare-and-set's transaction, after its write and before its commit. The
   * SQLite store calls it synchronously (its transactions are); the Postgres store awaits it.
   */
  beforeCommit?: (tag: string) => void | Promise<void>;
  /** Called inside a migration's transaction, after its steps and before its commit (same calling rules). */
  duringMigration?: (from: number, to: number) => void | Promise<void>;
}
