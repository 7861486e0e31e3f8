// The helper pushed once (src/sandbox/helper-push.ts), into real containers: a normal root and a
// busybox-only one. Ground truth is read from the host, through /proc/<init>/root: the file's
// bytes, its inode (a rename over it makes a new one) and mode. Each normal-root test gets a
// fresh tmpfs on the container's /tmp, mounted in its own mount namespace (the host's /tmp is
// never touched).
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MACHINE_ARCH, prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/channel.js';
import { type HelperPush, type HelperPushed, pushHelper } from '../../src/sandbox/helper-push.js';
import { missing, tool } from '../support/tools.js';
import { busyboxRoot, type Container, SHELLS, startContainer } from './container.js';

// This machine's prebuilt helper: what every push must put in place, byte for byte.
const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const expected = local ? createHash('sha256').update(readFileSync(local)).digest('hex') : '';

// A channel that counts the writer's execs (`sandbox.writeFile`'s program is named tether-write).
function counting(inner: ExecChannel): ExecChannel & { writes: () => number } {
  let writes = 0;
  return {
    describe: inner.describe,
    writes: () => writes,
    exec(argv) {
      if (argv.includes('tether-write')) writes++;
      return inner.exec(argv);
    },
  };
}

function pushed(r: HelperPush, what: string): HelperPushed {
  if ('unavailable' in r) throw new Error(`${what}: no helper pushed: ${r.unavailable}`);
  return r;
}

// The file the container sees at `path`, read from the host.
function onHost(box: Container, path: string): string {
  return `/proc/${box.init}/root${path}`;
}

function sha256Of(file: string): string {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

// A fresh tmpfs on the container's /tmp (stacked over the last), with `options` (ro, noexec…).
function freshTmp(box: Container, options = ''): void {
  const mount = (opts: string) =>
    execFileSync(
      'nsenter',
      ['-t', String(box.init), '-m', 'mount', '-t', 'tmpfs', '-o', opts, 'tether-push', '/tmp'],
      {
        timeout: 10_000,
      },
    );
  mount(`mode=1777,size=16m${options ? `,${options}` : ''}`);
}

describe.skipIf(!local)(
  `the helper pushed once${local ? '' : ' (skipped: no prebuilt helper built here)'}`,
  () => {
    let box: Container;
    beforeAll(async () => {
      box = await startContainer(180);
    });
    afterAll(async () => {
      await box?.stop();
    });

    it('is pushed once, then reused: the second call writes nothing and the file is the same inode', async () => {
      freshTmp(box);
      const channel = counting(box.channel);
      const first = pushed(await pushHelper(channel), 'the first push');
      expect(first).toMatchObject({ sha256: expected, pushed: true, replaced: false });
      expect(first.path).toBe(`/tmp/.tether/helper-${expected}`);
      expect(first.note, 'the default dir was not used').toBeUndefined();
      expect(MACHINE_ARCH[first.machine]).toBe(process.arch);
      const file = onHost(box, first.path);
      expect(sha256Of(file), 'the file in the container is not the helper').toBe(expected);
      expect(statSync(file).mode & 0o777).toBe(0o700);
      expect(statSync(onHost(box, '/tmp/.tether')).mode & 0o777).toBe(0o700);
      expect(channel.writes()).toBe(1);
      const before = statSync(file);

      const second = pushed(await pushHelper(channel), 'the second push');
      expect(second).toMatchObject({ path: first.path, sha256: expected, pushed: false, replaced: false });
      expect(channel.writes(), 'the second push wrote the helper again').toBe(1);
      const after = statSync(file);
      expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
    });

    // A shell this machine lacks is skipped, named (globalSetup probed it: test/support/tools.ts).
    for (const [name, shell] of SHELLS) {
      const noShell = missing(shell[0] as string);
      it.skipIf(noShell !== '')(
        `the check and the write run under ${name}: pushed, then reused${noShell ? ` (skipped: ${noShell})` : ''}`,
        async () => {
          freshTmp(box);
          const channel = counting(box.channel);
          const first = pushed(await pushHelper(channel, { shell }), 'the first push');
          expect(first).toMatchObject({ sha256: expected, pushed: true });
          const second = pushed(await pushHelper(channel, { shell }), 'the second push');
          expect(second.pushed).toBe(false);
          expect(channel.writes()).toBe(1);
          expect(sha256Of(onHost(box, first.path))).toBe(expected);
        },
      );
    }

    it('a corrupt cached helper is refused and replaced (renamed over), then checked again', async () => {
      freshTmp(box);
      const channel = counting(box.channel);
      const first = pushed(await pushHelper(channel), 'the first push');
      const file = onHost(box, first.path);
      const bytes = readFileSync(file);
      bytes[bytes.length >> 1] = (bytes[bytes.length >> 1] as number) ^ 0xff; // same size, one byte off
      writeFileSync(file, bytes);
      const corrupt = statSync(file).ino;
      expect(sha256Of(file), 'premise broken: the cached file is not corrupt').not.toBe(expected);

      const again = pushed(await pushHelper(channel), 'the push over a corrupt copy');
      expect(again).toMatchObject({ path: first.path, sha256: expected, pushed: true, replaced: true });
      expect(channel.writes()).toBe(2);
      expect(sha256Of(file), 'the corrupt copy was trusted').toBe(expected);
      expect(statSync(file).ino, 'the corrupt file was written in place, not replaced').not.toBe(corrupt);
      expect(statSync(file).mode & 0o777).toBe(0o700);
    });

    it('a symbolic link at the helper path is removed and the helper put there', async () => {
      freshTmp(box);
      const channel = counting(box.channel);
      const first = pushed(await pushHelper(channel), 'the first push');
      execFileSync('nsenter', ['-t', String(box.init), '-a', 'ln', '-sf', '/bin/sh', first.path], {
        timeout: 10_000,
      });
      const again = pushed(await pushHelper(channel), 'the push over a link');
      expect(again).toMatchObject({ pushed: true, replaced: true });
      const st = statSync(onHost(box, first.path), { throwIfNoEntry: true });
      expect(st.isFile()).toBe(true);
      expect(sha256Of(onHost(box, first.path))).toBe(expected);
    });

    it('a world-writable /tmp/.tether of another user is not trusted: the helper goes to /tmp/.tether-0, nothing is written there', async () => {
      freshTmp(box);
      execFileSync(
        'nsenter',
        ['-t', String(box.init), '-a', 'sh', '-c', 'mkdir -m 777 /tmp/.tether && chown 65534 /tmp/.tether'],
        {
          timeout: 10_000,
        },
      );
      expect(
        statSync(onHost(box, '/tmp/.tether')).uid,
        'premise broken: the directory is not uid 65534',
      ).toBe(65534);
      const channel = counting(box.channel);
      const r = pushed(await pushHelper(channel), 'the push beside another user’s /tmp/.tether');
      expect(r).toMatchObject({ path: `/tmp/.tether-0/helper-${expected}`, pushed: true });
      expect(r.note).toMatch(/\/tmp\/\.tether belongs to another user/);
      expect(readdirSync(onHost(box, '/tmp/.tether')), 'written in another user’s directory').toEqual([]);
      expect(channel.writes()).toBe(1);
    });

    it('two pushes at once both end with the helper in place, checked', async () => {
      freshTmp(box);
      const [a, b] = await Promise.all([pushHelper(box.channel), pushHelper(box.channel)]);
      const pa = pushed(a, 'the first of two');
      const pb = pushed(b, 'the second of two');
      expect(pa.path).toBe(pb.path);
      expect(sha256Of(onHost(box, pa.path))).toBe(expected);
      const left = readdirSync(onHost(box, '/tmp/.tether'));
      expect(left, 'a temp file was left beside the helper').toEqual([`helper-${expected}`]);
    });

    it('a channel that cannot reach the target is unchecked, not an error', async () => {
      const r = await pushHelper(commandChannel(['/nonexistent/tether-no-client']), { timeoutMs: 10_000 });
      expect(r).toMatchObject({ code: 'unchecked' });
      expect('unavailable' in r && r.unavailable).toMatch(
        /the check did not run to its end.*the env tag alone/,
      );
    });

    it('a dir that is not absolute is INVALID_OPTION before anything runs', async () => {
      const channel = counting(box.channel);
      await expect(pushHelper(channel, { dir: 'tmp/.tether' })).rejects.toMatchObject({
        code: 'INVALID_OPTION',
      });
      await expect(pushHelper(channel, { dir: '/tmp/.tether/' })).rejects.toMatchObject({
        code: 'INVALID_OPTION',
      });
    });

    it('a read-only /tmp says so, and that the session runs on the env tag alone; nothing is written', async () => {
      freshTmp(box, 'ro');
      const channel = counting(box.channel);
      const r = await pushHelper(channel);
      expect(r).toMatchObject({ code: 'read-only' });
      expect('unavailable' in r && r.unavailable).toMatch(
        /\/tmp is mounted read-only; the session runs on the env tag alone/,
      );
      expect(channel.writes()).toBe(0);
      expect(existsSync(onHost(box, '/tmp/.tether'))).toBe(false);
    });

    it('a noexec /tmp says so; nothing is written', async () => {
      freshTmp(box, 'noexec');
      const channel = counting(box.channel);
      const r = await pushHelper(channel);
      expect(r).toMatchObject({ code: 'noexec' });
      expect('unavailable' in r && r.unavailable).toMatch(
        /\/tmp is mounted noexec; the session runs on the env tag alone/,
      );
      expect(channel.writes()).toBe(0);
    });

    it('an architecture with no prebuilt helper says so (a linux32 personality: uname -m is i686 or armv8l)', async () => {
      freshTmp(box);
      const inner = commandChannel([...box.prefix, 'setarch', 'linux32']);
      const machine = execFileSync(
        box.prefix[0] as string,
        [...box.prefix.slice(1), 'setarch', 'linux32', 'uname', '-m'],
        {
          encoding: 'utf8',
          timeout: 10_000,
        },
      ).trim();
      expect(MACHINE_ARCH[machine], `premise broken: ${machine} has a prebuilt helper`).toBeUndefined();
      const channel = counting(inner);
      const r = await pushHelper(channel);
      expect(r).toMatchObject({ code: 'no-prebuilt', machine });
      expect('unavailable' in r && r.unavailable).toMatch(
        new RegExp(`no helper for ${machine} .*; the session runs on the env tag alone`),
      );
      expect(channel.writes()).toBe(0);
      expect(existsSync(onHost(box, '/tmp/.tether'))).toBe(false);
    });
  },
);

const noBusybox = missing('busybox');
describe.skipIf(!local || noBusybox !== '')(
  `the helper pushed once into a busybox-only container${noBusybox ? ` (skipped: ${noBusybox})` : ''}`,
  () => {
    let box: Container;
    let root: string;
    beforeAll(async () => {
      root = busyboxRoot(tool('busybox').path as string);
      box = await startContainer(120, root);
    });
    afterAll(async () => {
      await box?.stop();
      if (root) rmSync(root, { recursive: true, force: true });
    });

    it('is pushed once and reused, and a corrupt copy is replaced, checked with busybox sha256sum', async () => {
      const applet = execFileSync(
        box.prefix[0] as string,
        [...box.prefix.slice(1), 'readlink', '/bin/sha256sum'],
        {
          encoding: 'utf8',
          timeout: 10_000,
        },
      ).trim();
      expect(applet, 'premise broken: sha256sum is not busybox').toBe('busybox');
      const channel = counting(box.channel);
      const first = pushed(await pushHelper(channel), 'the first push');
      expect(first).toMatchObject({ sha256: expected, pushed: true });
      const file = onHost(box, first.path);
      expect(sha256Of(file)).toBe(expected);
      const second = pushed(await pushHelper(channel), 'the second push');
      expect(second.pushed).toBe(false);
      expect(channel.writes()).toBe(1);

      writeFileSync(file, 'not the helper\n');
      const third = pushed(await pushHelper(channel), 'the push over a corrupt copy');
      expect(third).toMatchObject({ pushed: true, replaced: true });
      expect(sha256Of(file), 'the corrupt copy was trusted').toBe(expected);
      expect(channel.writes()).toBe(2);
    });
  },
);
