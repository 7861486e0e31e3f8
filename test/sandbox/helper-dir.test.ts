// The helper's directory when another uid made `/tmp/.tether` first (src/sandbox/helper-push.ts,
// docs/sandbox.md "The pushed helper"): /tmp is world-writable, so any user of the container can
// make that name before the session's uid does. The push then goes to the uid's own
// `/tmp/.tether-<uid>`, and the session still runs under the helper: an env-cleared double fork
// is gone after `sandbox.run`, whose report's notes say where the helper is, and why. That per-uid name also made by another uid is `unsafe-dir`, both
// paths named; a `dir` the caller gave is never replaced. The other uid is uid 65534, its
// directories made inside the container (`setpriv`, as test/sandbox/forgers.test.ts runs it);
// ground truth is read from the host, through /proc/<init>/root and the host's /proc.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { createTag, sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/channel.js';
import { type HelperPush, type HelperPushed, pushHelper } from '../../src/sandbox/helper-push.js';
import { missing, tool } from '../support/tools.js';
import {
  AS_NOBODY,
  aliveOnHost,
  type Container,
  doubleForked,
  SHELLS,
  sleep,
  startBusyboxContainer,
  startContainer,
  taggedOnHost,
} from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const expected = local ? createHash('sha256').update(readFileSync(local)).digest('hex') : '';
const SWEEP = { graceMs: 1000, killAfterMs: 1000 };

// A channel that counts its execs, and the writer's among them (its program is named tether-write).
function counting(inner: ExecChannel): ExecChannel & { execs: () => number; writes: () => number } {
  let execs = 0;
  let writes = 0;
  return {
    describe: inner.describe,
    execs: () => execs,
    writes: () => writes,
    exec(argv) {
      execs++;
      if (argv.includes('tether-write')) writes++;
      return inner.exec(argv);
    },
  };
}

function pushed(r: HelperPush, what: string): HelperPushed {
  if ('unavailable' in r) throw new Error(`${what}: no helper pushed: ${r.unavailable}`);
  return r;
}

describe.skipIf(!local)(
  `another uid's /tmp/.tether${local ? '' : ' (skipped: no prebuilt helper built here)'}`,
  () => {
    let box: Container;
    beforeAll(async () => {
      box = await startContainer(240);
    });
    afterAll(async () => {
      await box?.stop();
    });

    const onHost = (path: string) => `/proc/${box.init}/root${path}`;
    // `argv` run in the container (as root, or as uid 65534 after AS_NOBODY).
    const inBox = (...argv: string[]) =>
      execFileSync('nsenter', ['-t', String(box.init), '-a', ...argv], { encoding: 'utf8', timeout: 10_000 });
    // A fresh tmpfs on the container's /tmp (stacked over the last): the host's /tmp is never touched.
    const freshTmp = () =>
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
          'mode=1777,size=16m',
          'tether-dir',
          '/tmp',
        ],
        { timeout: 10_000 },
      );
    // `path` made by uid 65534 in the container, 0755 (its mkdir's default under umask 022).
    const madeBy65534 = (path: string) => {
      inBox(...AS_NOBODY, 'sh', '-c', `umask 022 && mkdir ${path}`);
      expect(lstatSync(onHost(path)).uid, `premise broken: ${path} is not uid 65534's`).toBe(65534);
    };

    it('the push lands in /tmp/.tether-<uid>, the note says why; reused with one exec; the other uid’s directory is left alone', async () => {
      freshTmp();
      madeBy65534('/tmp/.tether');
      const channel = counting(box.channel);
      const first = pushed(await pushHelper(channel), 'the push beside another uid’s /tmp/.tether');
      expect(first).toMatchObject({
        path: `/tmp/.tether-0/helper-${expected}`,
        sha256: expected,
        pushed: true,
      });
      expect(first.note).toBe(
        "the helper is in /tmp/.tether-0, this uid's own: /tmp/.tether belongs to another user",
      );
      const file = onHost(first.path);
      expect(createHash('sha256').update(readFileSync(file)).digest('hex')).toBe(expected);
      const dir = statSync(onHost('/tmp/.tether-0'));
      expect([dir.uid, dir.mode & 0o777]).toEqual([0, 0o700]);
      expect(readdirSync(onHost('/tmp/.tether')), 'something was written in the other uid’s dir').toEqual([]);
      expect(lstatSync(onHost('/tmp/.tether')).uid).toBe(65534);
      expect(channel.writes()).toBe(1);

      const before = channel.execs();
      const second = pushed(await pushHelper(channel), 'the reuse');
      expect(second).toMatchObject({ path: first.path, pushed: false, note: first.note });
      expect(channel.execs() - before, 'a reuse from the per-uid dir costs more than one exec').toBe(1);
    });

    // A shell this machine lacks is skipped, named (globalSetup probed it: test/support/tools.ts).
    for (const [name, shell] of SHELLS) {
      const noShell = missing(shell[0] as string);
      it.skipIf(noShell !== '')(
        `under ${name}: pushed to /tmp/.tether-0, then reused${noShell ? ` (skipped: ${noShell})` : ''}`,
        async () => {
          freshTmp();
          madeBy65534('/tmp/.tether');
          const channel = counting(box.channel);
          const first = pushed(await pushHelper(channel, { shell }), 'the first push');
          expect(first).toMatchObject({ path: `/tmp/.tether-0/helper-${expected}`, pushed: true });
          const second = pushed(await pushHelper(channel, { shell }), 'the second push');
          expect(second).toMatchObject({ path: first.path, pushed: false });
          expect(channel.writes()).toBe(1);
        },
      );
    }

    it('as uid 65534 beside root’s /tmp/.tether: in /tmp/.tether-65534', async () => {
      freshTmp();
      inBox('mkdir', '-m', '700', '/tmp/.tether');
      const as = commandChannel([...box.prefix, ...AS_NOBODY]);
      const r = pushed(await pushHelper(as), 'the push as uid 65534');
      expect(r).toMatchObject({ path: `/tmp/.tether-65534/helper-${expected}`, pushed: true });
      expect(statSync(onHost(r.path)).uid).toBe(65534);
    });

    it('a symbolic link at /tmp/.tether (another uid’s): the push lands in /tmp/.tether-0, nothing goes through the link', async () => {
      freshTmp();
      madeBy65534('/tmp/.elsewhere');
      inBox(...AS_NOBODY, 'ln', '-s', '/tmp/.elsewhere', '/tmp/.tether');
      const r = pushed(await pushHelper(box.channel), 'the push beside a link');
      expect(r.path).toBe(`/tmp/.tether-0/helper-${expected}`);
      expect(r.note).toMatch(/\/tmp\/\.tether is a symbolic link/);
      expect(readdirSync(onHost('/tmp/.elsewhere'))).toEqual([]);
    });

    it('sandbox.run under the helper: its command runs under the helper in /tmp/.tether-0 and an env -i double fork is gone', async () => {
      freshTmp();
      madeBy65534('/tmp/.tether');
      const tag = createTag();
      const s = 7900 + Math.floor(Math.random() * 90);
      const watch = doubleForked(box, s);
      try {
        const r = await sandbox.run(
          box.channel,
          ['sh', '-c', `env -i /bin/sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 0.5`],
          { tag, sweep: SWEEP, helper: true },
        );
        const seen = await watch;
        expect([r.exitCode, r.ok]).toEqual([0, true]);
        expect(r.report.notes.join('\n')).toContain(
          `the commands ran under the helper /tmp/.tether-0/helper-${expected} (pushed by this session`,
        );
        // The report says where the helper is, and why not in /tmp/.tether (pushHelper's note).
        expect(r.report.notes).toContain(
          "the helper is in /tmp/.tether-0, this uid's own: /tmp/.tether belongs to another user",
        );
        for (let i = 0; i < 100 && aliveOnHost(seen); i++) await sleep(20);
        expect(aliveOnHost(seen), `the env-cleared double fork (host pid ${seen.pid}) survived`).toBe(false);
        expect(r.report.stopped.map((p) => p.cmdline)).toContain(`sleep ${s}`);
        expect(taggedOnHost(tag.name)).toEqual([]);
      } finally {
        const seen = await watch.catch(() => undefined);
        if (seen && aliveOnHost(seen)) process.kill(seen.pid, 'SIGKILL');
        if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, SWEEP);
      }
    });

    it('/tmp/.tether-<uid> made by another uid too: unsafe-dir, both paths named, nothing written', async () => {
      freshTmp();
      madeBy65534('/tmp/.tether');
      madeBy65534('/tmp/.tether-0');
      const channel = counting(box.channel);
      const r = await pushHelper(channel);
      expect(r).toMatchObject({ code: 'unsafe-dir' });
      const said = 'unavailable' in r ? r.unavailable : '';
      expect(said).toMatch(/\/tmp\/\.tether belongs to another user/);
      expect(said).toMatch(/\/tmp\/\.tether-0 belongs to another user/);
      expect(said).toMatch(/the env tag alone$/);
      expect(channel.writes()).toBe(0);
      expect(readdirSync(onHost('/tmp/.tether-0'))).toEqual([]);
    });

    it('a dir option of another uid is refused as given, never replaced: unsafe-dir naming the option', async () => {
      freshTmp();
      madeBy65534('/tmp/.tether');
      const channel = counting(box.channel);
      const r = await pushHelper(channel, { dir: '/tmp/.tether' });
      expect(r).toMatchObject({ code: 'unsafe-dir' });
      expect('unavailable' in r && r.unavailable).toMatch(
        /the dir option \/tmp\/\.tether: \/tmp\/\.tether belongs to another user.*the env tag alone/,
      );
      expect(channel.writes()).toBe(0);
      expect(existsSync(onHost('/tmp/.tether-0')), 'the dir option was replaced').toBe(false);
    });
  },
);

const noBusybox = missing('busybox');
describe.skipIf(!local || noBusybox !== '')(
  `another uid's /tmp/.tether in a busybox-only container${noBusybox ? ` (skipped: ${noBusybox})` : ''}`,
  () => {
    it('the per-uid directory is found with busybox id and ls: pushed there, then reused', async () => {
      const box = await startBusyboxContainer(tool('busybox').path as string, 60);
      try {
        // Through the channel's own prefix, which enters the container's root (nsenter -a alone does not).
        const [bin, ...args] = box.prefix as [string, ...string[]];
        execFileSync(bin, [...args, 'sh', '-c', 'mkdir /tmp/.tether && chown 65534 /tmp/.tether'], {
          timeout: 10_000,
        });
        expect(statSync(`${box.root}/tmp/.tether`).uid, 'premise broken: not uid 65534’s').toBe(65534);
        const first = pushed(await pushHelper(box.channel), 'the first push');
        expect(first).toMatchObject({ path: `/tmp/.tether-0/helper-${expected}`, pushed: true });
        const second = pushed(await pushHelper(box.channel), 'the second push');
        expect(second.pushed).toBe(false);
      } finally {
        await box.stop();
      }
    });
  },
);
