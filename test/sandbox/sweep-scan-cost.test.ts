// The sweep program's scan (programs/sweep.sh, scan) takes a session's descendants from one walk
// up each process's parents per scan, no longer a pass over the snapshot per process found (the
// first scan of a session of 1000 took 37-76 s: docs/benchmarks.md §13, the sweep program on a
// deep chain). What it takes, and in what order, is the passes' it replaced. Here only the
// chain's top carries the tag: every level below is an untagged descendant with a lower pid than
// its parent (ns_last_pid set before each fork; its `sleep 36` too), so that passes in /proc's
// order would each take one level — the scan must find all of them, each child with its parent's
// pid, and the round must TERM each shell before its child (no next step runs). Correctness
// only, never a time.
import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { testDir } from '../support/temp.js';
import { missing } from '../support/tools.js';
import { type Container, SHELLS, sleep, sleepersIn, startContainer } from './container.js';

const DEPTH = 40;

let box: Container;
let dir: string;
beforeAll(async () => {
  box = await startContainer(240);
  dir = testDir('tether-sweep-scan-');
});
afterAll(async () => {
  await box?.stop();
});

// `sh CHAIN N` (the tag only at the top) starts `sh CHAIN N-1` without the tag and waits for
// it, then writes N to STEP; every level also starts an untagged `sleep 36` after its child, and
// `sh CHAIN 0` is `sleep 35`. Each child's pid is below its parent's (20000 + N*10 and up).
// Resolves once the leaf runs.
async function startChain(tag: string, step: string): Promise<void> {
  const chain = join(dir, `chain-${tag}`);
  writeFileSync(
    chain,
    [
      'n=$1',
      `if [ "$n" -gt 0 ]; then echo $((20000 + n * 10)) > /proc/sys/kernel/ns_last_pid; env -u ${tag} sh ${chain} $((n - 1)) </dev/null >/dev/null 2>&1 & c=$!; env -u ${tag} sleep 36 </dev/null >/dev/null 2>&1 & wait $c; echo "$n" >> ${step}; else exec env -u ${tag} sleep 35; fi`,
      '',
    ].join('\n'),
  );
  const script = [
    `echo ${20000 + (DEPTH + 1) * 10} > /proc/sys/kernel/ns_last_pid`,
    `env ${tag}=1 sh ${chain} ${DEPTH} </dev/null >/dev/null 2>&1 &`,
  ].join('\n');
  execFileSync(box.prefix[0] as string, [...box.prefix.slice(1), 'sh', '-c', script], { stdio: 'ignore' });
  for (const until = performance.now() + 20_000; performance.now() < until; await sleep(50)) {
    if (sleepersIn(box, 35).length === 1 && sleepersIn(box, 36).length === DEPTH) return;
  }
  throw new Error(`premise broken: the chain of ${DEPTH + 1} did not start`);
}

for (const [name, shell] of SHELLS) {
  const noShell = missing(shell[0] as string);
  describe.skipIf(noShell !== '')(
    `the sweep program's scan under ${name}${noShell ? ` (skipped: ${noShell})` : ''}`,
    () => {
      it(`takes every untagged descendant of a chain ${DEPTH} deep, each child below its parent's pid`, async () => {
        const tag = createTag();
        const step = join(dir, `step-${shell[0]}`);
        await startChain(tag.name, step);
        const report = await sandbox.sweep(box.channel, tag, { graceMs: 2000, killAfterMs: 1000, shell });
        await sleep(100); // a next step that did run has written its file by now
        const pids = new Set(report.stopped.map((p) => p.pid));
        const below = report.stopped.filter((p) => pids.has(p.ppid) && p.pid < p.ppid).length;
        expect(
          [report.ok, report.stopped.length, below, existsSync(step) ? 'STEP RAN' : ''],
          'every level and sleep found (each below its parent), all stopped, no next step run',
        ).toEqual([true, 2 * DEPTH + 1, 2 * DEPTH, '']);
        expect([sleepersIn(box, 35).length, sleepersIn(box, 36).length], 'survived the sweep').toEqual([
          0, 0,
        ]);
      }, 120_000);
    },
  );
}
