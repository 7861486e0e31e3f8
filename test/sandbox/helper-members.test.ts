// The session's helpers are members of every sweep tether runs for the session, by the identity
// their start lines gave (docs/sandbox.md, "The helper's proof"): for a uid other than root the
// helper and the wrapper's `--await` process are non-dumpable while the command runs, their
// environs unreadable, so the env tag alone finds neither — and a payload that cleared its own
// environment (`env -i sleep N`) carries no tag. Before, such a command still running at `end()`
// or at the caller's abort was found by no sweep and ran on. Ground truth: the sleep's host pid
// and start time, gone from the host's /proc.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { createTag, sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/channel.js';
import { createNonce } from '../../src/sandbox/completion.js';
import { pushHelper } from '../../src/sandbox/helper-push.js';
import { program } from '../../src/sandbox/programs.js';
import { sweepArgv } from '../../src/sandbox/sweep.js';
import { parseSweepOutput } from '../../src/sandbox/sweep-output.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { cmdlineOf, environOf, ppidOf, readStat } from '../support/proc.js';
import {
  AS_NOBODY,
  aliveOnHost,
  type Container,
  doubleForked,
  lossyChannel,
  privateTmp,
  sleep,
  startContainer,
  taggedOnHost,
} from './container.js';

let box: Container;
// The session's commands and sweeps run as uid 65534 (no capability): the helper's /proc files
// are root's while it is non-dumpable.
let nobody: ExecChannel;
beforeAll(async () => {
  box = await startContainer(300);
  // A private /tmp in the container's mount namespace: uid 65534 pushes its own helper there.
  privateTmp(box, 'tether-hm');
  nobody = commandChannel([...box.prefix, ...AS_NOBODY]);
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };

// A unique duration per test: the payload's cmdline names it alone.
let next = 9300 + Math.floor(Math.random() * 600);

interface Seen {
  pid: number;
  startTime: number;
  /** Its pid in the container. */
  inner: number;
}

// The pid in the container's PID namespace (the last of NSpid).
function innerPid(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('NSpid:'));
  return Number(line?.trim().split(/\s+/).at(-1));
}

// The payload as the host sees it: `sleep S` in the container's PID namespace. Polled.
async function payload(s: number): Promise<Seen> {
  const seen = await doubleForked(box, s);
  return { ...seen, inner: innerPid(seen.pid) };
}

// Whether uid 65534 in the container can read /proc/PID/environ (PID the container's).
function readableByNobody(inner: number): boolean {
  try {
    execFileSync(
      box.prefix[0] as string,
      [...box.prefix.slice(1), ...AS_NOBODY, 'sh', '-c', `cat /proc/${inner}/environ >/dev/null`],
      { stdio: 'ignore', timeout: 10_000 },
    );
    return true;
  } catch {
    return false;
  }
}

// The premise: nothing the env tag could find holds the payload. The payload carries no tag; its
// parent, the helper, and the helper's parent, the `--await` process, are the session's, carry the
// tag (read here as the host's root), and their environs are closed to uid 65534.
function premise(seen: Seen, tag: string): void {
  expect(environOf(seen.pid), 'the payload cleared its environment').not.toContain(tag);
  // Up to the helper, every ancestor env-cleared too (a payload's own shell).
  let helper = ppidOf(seen.pid);
  for (let i = 0; i < 4 && helper > 1 && !cmdlineOf(helper).includes('/fd/9 --wrap '); i++) {
    expect(environOf(helper), `${cmdlineOf(helper)}: below the helper, env-cleared`).not.toContain(tag);
    helper = ppidOf(helper);
  }
  const wrapper = ppidOf(helper);
  expect(cmdlineOf(helper)).toMatch(/^\/proc\/\d+\/fd\/9 --wrap /);
  expect(cmdlineOf(wrapper)).toMatch(/^\/proc\/\d+\/fd\/9 --await /);
  for (const pid of [helper, wrapper]) {
    expect(environOf(pid), `${cmdlineOf(pid)} carries the tag`).toContain(`${tag}=1`);
    expect(readableByNobody(innerPid(pid)), `${cmdlineOf(pid)}: its environ is closed to uid 65534`).toBe(
      false,
    );
  }
  expect(readableByNobody(seen.inner), "the payload's own environ is readable (and untagged)").toBe(true);
}

// Gone by its identity, polled for a moment (its last KILL may still be on its way).
async function expectGone(seen: Seen, what: string): Promise<void> {
  for (let i = 0; i < 100 && aliveOnHost(seen); i++) await sleep(20);
  expect(aliveOnHost(seen), `the env-cleared payload (host pid ${seen.pid}) survived ${what}`).toBe(false);
}

// The report names the payload in `stopped`, and not the session's machinery.
function stoppedIn(report: SweepReport | undefined, seen: Seen, s: number): void {
  const names = (report?.stopped ?? []).map((p) => `${p.pid} ${p.startTime} ${p.foundBy} ${p.cmdline}`);
  expect(names).toContain(`${seen.inner} ${seen.startTime} descendant sleep ${s}`);
  expect(names.filter((n) => /\/fd\/9 --(wrap|await) /.test(n))).toEqual([]);
}

// The test's own payload, if it survived: KILLed by its identity (this test started it).
function killOwn(seen: Seen | undefined): void {
  if (!seen || !aliveOnHost(seen)) return;
  if (readStat(seen.pid)?.startTime === seen.startTime) process.kill(seen.pid, 'SIGKILL');
}

// What the session left carrying its tag (the helper of a failed run): swept as root.
async function cleanup(tag: string): Promise<void> {
  if (taggedOnHost(tag).length) await sandbox.sweep(box.channel, tag, SWEEP);
}

describe('the helpers are members of every sweep of the session (uid 65534)', () => {
  it('a session whose `env -i sleep` still runs at end(): stopped, gone', async () => {
    const tag = createTag();
    const s = next++;
    let seen: Seen | undefined;
    try {
      const session = sandbox.session(nobody, { tag, sweep: SWEEP, helper: true });
      const command = session.spawn(['env', '-i', 'sleep', String(s)]);
      seen = await payload(s);
      premise(seen, tag.name);
      // The env tag alone: the public sweep finds nothing of it, and it runs on.
      const alone = await sandbox.sweep(nobody, tag, SWEEP);
      expect(alone.stopped.map((p) => p.cmdline)).toEqual([]);
      expect(aliveOnHost(seen), 'the env tag alone stopped the payload').toBe(true);
      const report = await session.end();
      await expectGone(seen, 'the session end');
      stoppedIn(report, seen, s);
      const result = await command;
      expect(result.failed).toBe(true);
    } finally {
      killOwn(seen);
      await cleanup(tag.name);
    }
  });

  it("sandbox.run's cancel while `env -i sleep` runs: stopped, gone", async () => {
    const tag = createTag();
    const s = next++;
    let seen: Seen | undefined;
    try {
      const abort = new AbortController();
      const call = sandbox
        .run(nobody, ['env', '-i', 'sleep', String(s)], {
          tag,
          sweep: SWEEP,
          helper: true,
          signal: abort.signal,
        })
        .catch((e: Error) => e);
      seen = await payload(s);
      premise(seen, tag.name);
      abort.abort();
      const error = (await call) as Error & { code?: string; report?: SweepReport };
      expect(error.code, error.message).toBe('CANCELLED');
      await expectGone(seen, 'the cancel');
      stoppedIn(error.report, seen, s);
    } finally {
      killOwn(seen);
      await cleanup(tag.name);
    }
  });
});

// sandbox.exec under the helper (`helper`, as sandbox.run sets it): the sweep its stop or its
// unknown end runs takes the helper its start line named as a member.
describe("sandbox.exec's own sweeps take the helper as a member (uid 65534)", () => {
  const helperPath = async (): Promise<string> => {
    const pushed = await pushHelper(nobody);
    if (!('path' in pushed)) throw new Error(`premise broken: no helper: ${pushed.unavailable}`);
    return pushed.path;
  };

  it("a cancel while `env -i sleep` runs: the stop's sweep stops it, gone", async () => {
    const tag = createTag();
    const s = next++;
    let seen: Seen | undefined;
    try {
      const helper = await helperPath();
      const abort = new AbortController();
      const call = sandbox
        .exec(nobody, ['env', '-i', 'sleep', String(s)], { tag, helper, sweep: SWEEP, signal: abort.signal })
        .catch((e: Error) => e);
      seen = await payload(s);
      premise(seen, tag.name);
      abort.abort();
      const result = (await call) as Error & { code?: string; report?: SweepReport };
      expect(result.code, result.message).toBe('CANCELLED');
      await expectGone(seen, "the cancel's sweep");
      const stopped = (result.report?.stopped ?? []).map(
        (p) => `${p.pid} ${p.startTime} ${p.foundBy} ${p.cmdline}`,
      );
      expect(stopped).toContain(`${seen.inner} ${seen.startTime} descendant sleep ${s}`);
    } finally {
      killOwn(seen);
      await cleanup(tag.name);
    }
  });

  it("a stream cut after the start line: the unknown end's sweep stops the `env -i sleep`, gone", async () => {
    const tag = createTag();
    const s = next++;
    let seen: Seen | undefined;
    try {
      const helper = await helperPath();
      // The stream is lost once `cut` came, after the payload started (env-cleared, with its shell).
      const cut = lossyChannel(nobody, { after: 'cut\n' });
      const call = sandbox
        .exec(cut, ['env', '-i', 'sh', '-c', `sleep ${s} & sleep 1; echo cut; wait`], {
          tag,
          helper,
          sweep: SWEEP,
        })
        .catch((e: Error) => e);
      seen = await payload(s);
      premise(seen, tag.name);
      const error = (await call) as Error & { code?: string; report?: SweepReport };
      expect(error.code, error.message).toBe('EXEC_STATUS_UNKNOWN');
      await expectGone(seen, "the unknown end's sweep");
      const stopped = (error.report?.stopped ?? []).map(
        (p) => `${p.pid} ${p.startTime} ${p.foundBy} ${p.cmdline}`,
      );
      expect(stopped).toContain(`${seen.inner} ${seen.startTime} descendant sleep ${s}`);
    } finally {
      killOwn(seen);
      await cleanup(tag.name);
    }
  });
});

const TAG = 'TETHER_SESSION_0123456789abcdef0123456789abcdef';
const NONCE = '0123456789abcdef0123456789abcdef';

describe('the helpers named as members: argv and records', () => {
  it('sweepArgv: `member:PID:START` for a member only, `PID:START` for a proving helper (a member too)', () => {
    const o = { graceMs: 1000, killAfterMs: 500, intervalMs: 50, shell: ['sh'] };
    const tail = (argv: string[]) => argv.slice(argv.indexOf('tether-sweep') + 5);
    const a = { pid: 40, startTime: 5000 };
    const b = { pid: 41, startTime: 5001 };
    const tag = createTag();
    expect(tail(sweepArgv(tag, o))).toEqual([]);
    expect(tail(sweepArgv(tag, o, { members: [a, b, a], proof: [b] }))).toEqual([
      'member:40:5000',
      '41:5001',
    ]);
    expect(tail(sweepArgv(tag, o, { proof: [a] }))).toEqual(['40:5000']);
    // What the program would refuse (and with it the whole sweep) is left out.
    const bad = [
      { pid: 1, startTime: 5 },
      { pid: 0, startTime: 5 },
      { pid: 40, startTime: 0 },
      { pid: 40.5, startTime: 5 },
      { pid: 40, startTime: Number.NaN },
    ];
    expect(tail(sweepArgv(tag, o, { members: bad, proof: bad }))).toEqual([]);
  });

  it('sweep.sh refuses a malformed helper word before anything else: usage, exit 2', () => {
    const words = [
      'member:1:5',
      'member:0:5',
      '1:5',
      '01:5',
      'member:012:5',
      'member:12:0',
      'member:12:05',
      'member:12:',
      'member::5',
      'member:12:5:6',
      'member:12',
      'helper:12:5',
      'member:-12:5',
      '12:5x',
      'member:12345678901:5',
      `member:12:${'9'.repeat(21)}`,
    ];
    for (const word of words) {
      const r = spawnSync('sh', ['-c', program('sweep'), 'tether-sweep', TAG, '100', '100', '10', word], {
        input: `${NONCE}\n`,
        encoding: 'utf8',
        timeout: 10_000,
      });
      expect([r.status, r.stdout], word).toEqual([2, `error usage helper ${word}\n`]);
    }
  });

  // The named identities are members on evidence a session member cannot forge past its own
  // reach (sweep.sh, named_ok; helper-sweep.c, named_ok): this program's uid, and an environ that
  // holds the tag or cannot be read. A start line forged with a copied nonce names any process.
  describe.each([
    ['sweep.sh', false],
    ['the helper’s --sweep', true],
  ])('%s and a named identity', (_name, byHelper) => {
    const helperFile = prebuiltCandidates(process.arch).find((p) => existsSync(p));
    const skip = byHelper && !helperFile ? ' (skipped: no prebuilt helper built here)' : '';
    // A process this test started, carrying no tag: its identity once it has exec'd.
    async function started(
      argv: string[],
    ): Promise<{ child: ReturnType<typeof spawn>; id: { pid: number; startTime: number } }> {
      const child = spawn(argv[0] as string, argv.slice(1), { stdio: 'ignore', env: {} });
      let stat = readStat(child.pid as number);
      for (
        let i = 0;
        i < 100 && (!stat || cmdlineOf(child.pid as number) !== argv.slice(argv.indexOf('--') + 1).join(' '));
        i++
      ) {
        await sleep(10);
        stat = readStat(child.pid as number);
      }
      return { child, id: { pid: child.pid as number, startTime: stat?.startTime as number } };
    }

    // One sweep naming `word`, as root or as uid 65534.
    function sweepNaming(word: string, asNobody: boolean) {
      const tag = createTag();
      const nonce = createNonce();
      const args = [tag.name, '1000', '500', '20', word];
      const argv = byHelper
        ? [helperFile as string, '--sweep', ...args]
        : ['sh', '-c', program('sweep'), 'tether-sweep', ...args];
      const as = asNobody ? AS_NOBODY : [];
      const r = spawnSync(
        as.length ? 'setpriv' : (argv[0] as string),
        [...as.slice(1), ...(as.length ? argv : argv.slice(1))],
        {
          input: `${nonce}\n`,
          encoding: 'utf8',
          timeout: 20_000,
        },
      );
      return parseSweepOutput(r.stdout, tag.name, nonce);
    }

    it.skipIf(skip)(
      `never takes a process whose environ reads without the tag, nor one of another uid${skip}`,
      async () => {
        const { child, id } = await started(['setpriv', '--', 'sleep', '60']);
        try {
          for (const [word, asNobody] of [
            [`member:${id.pid}:${id.startTime}`, false], // readable, no tag
            [`${id.pid}:${id.startTime}`, false],
            [`member:${id.pid}:${id.startTime}`, true], // root's, swept as 65534
          ] as const) {
            const r = sweepNaming(word, asNobody);
            expect(r.finished, word).toBe(true);
            expect(r.report.stopped, `${word}${asNobody ? ' as 65534' : ''}`).toEqual([]);
            expect(aliveOnHost(id)).toBe(true);
          }
        } finally {
          child.kill('SIGKILL');
        }
      },
    );

    it.skipIf(skip)(
      `takes a non-dumpable one of its uid (environ unreadable), \`given\`, and never another start time${skip}`,
      async () => {
        // Real uid 65534, effective 0: a process whose uids differ at its exec is non-dumpable, its
        // environ root's, unreadable to uid 65534 without CAP_SYS_PTRACE — as a helper's is.
        const { child, id } = await started([
          'setpriv',
          '--ruid',
          '65534',
          '--euid',
          '0',
          '--rgid',
          '65534',
          '--egid',
          '65534',
          '--clear-groups',
          '--',
          'sleep',
          '60',
        ]);
        try {
          // Another start time: not the process named, not signalled.
          const other = sweepNaming(`member:${id.pid}:${id.startTime + 1}`, true);
          expect(other.finished).toBe(true);
          expect(other.report.stopped).toEqual([]);
          expect(aliveOnHost(id)).toBe(true);
          const named = sweepNaming(`member:${id.pid}:${id.startTime}`, true);
          expect(named.finished).toBe(true);
          expect(named.report.stopped.map((p) => [p.pid, p.startTime, p.foundBy, p.endedBy])).toEqual([
            [id.pid, id.startTime, 'given', 'SIGTERM'],
          ]);
          expect(named.report.proof).toBe('two-empty-scans');
          for (let i = 0; i < 100 && aliveOnHost(id); i++) await sleep(10);
          expect(aliveOnHost(id)).toBe(false);
        } finally {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        }
      },
    );
  });

  it('parseSweepOutput reads `found … given -` (and `cgroup`); any other way of finding is malformed', () => {
    const answer = (by: string) =>
      [
        `tether-sweep 2 begin ${TAG}`,
        'reader grep-z',
        `found 40 5000 1 65534 ${by} -`,
        'comm 40 5000 helper',
        'cmdline 40 5000 /proc/39/fd/9 --wrap --name /tmp/.tether/helper-x -- setsid sleep 9',
        'signal 40 5000 TERM',
        'phase TERM 0 10 2 two-empty-scans',
        'end 40 5000 gone',
        `done ${TAG} 2 10 1 8 ${NONCE}`,
        '',
      ].join('\n');
    const given = parseSweepOutput(answer('given'), TAG, NONCE);
    expect([given.finished, given.report.ok]).toEqual([true, true]);
    expect(given.report.stopped.map((p) => [p.pid, p.foundBy, p.uid, p.endedBy])).toEqual([
      [40, 'given', 65534, 'SIGTERM'],
    ]);
    // A helper's cgroup's members (cgroup:DIR, test/sandbox/cgroup-members.test.ts).
    const cgroup = parseSweepOutput(answer('cgroup'), TAG, NONCE);
    expect(cgroup.report.stopped.map((p) => [p.pid, p.foundBy])).toEqual([[40, 'cgroup']]);
    // The layer that found it is named (it was not: layers said env-tag, sandbox).
    expect(cgroup.report.layers).toEqual(['env-tag', 'sandbox', 'cgroup']);
    expect(given.report.layers).toEqual(['env-tag', 'sandbox']);
    for (const by of ['helper', 'subreaper', 'Cgroup', 'Given', '']) {
      const p = parseSweepOutput(answer(by), TAG, NONCE);
      expect([by, p.finished, p.report.stopped]).toEqual([by, false, []]);
    }
  });
});
