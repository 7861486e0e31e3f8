// The shared ledger store: Postgres through `pg` (docs/ledger.md, "Postgres"). Not yet built.
import { ledgerUnavailable } from './store-errors.js';
import { redactUrl } from './target.js';
import type { LedgerStore } from './types.js';

/** Opens the Postgres ledger at `url`. Not built yet: rejects with LEDGER_UNAVAILABLE. */
export async function openPostgresStore(url: string): Promise<LedgerStore> {
  throw ledgerUnavailable(redactUrl(url), 'the Postgres store is not in this build yet');
}
