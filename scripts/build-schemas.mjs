#!/usr/bin/env node
// Generates the JSON Schemas (draft-07) of what tether writes for other programs to read, from
// the TypeScript types that write them (ts-json-schema-generator), into dist/schemas/: the
// package exports them as `tether/schemas/<name>.json` (docs/report.md, "Schemas").
//
//   report.json          a sweep report (SweepReport: --json, --report-file, the `swept` event)
//   event.json           one line of `tether run --events FILE` (RunEventLine)
//   ledger-record.json   one session as the ledger holds it (SessionRecord: `tether show --json`)
//
// Objects allow no property their type does not name (additionalProperties: false): a field
// added to a type without its schema being rebuilt fails the tests that validate against it.
// Outputs newer than every src/**/*.ts and this script are kept as they are.
import { mkdirSync, readdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist/schemas');

/** name → the type and the file that declares it. */
const SCHEMAS = {
  report: { type: 'SweepReport', path: 'src/sweep/report.ts' },
  event: { type: 'RunEventLine', path: 'src/cli/events.ts' },
  'ledger-record': { type: 'SessionRecord', path: 'src/ledger/types.ts' },
};

const mtime = (path) => {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
};
const sources = (dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
const newestInput = Math.max(
  mtime(fileURLToPath(import.meta.url)) ?? 0,
  mtime(join(root, 'tsconfig.json')) ?? 0,
  ...sources(join(root, 'src')).map((f) => mtime(f) ?? 0),
);
const outputs = Object.keys(SCHEMAS).map((name) => join(out, `${name}.json`));
if (outputs.every((f) => (mtime(f) ?? -1) > newestInput)) process.exit(0);

let createGenerator;
try {
  ({ createGenerator } = createRequire(import.meta.url)('ts-json-schema-generator'));
} catch (error) {
  console.error(
    `build-schemas: ts-json-schema-generator cannot be loaded (${error.code ?? error.message}): run npm ci (it is a devDependency)`,
  );
  process.exit(2);
}
mkdirSync(out, { recursive: true });
for (const [name, { type, path }] of Object.entries(SCHEMAS)) {
  const schema = createGenerator({
    path: join(root, path),
    tsconfig: join(root, 'tsconfig.json'),
    type,
    skipTypeCheck: true, // tsc has checked the types
    additionalProperties: false,
    jsDoc: 'extended',
  }).createSchema(type);
  schema.$id = `tether/schemas/${name}.json`;
  const file = join(out, `${name}.json`);
  writeFileSync(`${file}.tmp`, `${JSON.stringify(schema, null, 2)}\n`);
  renameSync(`${file}.tmp`, file);
}
