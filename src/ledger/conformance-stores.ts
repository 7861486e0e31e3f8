// The conformance suite's factory for tether's own stores: `openStore(arg, hooks)` where `arg`
// is the JSON of a BuiltinStoreArg. A caller's own store provides a module of the same shape.
import { openPostgresStore } from './postgres.js';
import { openSqliteStore } from './sqlite.js';
import type { StoreHooks } from './store-errors.js';
import type { LedgerStore } from './types.js';

/** Which built-in store, where, and (for the migration check) at which schema version. */
export type BuiltinStoreArg =
  | { kind: 'sqlite'; path: string; schemaVersion?: number }
  | { kind: 'postgres'; url: string; schema?: string; schemaVersion?: number };

/** A StoreFactory (see conformance.ts) for the SQLite and Postgres stores. */
export async function openStore(arg: string, hooks: StoreHooks = {}): Promise<LedgerStore> {
  const a = JSON.parse(arg) as BuiltinStoreArg;
  if (a.kind === 'sqlite') {
    return openSqliteStore(
      a.path,
      a.schemaVersion === undefined ? { hooks } : { hooks, schemaVersion: a.schemaVersion },
    );
  }
  const options: Parameters<typeof openPostgresStore>[1] = { hooks };
  if (a.schema !== undefined) options.schema = a.schema;
  if (a.schemaVersion !== undefined) options.schemaVersion = a.schemaVersion;
  return openPostgresStore(a.url, options);
}
