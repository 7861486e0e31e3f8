// `tether/ledger`: the durable record of sessions (docs/ledger.md).
export * from './ledger.js';
export * from './postgres.js';
export * from './sqlite.js';
export * from './store-errors.js';
export * from './supervisor.js';
export * from './target.js';
export * from './transitions.js';
export * from './types.js';
