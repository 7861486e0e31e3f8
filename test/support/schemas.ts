// The JSON Schemas the package exports (dist/schemas/, scripts/build-schemas.mjs, built by the
// global setup), compiled once per worker with ajv: what tests hold tether's documents against.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { ROOT } from './paths.js';

const Ajv = createRequire(import.meta.url)('ajv') as typeof import('ajv').default;
const ajv = new Ajv({ allErrors: true, strict: false });
const compiled = new Map<string, ReturnType<typeof ajv.compile>>();

/** The validator of `dist/schemas/<name>.json` (`report`, `event`, `ledger-record`). */
export function schema(name: string): ReturnType<typeof ajv.compile> {
  let validate = compiled.get(name);
  if (!validate) {
    validate = ajv.compile(JSON.parse(readFileSync(join(ROOT, 'dist/schemas', `${name}.json`), 'utf8')));
    compiled.set(name, validate);
  }
  return validate;
}

/** What schema `name` refuses in `value`: a line per error (path, message, params); [] when it holds. */
export function invalid(name: string, value: unknown): string[] {
  const validate = schema(name);
  return validate(value)
    ? []
    : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
}
