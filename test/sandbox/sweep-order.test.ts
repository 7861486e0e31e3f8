// The sweep program (programs/sweep.sh, round) TERMs a process before what it started by their
// parents — a generation at a time, as native/helper-sweep.c's round_ — not in the order it found
// them. Found order is /proc's, pid order for a fresh tree; once the pids wrap a child can have a
// lower pid than its parent, and a shell TERMed after its child ran its next step in between: a
// cancelled `build; deploy` could start `deploy`. Here the child gets the lower pid on purpose:
// inside the container (a fresh PID namespace) /proc/sys/kernel/ns_last_pid is set before each
// fork — the shell on 8000 and up, its `sleep` on 2000 and up, and between them, on 5000 and up,
// other processes of the session (so that in found order the shell's TERM comes several
// deliveries after its child's, time enough for it to run its next step). Ground truth: the
// shell's next step (`echo done > FILE`) never ran, under every shell the program runs under. The
// program that signalled in found order failed all four: the step ran in 11 of 12 sweeps.
// A chain DEPTH deep, each child of a lower pid than its parent, is all gone and no shell of it
// ran its next step: the program finds each member's generation in one walk up its parents (a
// pass per generation over every member held one round of dash 90 s on a chain of 300:
// docs/benchmarks.md); this asserts the order and the end, never a time.
import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { testDir } from '../support/temp.js';
import { missing } from '../support/tools.js';
import { type Container, nsPidOf, SHELLS, sleep, startContainer, taggedOnHost } from './container.js';

const TRIES = 3;
const OTHERS = 20;
const DEPTH = 120;

let box: Container;
let dir: string;
beforeAll(async () => {
  box = await startContainer(240);
  dir = testDir('tether-sweep-order-');
});
afterAll(async () => {
  await box?.stop();
});

// Starts, in the container, the session `tag`'s processes: OTHERS `sleep 31` on the pids after
// 4999, then `sh -c 'sleep 30; echo done > STEP'` on the pid after 7999, whose `sleep 30` goes
// on the pid after 1999. Resolves to the host pids of the shell and of its sleep once both run.
async function startTree(tag: string, step: string): Promise<{ shell: number; child: number }> {
  const script = [
    'echo 4999 > /proc/sys/kernel/ns_last_pid',
    `i=0; while [ $i -lt ${OTHERS} ]; do env ${tag}=1 sleep 31 </dev/null >/dev/null 2>&1 & i=$((i+1)); done`,
    'echo 7999 > /proc/sys/kernel/ns_last_pid',
    `env ${tag}=1 sh -c 'echo 1999 > /proc/sys/kernel/ns_last_pid; sleep 30; echo done > ${step}' </dev/null >/dev/null 2>&1 &`,
  ].join('\n');
  execFileSync(box.prefix[0] as string, [...box.prefix.slice(1), 'sh', '-c', script], { stdio: 'ignore' });
  for (const until = performance.now() + 10_000; performance.now() < until; await sleep(20)) {
    const tagged = taggedOnHost(tag);
    const shell = tagged.find((p) => p.cmdline.startsWith('sh -c'));
    const child = tagged.find((p) => p.cmdline === 'sleep 30');
    if (shell && child && tagged.length === OTHERS + 2) return { shell: shell.pid, child: child.pid };
  }
  throw new Error(`premise broken: the session's ${OTHERS + 2} processes did not start`);
}

// Starts, in the container, the session `tag`'s chain DEPTH deep: `sh CHAIN N` starts `sh CHAIN
// N-1` and waits for it, then writes N to STEP (its next step); `sh CHAIN 0` is `sleep 32`. Each
// level sets ns_last_pid first, so that every child has a lower pid than its parent (12000 + N*10
// and up): found order is the deepest first. Resolves once all DEPTH + 1 run.
async function startChain(tag: string, step: string): Promise<void> {
  const chain = join(dir, `chain-${tag}`);
  writeFileSync(
    chain,
    [
      'n=$1',
      `if [ "$n" -gt 0 ]; then echo $((12000 + n * 10)) > /proc/sys/kernel/ns_last_pid; sh ${chain} $((n - 1)) </dev/null >/dev/null 2>&1 & wait; echo "$n" >> ${step}; else exec sleep 32; fi`,
      '',
    ].join('\n'),
  );
  const script = [
    `echo ${12000 + (DEPTH + 1) * 10} > /proc/sys/kernel/ns_last_pid`,
    `env ${tag}=1 sh ${chain} ${DEPTH} </dev/null >/dev/null 2>&1 &`,
  ].join('\n');
  execFileSync(box.prefix[0] as string, [...box.prefix.slice(1), 'sh', '-c', script], { stdio: 'ignore' });
  for (const until = performance.now() + 20_000; performance.now() < until; await sleep(50)) {
    const tagged = taggedOnHost(tag);
    if (tagged.length === DEPTH + 1 && tagged.some((p) => p.cmdline === 'sleep 32')) return;
  }
  throw new Error(`premise broken: the session's chain of ${DEPTH + 1} did not start`);
}

for (const [name, shell] of SHELLS) {
  const noShell = missing(shell[0] as string);
  describe.skipIf(noShell !== '')(
    `the sweep program under ${name}${noShell ? ` (skipped: ${noShell})` : ''}`,
    () => {
      it(`TERMs a shell before its child of a lower pid: its next step never runs, ${TRIES} sweeps of ${TRIES}`, async () => {
        const seen: string[] = [];
        for (let i = 0; i < TRIES; i++) {
          const tag = createTag();
          const step = join(dir, `step-${shell[0]}-${i}`);
          const tree = await startTree(tag.name, step);
          // The premise, in the container's pids: the child's below every other member's, the
          // shell's above them all (4 digits each: /proc's order and pid order agree).
          const shellPid = nsPidOf(box.init, tree.shell) ?? 0;
          const childPid = nsPidOf(box.init, tree.child) ?? 0;
          expect(
            [childPid < 5000, shellPid >= 8000 && shellPid < 10000, childPid >= 2000],
            `premise broken: the child ${childPid}, the shell ${shellPid}`,
          ).toEqual([true, true, true]);
          const report = await sandbox.sweep(box.channel, tag, { graceMs: 2000, killAfterMs: 1000, shell });
          await sleep(100); // a next step that did run has written its file by now
          const child = report.stopped.find((p) => p.pid === childPid);
          expect(child?.ppid, 'premise broken: the report does not give the sleep as the shell child').toBe(
            shellPid,
          );
          expect(taggedOnHost(tag.name), 'survived the sweep').toEqual([]);
          seen.push(`${report.ok} ${report.stopped.length} ${existsSync(step) ? 'STEP RAN' : ''}`);
        }
        expect(
          seen,
          'every sweep: all stopped, the shell TERMed before its child, its next step never run',
        ).toEqual(Array.from({ length: TRIES }, () => `true ${OTHERS + 2} `));
      }, 120_000);
      it(`TERMs a chain ${DEPTH} deep each child of a lower pid than its parent: every one gone, no next step run`, async () => {
        const tag = createTag();
        const step = join(dir, `chain-step-${shell[0]}`);
        await startChain(tag.name, step);
        const report = await sandbox.sweep(box.channel, tag, { graceMs: 2000, killAfterMs: 1000, shell });
        await sleep(100); // a next step that did run has written its file by now
        // The premise, in the container's pids: each of the DEPTH children below its parent.
        const pids = new Set(report.stopped.map((p) => p.pid));
        const below = report.stopped.filter((p) => pids.has(p.ppid) && p.pid < p.ppid).length;
        expect(below, 'premise broken: not every child of the chain has a lower pid than its parent').toBe(
          DEPTH,
        );
        expect(taggedOnHost(tag.name), 'survived the sweep').toEqual([]);
        expect(
          [report.ok, report.stopped.length, existsSync(step) ? 'STEP RAN' : ''],
          'all stopped, each shell TERMed before its child, no next step run',
        ).toEqual([true, DEPTH + 1, '']);
      }, 120_000);
    },
  );
}
