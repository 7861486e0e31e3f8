// The pid-reuse test at 1,000 trials (test/sweep/pid-reuse.test.ts runs 200): in a private PID
// namespace, a decoy takes each ended payload's pid, in the same clock tick in most trials, and
// must never be signalled. Prints the trials, the exact identity collisions and the wrong
// signals; exits non-zero on any wrong signal (or when too few trials collided to prove it).
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const TRIALS = 1000;
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const decoy = join(root, 'build/zoo-pid-decoy');
mkdirSync(join(root, 'build'), { recursive: true });
execFileSync('gcc', ['-O1', '-Wall', '-o', decoy, join(root, 'test/fixtures/c/pid-decoy.c')], {
  stdio: 'inherit',
});
const out = execFileSync(
  'unshare',
  [
    '--pid',
    '--fork',
    '--mount-proc',
    process.execPath,
    join(root, 'test/fixtures/node/pid-reuse-trials.mjs'),
    String(TRIALS),
    decoy,
  ],
  { encoding: 'utf8', timeout: 600_000 },
);
const result = JSON.parse(out.trim().split('\n').at(-1));
console.log(
  `pid-reuse: ${result.trials} trials in ${(result.ms / 1000).toFixed(1)} s, ${result.collisions} exact identity collisions (same pid and start time), ${result.wrong.length} wrong signals`,
);
for (const w of result.wrong.slice(0, 10)) console.log(`  wrong: ${JSON.stringify(w)}`);
if (result.collisions < TRIALS / 4) {
  console.log(`pid-reuse: premise broken: only ${result.collisions} collisions: the run proves little`);
  process.exitCode = 1;
}
if (result.wrong.length > 0) process.exitCode = 1;
