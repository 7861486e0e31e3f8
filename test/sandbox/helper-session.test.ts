// An agent session under the pushed helper (docs/sandbox.md, "An agent session under the pushed
// helper"): an env-cleared double fork — `env -i sh -c 'setsid sleep N &'`, which drops the tag
// and whose parent exits — is gone after every end of `sandbox.run` and `tether sandbox run`; on
// the env tag alone (helper: false) it survives. Where the helper cannot be had (a read-only
// /tmp) the session runs on the env tag alone and its report says why. Ground truth: the host's
// /proc — the double fork's host pid and start time, found by its unique cmdline in the
// container's PID namespace.
import { execFileSync, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { commandChannel } from '../../src/sandbox/channel.js';
import { HELPER_BLIND_SPOT, HELPER_CGROUP_BLIND_SPOT } from '../../src/sandbox/session-helper.js';
import { END_LINE_BLIND_SPOT } from '../../src/sandbox/sweep-output.js';
import { ENV_TAG_BLIND_SPOT, type SweepReport } from '../../src/sweep/report.js';
import { ROOT } from '../support/paths.js';
import { cmdlineOf, ppidOf, readStat } from '../support/proc.js';
import { missing } from '../support/tools.js';
import {
  AS_NOBODY,
  aliveOnHost,
  type Container,
  doubleForked,
  SHELLS,
  sleep,
  startContainer,
  taggedOnHost,
} from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
  freshTmp('');
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };

// A fresh tmpfs on the container's /tmp, in its own mount namespace (the host's /tmp is never
// touched): the helper is pushed there.
function freshTmp(options: string): void {
  execFileSync(
    'nsenter',
    [
      '-t',
      String(box.init),
      '-m',
      'mount',
      '-t',
      'tmpfs',
      '-o',
      `mode=1777,size=16m${options}`,
      'tether-hs',
      '/tmp',
    ],
    { timeout: 10_000 },
  );
}

// A unique duration per test, so that the double fork's cmdline names it alone.
let next = 7100 + Math.floor(Math.random() * 800);

// The command: an env-cleared double fork (no tag: env -i; its parent sh exits at once), then `tail`.
function doubleFork(s: number, tail: string): string[] {
  return [
    'sh',
    '-c',
    `env -i /bin/sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'; echo ready; ${tail}`,
  ];
}

interface Seen {
  pid: number;
  startTime: number;
}

// Gone by its identity, polled for a moment (its last KILL may still be on its way).
async function expectGone(seen: Seen, what: string): Promise<void> {
  for (let i = 0; i < 100 && aliveOnHost(seen); i++) await sleep(20);
  expect(aliveOnHost(seen), `the env-cleared double fork (host pid ${seen.pid}) survived ${what}`).toBe(
    false,
  );
}

// The test's own double fork, if it survived: KILLed by its identity (this test started it).
function killOwn(seen: Seen | undefined): void {
  if (!seen || !aliveOnHost(seen)) return;
  const stat = readStat(seen.pid);
  if (stat?.startTime === seen.startTime) process.kill(seen.pid, 'SIGKILL');
}

async function cleanup(tag: string): Promise<void> {
  if (taggedOnHost(tag).length) await sandbox.sweep(box.channel, tag, SWEEP);
}

function underHelper(report: SweepReport | undefined): void {
  // Narrowed to the helpers' subtrees, and to their cgroups too where the commands had one.
  const narrowed = report?.layers.includes('cgroup') ? HELPER_CGROUP_BLIND_SPOT : HELPER_BLIND_SPOT;
  expect(report?.blindSpots).toContain(narrowed);
  expect(report?.blindSpots).not.toContain(ENV_TAG_BLIND_SPOT);
  expect(report?.notes.join('\n')).toContain('the commands ran under the helper /tmp/.tether/helper-');
  // The helper is the session's machinery, not one of its leftovers.
  const helpers = report?.stopped.filter(
    (p) => p.cmdline.startsWith('/tmp/.tether/helper-') || /^\/proc\/\d+\/fd\/9 /.test(p.cmdline),
  );
  expect(helpers).toEqual([]);
}

describe('sandbox.run under the pushed helper', () => {
  it('on the env tag alone (the old way) the env-cleared double fork survives the session', async () => {
    const tag = createTag();
    const s = next++;
    let seen: Seen | undefined;
    try {
      const r = await sandbox.run(box.channel, doubleFork(s, 'true'), { tag, sweep: SWEEP, helper: false });
      seen = await doubleForked(box, s);
      expect(r.exitCode).toBe(0);
      await sleep(300);
      expect(aliveOnHost(seen), 'premise broken: the double fork ended without the helper').toBe(true);
      expect(r.report.blindSpots).toContain(ENV_TAG_BLIND_SPOT);
    } finally {
      killOwn(seen);
      await cleanup(tag.name);
    }
  });

  it('a clean exit: the env-cleared double fork is gone', async () => {
    const tag = createTag();
    const s = next++;
    const watch = doubleForked(box, s);
    try {
      const call = sandbox.run(box.channel, doubleFork(s, 'sleep 0.5'), { tag, sweep: SWEEP, helper: true });
      const seen = await watch;
      // Premise: reparented to the helper, not to the container's init.
      const parent = cmdlineOf(ppidOf(seen.pid));
      // (run from its pinned inode, which the wrapper hashed: /proc/WRAPPER/fd/9)
      expect(parent, 'the double fork is not the helper’s child').toMatch(
        /^\/proc\/\d+\/fd\/9 --wrap --name \/tmp\/\.tether\/helper-[0-9a-f]{64} --grace \d+ --kill-after \d+ (?:--cgroup \S+\/tether-helper\.[0-9a-f]{32}\.\d+\.\d+ )?-- /,
      );
      const r = await call;
      expect([r.exitCode, r.ok]).toEqual([0, true]);
      // The end line is the helper's: it rests on no shell.
      expect(r.blindSpots).toEqual([]);
      await expectGone(seen, 'a clean exit');
      expect(r.report.stopped.map((p) => p.cmdline)).toContain(`sleep ${s}`);
      underHelper(r.report);
      expect(taggedOnHost(tag.name)).toEqual([]);
    } finally {
      killOwn(await watch.catch(() => undefined));
      await cleanup(tag.name);
    }
  });

  it('a failure: the status is the command’s, the double fork is gone', async () => {
    const tag = createTag();
    const s = next++;
    const watch = doubleForked(box, s);
    try {
      const r = await sandbox.run(box.channel, doubleFork(s, 'sleep 0.5; exit 3'), {
        tag,
        sweep: SWEEP,
        helper: true,
        reject: false,
      });
      const seen = await watch;
      expect([r.exitCode, r.failed]).toEqual([3, true]);
      await expectGone(seen, 'a failure');
      underHelper(r.report);
    } finally {
      killOwn(await watch.catch(() => undefined));
      await cleanup(tag.name);
    }
  });

  it('a script over 100 KB: the helper is its subreaper, the wrapper shell proves its end and the result says so', async () => {
    const tag = createTag();
    const s = next++;
    const watch = doubleForked(box, s);
    try {
      const script = `env -i /bin/sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'\nsleep 0.5\necho done\nexit 5\n#${'x'.repeat(110 * 1024)}\n`;
      const call = sandbox.run(box.channel, ['sh'], {
        tag,
        sweep: SWEEP,
        helper: true,
        reject: false,
        script,
      });
      const seen = await watch;
      // Premise, while the script runs: reparented to the helper (run from its pinned inode).
      const parent = cmdlineOf(ppidOf(seen.pid));
      const r = await call;
      expect(parent, `the double fork is not the helper’s child (stderr: ${r.stderr})`).toMatch(
        /^\/proc\/\d+\/fd\/9 --name /,
      );
      expect([r.exitCode, r.stdout]).toEqual([5, 'done\n']);
      expect(r.blindSpots).toContain(END_LINE_BLIND_SPOT);
      await expectGone(seen, 'a script under the helper');
      underHelper(r.report);
    } finally {
      killOwn(await watch.catch(() => undefined));
      await cleanup(tag.name);
    }
  });

  it("the caller's abort: CANCELLED, 143, the double fork is gone", async () => {
    const tag = createTag();
    const s = next++;
    const watch = doubleForked(box, s);
    try {
      const abort = new AbortController();
      const call = sandbox
        .run(box.channel, doubleFork(s, 'sleep 60'), {
          tag,
          sweep: SWEEP,
          helper: true,
          signal: abort.signal,
        })
        .catch((e: Error) => e);
      const seen = await Promise.race([
        watch,
        call.then((e) => {
          throw new Error(`premise broken: the run ended before its double fork was seen: ${String(e)}`);
        }),
      ]);
      abort.abort();
      const error = (await call) as Error & { code?: string; exitCode?: number; report?: SweepReport };
      expect(error.code, error.message).toBe('CANCELLED');
      expect(error.exitCode).toBe(143);
      await expectGone(seen, 'an abort');
      underHelper(error.report);
    } finally {
      killOwn(await watch.catch(() => undefined));
      await cleanup(tag.name);
    }
  });

  it('a timeout: TIMED_OUT, the double fork is gone', async () => {
    const tag = createTag();
    const s = next++;
    const watch = doubleForked(box, s);
    try {
      const error = (await sandbox
        .run(box.channel, doubleFork(s, 'sleep 60'), { tag, sweep: SWEEP, helper: true, timeout: 1500 })
        .catch((e: Error) => e)) as Error & { code?: string; report?: SweepReport };
      const seen = await watch;
      expect(error.code, error.message).toBe('TIMED_OUT');
      await expectGone(seen, 'a timeout');
      underHelper(error.report);
    } finally {
      killOwn(await watch.catch(() => undefined));
      await cleanup(tag.name);
    }
  });
});

// The helper is non-dumpable while it holds the nonce (native/helper.c, --wrap): for a process of
// its uid without CAP_SYS_PTRACE its memory is closed, and so, for a uid other than root, is its
// environ (its /proc files then belong to root) — the sweep cannot find it as a carrier. It is
// found as the wrapper's child while the command runs, and it is dumpable again once its end
// line is written. Two users, as a container's commands run: root without CAP_SYS_PTRACE
// (Docker's and Kubernetes' default capability sets) and uid 65534; the second pushes its own
// helper (the directory must be its own), so each starts without /tmp/.tether.
for (const [who, user] of [
  [
    'root without CAP_SYS_PTRACE',
    ['setpriv', '--bounding-set', '-sys_ptrace', '--inh-caps', '-sys_ptrace', '--'],
  ],
  ['uid 65534', AS_NOBODY],
] as const) {
  describe(`sandbox.run under the pushed helper, as ${who}`, () => {
    const dropped = () => commandChannel([...box.prefix, ...user]);
    const noHelperDir = () =>
      rmSync(join('/proc', String(box.init), 'root/tmp/.tether'), { recursive: true, force: true });
    beforeAll(noHelperDir);
    afterAll(noHelperDir);
    it('a clean exit: the env-cleared double fork is gone', async () => {
      const tag = createTag();
      const s = next++;
      const watch = doubleForked(box, s);
      try {
        const r = await sandbox.run(dropped(), doubleFork(s, 'sleep 0.5'), {
          tag,
          sweep: SWEEP,
          helper: true,
        });
        const seen = await watch;
        expect([r.exitCode, r.ok, r.blindSpots]).toEqual([0, true, []]);
        await expectGone(seen, `a clean exit as ${who}`);
        underHelper(r.report);
      } finally {
        killOwn(await watch.catch(() => undefined));
        await cleanup(tag.name);
      }
    });

    it("the caller's abort while the command runs: the env-cleared double fork is gone", async () => {
      const tag = createTag();
      const s = next++;
      const watch = doubleForked(box, s);
      try {
        const abort = new AbortController();
        const call = sandbox
          .run(dropped(), doubleFork(s, 'sleep 60'), {
            tag,
            sweep: SWEEP,
            helper: true,
            signal: abort.signal,
          })
          .catch((e: Error) => e);
        const seen = await watch;
        abort.abort();
        const error = (await call) as Error & { code?: string; report?: SweepReport };
        expect(error.code, error.message).toBe('CANCELLED');
        await expectGone(seen, `an abort as ${who}`);
        underHelper(error.report);
      } finally {
        killOwn(await watch.catch(() => undefined));
        await cleanup(tag.name);
      }
    });
  });
}

// The wrapper's helper mode under each shell it runs in: pinned, hashed twice, the helper's lines.
describe('the helper holds the nonce, under each shell', () => {
  for (const [name, shell] of SHELLS) {
    const noShell = missing(shell[0] as string);
    it.skipIf(noShell !== '')(
      `${name}: stdin after the nonce, the status and the end line are the helper's${noShell ? ` (skipped: ${noShell})` : ''}`,
      async () => {
        const tag = createTag();
        try {
          const r = await sandbox.run(box.channel, ['sh', '-c', 'cat; printf tail; exit 3'], {
            tag,
            shell,
            sweep: SWEEP,
            helper: true,
            reject: false,
            input: 'from stdin\n',
          });
          expect([r.exitCode, r.stdout, r.blindSpots], r.stderr).toEqual([3, 'from stdin\ntail', []]);
          underHelper(r.report);
        } finally {
          await cleanup(tag.name);
        }
      },
    );
  }
});

const TETHER = join(ROOT, 'bin/tether.cjs');

describe('tether sandbox run under the pushed helper', () => {
  it('SIGTERM to tether: 143, the env-cleared double fork is gone', async () => {
    const tag = createTag();
    const s = next++;
    const watch = doubleForked(box, s);
    try {
      const child = spawn(
        process.execPath,
        [
          TETHER,
          'sandbox',
          'run',
          '--via',
          box.prefix.join(' '),
          '--tag',
          tag.name,
          '-k',
          '1s',
          '--kill-budget',
          '1s',
          '--json',
          '--',
          ...doubleFork(s, 'sleep 60'),
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let stderr = '';
      child.stderr?.on('data', (d) => (stderr += d));
      const closed = new Promise<number | null>((r) => child.on('close', (status) => r(status)));
      const timer = setTimeout(() => child.kill('SIGKILL'), 40_000);
      const seen = await watch;
      child.kill('SIGTERM'); // the CLI this test started
      const status = await closed;
      clearTimeout(timer);
      expect(status, stderr).toBe(143);
      await expectGone(seen, 'SIGTERM to tether');
      const end = JSON.parse(stderr.trim().split('\n').at(-1) as string) as { report: SweepReport };
      underHelper(end.report);
      expect(taggedOnHost(tag.name)).toEqual([]);
    } finally {
      killOwn(await watch.catch(() => undefined));
      await cleanup(tag.name);
    }
  });
});

describe('a container whose /tmp is read-only', () => {
  it('the helper cannot be had: the env tag alone, and the report says why', async () => {
    freshTmp(',ro');
    const tag = createTag();
    const s = next++;
    let seen: Seen | undefined;
    try {
      // A channel no session has used, as a new process's: the earlier tests' sessions through
      // box.channel know the helper from a /tmp now hidden (session-helper.ts, knownHelper).
      const channel = commandChannel(box.prefix);
      const r = await sandbox.run(channel, doubleFork(s, 'true'), { tag, sweep: SWEEP, helper: true });
      seen = await doubleForked(box, s);
      expect(r.exitCode).toBe(0);
      expect(r.report.blindSpots).toContain(ENV_TAG_BLIND_SPOT);
      const said = r.report.notes.join('\n');
      expect(said).toContain('is mounted read-only');
      expect(said).toContain('the session runs on the env tag alone');
      // As on the env tag alone: the double fork runs on.
      expect(aliveOnHost(seen)).toBe(true);
    } finally {
      killOwn(seen);
      await cleanup(tag.name);
    }
  });
});
