// A process named with a newline (its comm, set by writing /proc/self/comm, or its argv) inside a
// real container, under every shell the sweep runs in (docs/sandbox.md, "The sweep program"): the
// session's sweep still ends complete, the tagged one is found and stopped, and an untagged one
// whose name mimics the rest of a stat line (`z) S PID `, a forged parent: one of the session's)
// is never taken for a member nor signalled. Ground truth: the host's /proc (pid + start time).
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { parseSweepOutput } from '../../src/sandbox/sweep-output.js';
import { readStat } from '../support/proc.js';
import { suiteResource } from '../support/suite-resource.js';
import { missing, tool } from '../support/tools.js';
import {
  aliveOnHost,
  type Container,
  SHELLS,
  sleep,
  startBusyboxContainer,
  startContainer,
  taggedOnHost,
} from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };

// A process's pid in the container (the last NSpid of its host status), or 0 once gone.
function containerPid(hostPid: number): number {
  try {
    const line = readFileSync(`/proc/${hostPid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('NSpid:'));
    return Number(line?.trim().split(/\s+/).at(-1) ?? 0);
  } catch {
    return 0;
  }
}

// Polls `find` every 20 ms for at most 10 s.
async function until<T>(find: () => T | undefined): Promise<T | undefined> {
  for (let i = 0; i < 500; i++) {
    const found = find();
    if (found !== undefined) return found;
    await sleep(20);
  }
  return undefined;
}

// The session's command: leaves (setsid) a sh that renames itself `a\nb` and loops on `sleep 1`,
// and a plain sh whose $0 (so its argv) is `x\ny`, waiting on `sleep 300`.
const LEAVING = [
  'sh',
  '-c',
  'setsid sh -c "$1" renamer </dev/null >/dev/null 2>&1 & setsid sh -c "sleep 300; :" "$(printf "x\\ny")" </dev/null >/dev/null 2>&1 &',
  'leaving',
  "printf 'a\\nb' >/proc/self/comm; while :; do sleep 1; done",
];

// A session under `shell` in `target`: its leftovers named with a newline are found and stopped, its
// sweep complete; the test's own bystander, untagged, forging a member as its parent, lives on.
async function oddNames(target: Container, shell: string[]): Promise<void> {
  const tag = createTag();
  let bystander: ChildProcess | undefined;
  let bystanderId: { pid: number; startTime: number } | undefined;
  try {
    const s = sandbox.session(target.channel, { tag, shell, sweep: SWEEP });
    const r = await s.spawn(LEAVING);
    expect([r.ok, r.error]).toEqual([true, undefined]);
    const renamed = await until(() => taggedOnHost(tag.name).find((p) => readStat(p.pid)?.comm === 'a\nb'));
    const argv = await until(() => taggedOnHost(tag.name).find((p) => p.cmdline.includes('x\ny')));
    expect(renamed, 'premise broken: no leftover renamed itself a\\nb').toBeDefined();
    expect(argv, 'premise broken: no leftover with x\\ny in its argv').toBeDefined();
    const member = containerPid(renamed?.pid as number);
    const argvPid = containerPid(argv?.pid as number);
    expect(member, 'premise broken: the leftover has no pid in the container').toBeGreaterThan(1);
    expect(argvPid, 'premise broken: the leftover has no pid in the container').toBeGreaterThan(1);

    // The bystander: started by the test, in the container, outside the session (no tag); its
    // name `z) S MEMBER \n` reads, up to its newline, as a stat line whose parent is a member.
    bystander = spawn(
      target.prefix[0] as string,
      [
        ...target.prefix.slice(1),
        'sh',
        '-c',
        'printf "z) S %s \\n" "$1" >/proc/self/comm; read x',
        'bystander',
        String(member),
      ],
      { stdio: ['pipe', 'ignore', 'ignore'] },
    );
    const nsenter = bystander.pid as number;
    bystanderId = await until(() => {
      let kids = '';
      try {
        kids = readFileSync(`/proc/${nsenter}/task/${nsenter}/children`, 'utf8').trim();
      } catch {
        return undefined;
      }
      const stat = kids ? readStat(kids.split(' ')[0] as string) : undefined;
      return stat?.comm.startsWith('z) S ') ? { pid: stat.pid, startTime: stat.startTime } : undefined;
    });
    expect(bystanderId, 'premise broken: the bystander did not rename itself').toBeDefined();
    expect(readStat(bystanderId?.pid as number)?.comm).toBe(`z) S ${member} \n`);

    const report = await s.end().catch((e: Error) => e);
    expect(report, `the sweep did not finish: ${(report as Error).message}`).not.toBeInstanceOf(Error);
    if (report instanceof Error) return;
    expect([report.complete, report.ok]).toEqual([true, true]);
    // The report's pids are the container's; start times are the same clock.
    const stopped = (pid: number, id?: { startTime: number }) =>
      report.stopped.find((p) => p.pid === pid && p.startTime === id?.startTime);
    expect(stopped(member, renamed)?.comm).toBe('a?b');
    expect(stopped(argvPid, argv)?.cmdline).toBe('sh -c sleep 300; : x?y');
    expect(report.stopped.map((p) => p.comm)).not.toContain(`z) S ${member} ?`);
    // Ground truth: both leftovers gone, nothing of the session left; the bystander alive.
    expect([renamed, argv].filter((p) => p && aliveOnHost(p))).toEqual([]);
    expect(taggedOnHost(tag.name)).toEqual([]);
    expect(
      aliveOnHost(bystanderId as { pid: number; startTime: number }),
      'the bystander was signalled',
    ).toBe(true);
    expect(readStat(bystanderId?.pid as number)?.state).not.toBe('T');
  } finally {
    // What the test started: the session's leftovers (its unique tag) and the bystander.
    for (const p of taggedOnHost(tag.name)) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    if (bystander) {
      const ended = new Promise((r) => bystander?.once('exit', r));
      bystander.stdin?.end();
      await Promise.race([ended, sleep(3000)]);
      if (bystanderId && aliveOnHost(bystanderId)) process.kill(bystanderId.pid, 'SIGKILL');
      bystander.kill('SIGKILL');
    }
  }
}

const TITLE =
  'a newline in a leftover name: found, stopped, the sweep complete; an untagged process forging a member as its parent lives on';

for (const [name, shell] of SHELLS) {
  const noShell = missing(shell[0] as string);
  describe.skipIf(noShell !== '')(`under ${name}${noShell ? ` (skipped: ${noShell})` : ''}`, () => {
    it(TITLE, () => oddNames(box, shell));
  });
}

// Every tool the sweep runs (printf, tr, grep, sleep) is then a busybox applet.
const noBusybox = missing('busybox');
describe.skipIf(noBusybox !== '')(
  `in a busybox-only container${noBusybox ? ` (skipped: ${noBusybox})` : ''}`,
  () => {
    const bb = suiteResource(() => startBusyboxContainer(tool('busybox').path as string, 120));
    it(TITLE, () => oddNames(bb, ['sh']));
  },
);

describe('the sweep-output parser', () => {
  it('refuses a comm or cmdline record holding a control byte: the program writes none', () => {
    const tag = createTag().name;
    const nonce = 'ab'.repeat(16);
    const output = (comm: string, cmdline = 'sleep 1') =>
      [
        `tether-sweep 2 begin ${tag}`,
        'reader grep-z',
        'found 7 100 1 0 carrier -',
        `comm 7 100 ${comm}`,
        `cmdline 7 100 ${cmdline}`,
        'end 7 100 gone',
        `done ${tag} 1 10 1 6 ${nonce}`,
        '',
      ].join('\n');
    const clean = parseSweepOutput(output('a?b'), tag, nonce);
    expect([clean.finished, clean.problems, clean.report.stopped[0]?.comm]).toEqual([true, [], 'a?b']);
    for (const byte of ['\r', '\x01', '\x1b', '\x7f', '\t', '\0']) {
      for (const p of [output(`a${byte}b`), output('a', `sleep${byte}1`)].map((o) =>
        parseSweepOutput(o, tag, nonce),
      ))
        expect([p.finished, p.report.complete, p.problems.length], JSON.stringify(byte)).toEqual([
          false,
          false,
          1,
        ]);
    }
  });
});
