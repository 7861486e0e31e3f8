// Opens the store a conformance spec names: the caller's own ES module, imported by its path.
// The one computed import under src/ (scripts/check-layers.mjs allows it in this file only): it
// loads a module outside tether, never a layer of tether.
import { pathToFileURL } from 'node:url';
import type { StoreHooks } from './store-errors.js';
import type { LedgerStore } from './types.js';

/**
 * Where every process of the conformance suite finds the store: an ES module (absolute path or
 * file: URL) exporting `export` (default `openStore`) as `(arg: string, hooks: StoreHooks) =>
 * Promise<LedgerStore>`. A function cannot cross into the writer processes; a module can.
 */
export interface StoreFactorySpec {
  module: string;
  export?: string;
  /** Given to the factory as it is (a path, a URL, JSON). */
  arg: string;
}

/** Imports the spec's module and opens its store with `hooks`. */
export async function openStoreModule(spec: StoreFactorySpec, hooks: StoreHooks = {}): Promise<LedgerStore> {
  const url = spec.module.startsWith('file:') ? spec.module : pathToFileURL(spec.module).href;
  const mod = (await import(url)) as Record<string, unknown>;
  const name = spec.export ?? 'openStore';
  const factory = mod[name];
  if (typeof factory !== 'function') throw new Error(`${spec.module} exports no function ${name}`);
  return (factory as (arg: string, hooks: StoreHooks) => Promise<LedgerStore>)(spec.arg, hooks);
}
