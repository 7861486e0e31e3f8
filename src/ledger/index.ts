// `tether/ledger`: the durable record of sessions, its stores and their conformance suite
// (docs/ledger.md).
export * from './channel-key.js';
export * from './conformance.js';
export * from './ledger.js';
export * from './postgres.js';
export * from './sqlite.js';
export * from './store-errors.js';
export * from './store-module.js';
export * from './supervisor.js';
export * from './target.js';
export * from './transitions.js';
export * from './types.js';
