// `tether/ledger`: the durable record of sessions, its stores and their conformance suite
// (docs/ledger.md). The public surface is this file's list, recorded in etc/tether-ledger.api.md (lint
// fails when it changes without that report): the ledger, the store interface and the two
// stores, the conformance suite, the record types, the transition rules and the supervisor's
// verdict. The stores' settings, error mappers, the channel key and the supervisor's identity are
// the modules' own; tests import them from their modules.
export {
  builtinStoreSpec,
  CONFORMANCE_CHECKS,
  type ConformanceOptions,
  type ConformanceResult,
  type MigrationSpec,
  runLedgerConformance,
} from './conformance.js';
export {
  type BeginOptions,
  Ledger,
  type LedgerOpenOptions,
  type LedgerOptions,
  type Settled,
  type SettleOptions,
} from './ledger.js';
export { openPostgresStore, PostgresStore, type PostgresStoreOptions } from './postgres.js';
export { openSqliteStore, SqliteStore, type SqliteStoreOptions } from './sqlite.js';
export type { StoreFactorySpec } from './store-module.js';
export { judgeSupervisor, supervisorGone } from './supervisor.js';
export { type LedgerTarget, resolveLedgerTarget } from './target.js';
export { type Decision, decide, isFinal, retryAllowed, type SessionEnd } from './transitions.js';
export * from './types.js';
