// The suite's long loops at their full count (test/support/full.ts): `npm test` runs a sample of
// each, TETHER_TEST_FULL=1 runs them all — every shape in 20 rounds, 200 pid-reuse trials a
// batch, 110 cut points, 300 clean ends, 400 random error graphs a property — with the same
// assertions. Exits with vitest's status.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const FILES = [
  'test/containment/shapes.test.ts',
  'test/sweep/pid-reuse.test.ts',
  'test/sandbox/cuts.test.ts',
  'test/containment/helper-faults.test.ts',
  'test/outcome/hostile.test.ts',
];
const r = spawnSync(join(root, 'node_modules/.bin/vitest'), ['run', ...FILES], {
  cwd: root,
  env: { ...process.env, TETHER_TEST_FULL: '1' },
  stdio: 'inherit',
});
if (r.error) console.error(`suite-full: vitest did not run: ${r.error.message}`);
process.exitCode = r.status ?? 1;
