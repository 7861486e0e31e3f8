#!/usr/bin/env node
// `npm run stress`: the long stress runs (docs/benchmarks.md, "Stress"), not part of `npm test`.
// Runs every stress/*.stress.js in turn, each in its own Node process; a run's own checks
// decide its exit status. `node stress/run.js NAME…` runs only those whose file name holds NAME.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const wanted = process.argv.slice(2);
const files = readdirSync(here)
  .filter((f) => f.endsWith('.stress.js'))
  .filter((f) => wanted.length === 0 || wanted.some((w) => f.includes(w)))
  .sort();
if (files.length === 0) {
  console.error(`stress: no stress/*.stress.js matches ${wanted.join(' ') || '(any)'}`);
  process.exit(2);
}
let failed = 0;
for (const file of files) {
  console.log(`\n== ${file}`);
  const started = performance.now();
  const r = spawnSync(process.execPath, ['--expose-gc', join(here, file)], { stdio: 'inherit' });
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  const status = r.status ?? `signal ${r.signal}`;
  console.log(`== ${file}: ${status === 0 ? 'passed' : `FAILED (${status})`} in ${seconds} s`);
  if (status !== 0) failed += 1;
}
console.log(`\nstress: ${files.length - failed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
