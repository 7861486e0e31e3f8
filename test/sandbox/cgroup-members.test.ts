// A helper's cgroup in the session's sweep (docs/sandbox.md, "A cgroup in the container"): a
// session member that SIGKILLs its helper hands what the helper held to the container's init —
// an env-cleared double fork is then invisible to the env tag and below no helper. The cgroup
// the helper's start line named still holds it: the session's sweep takes every process there
// as a member, stops it, and removes the cgroup once empty. Ground truth: the host's /proc (the
// double fork's pid and start time) and the cgroup's directory on the host.
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { createTag, sandbox } from '../../src/index.js';
import { createNonce } from '../../src/sandbox/completion.js';
import { parseSweepOutput } from '../../src/sandbox/sweep-output.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { cmdlineOf, identityOf, pids, ppidOf } from '../support/proc.js';
import { aliveOnHost, type Container, sleep, startContainer, taggedOnHost } from './container.js';

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
const SWEEP_FAST = { graceMs: 500, killAfterMs: 500 };
let box: Container;
let premise = '';
beforeAll(async () => {
  box = await startContainer(120);
  const info = readFileSync(`/proc/${box.init}/mountinfo`, 'utf8');
  const cg2 = info.split('\n').find((l) => l.split(' - ')[1]?.startsWith('cgroup2 '));
  if (!cg2) premise = 'no cgroup2 mount in the container (a v1-only host)';
  else if (!(cg2.split(' ')[5] ?? '').split(',').includes('rw'))
    premise = 'the cgroup2 mount is read-only here';
});
afterAll(async () => {
  await box?.stop();
});

function cgroupOf(pid: number): string {
  const line = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('0::'));
  return line?.slice(3) ?? '';
}

function mountOf(): string {
  const info = readFileSync(`/proc/${box.init}/mountinfo`, 'utf8');
  const line = info.split('\n').find((l) => l.split(' - ')[1]?.startsWith('cgroup2 ')) ?? '';
  return line.split(' ')[4] ?? '';
}

describe("a helper's cgroup in the session's sweep", () => {
  it('a helper KILLed by a session member: what it held is found in its cgroup, stopped, and the cgroup removed', async (ctx) => {
    if (premise) ctx.skip(premise);
    const tag = createTag();
    const s = 8_600 + (process.pid % 300);
    try {
      const session = sandbox.session(box.channel, { tag, sweep: SWEEP, helper: true });
      const r = await session.spawn([
        'sh',
        '-c',
        `env -i /bin/sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 0.2`,
      ]);
      expect(r.exitCode).toBe(0);
      const pid = pids().find((p) => cmdlineOf(p) === `sleep ${s}`);
      const seen = pid === undefined ? undefined : identityOf(pid);
      if (!seen) throw new Error(`premise broken: the double fork sleep ${s} is not running`);
      const helper = ppidOf(seen.pid);
      expect(cmdlineOf(helper), 'premise broken: the double fork is not the helper’s child').toMatch(
        /\/fd\/9 --wrap /,
      );
      const path = cgroupOf(seen.pid);
      expect(path, 'premise broken: no cgroup of the command’s').toMatch(
        /\/tether-helper\.[0-9a-f]{32}\.\d+\.\d+$/,
      );
      // The session member's move: the helper is KILLed; the double fork goes to the container's init.
      process.kill(helper, 'SIGKILL');
      for (let i = 0; i < 100 && ppidOf(seen.pid) === helper; i++) await sleep(10);
      expect(ppidOf(seen.pid), 'premise broken: not reparented to the container’s init').toBe(box.init);
      const report = await session.end();
      expect(report.stopped.map((p) => [p.cmdline, p.foundBy])).toContainEqual([`sleep ${s}`, 'cgroup']);
      for (let i = 0; i < 50 && aliveOnHost(seen); i++) await sleep(20);
      expect(aliveOnHost(seen), 'the double fork outlived the session').toBe(false);
      expect(existsSync(join(mountOf(), path)), `the cgroup ${path} was left behind`).toBe(false);
    } finally {
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, SWEEP);
    }
  });
});

// This machine's own cgroup2 mount, when it can be written (the env channel runs on it).
function hostCgroup2(): string {
  const info = readFileSync('/proc/self/mountinfo', 'utf8');
  const line = info.split('\n').find((l) => l.split(' - ')[1]?.startsWith('cgroup2 ')) ?? '';
  return (line.split(' ')[5] ?? '').split(',').includes('rw') ? (line.split(' ')[4] ?? '') : '';
}

describe('what the sweep takes on a cgroup’s word', () => {
  it('a process of another uid than the one that owns the cgroup is never taken: a uid that can write a common ancestor can move anyone’s process in', async (ctx) => {
    const mount = hostCgroup2();
    if (!mount) ctx.skip('no writable cgroup2 mount on this machine');
    const tag = createTag();
    const hex = tag.name.slice('TETHER_SESSION_'.length);
    const own = join(mount, cgroupOf(process.pid));
    // As uid 65534 would make it where the cgroup tree is delegated to it: its own directory.
    const planted = join(own, `tether-helper.${hex}.2.2`);
    mkdirSync(planted);
    chownSync(join(planted, 'cgroup.procs'), 65534, 65534);
    const victim = spawn('sleep', ['86.4203'], { stdio: 'ignore' }); // root's
    try {
      const id = identityOf(victim.pid as number);
      if (!id) throw new Error('premise broken: the sleep did not start');
      writeFileSync(join(planted, 'cgroup.procs'), String(victim.pid));
      const report = await sandbox.sweep(sandbox.commandChannel(['env']), tag, SWEEP_FAST);
      expect(report.stopped.map((p) => p.pid)).not.toContain(victim.pid);
      expect(report.survivors.map((p) => p.pid)).not.toContain(victim.pid);
      expect(aliveOnHost(id), 'the sweep signalled a process of another uid on a cgroup’s word').toBe(true);
    } finally {
      victim.kill('SIGKILL');
      await sleep(50);
      if (existsSync(planted)) rmdirSync(planted);
    }
  });

  // sweep.sh (find, which lists dot-directories) and the helper's sweep (its own walk, which
  // skipped every name starting with '.' until a review found it): a command that can write its
  // cgroup makes one named `.x` below it and moves there.
  const helperFile = prebuiltCandidates(process.arch).find((p) => existsSync(p));
  it.for([
    ['sweep.sh', 'x'],
    ['sweep.sh', '.x'],
    ['the helper’s --sweep', 'x'],
    ['the helper’s --sweep', '.x'],
  ] as const)(
    '%s: a cgroup a command made below its own (%s) is looked into, and removed once empty',
    async ([reader, sub], ctx) => {
      const mount = hostCgroup2();
      if (!mount) ctx.skip('no writable cgroup2 mount on this machine');
      const byHelper = reader !== 'sweep.sh';
      if (byHelper && !helperFile) ctx.skip('no prebuilt helper built here');
      const tag = createTag();
      const hex = tag.name.slice('TETHER_SESSION_'.length);
      const dir = join(mount, cgroupOf(process.pid), `tether-helper.${hex}.${process.pid}.${Date.now()}`);
      mkdirSync(join(dir, sub), { recursive: true });
      const child = spawn('sleep', ['86.4204'], { env: {}, stdio: 'ignore' });
      try {
        const id = identityOf(child.pid as number);
        if (!id) throw new Error('premise broken: the sleep did not start');
        writeFileSync(join(dir, sub, 'cgroup.procs'), String(child.pid));
        let report: SweepReport;
        if (byHelper) {
          const nonce = createNonce();
          const r = spawnSync(helperFile as string, ['--sweep', tag.name, '500', '500', '20'], {
            input: `${nonce}\n`,
            encoding: 'utf8',
            timeout: 20_000,
          });
          const parsed = parseSweepOutput(r.stdout, tag.name, nonce);
          expect(parsed.finished, r.stdout + r.stderr).toBe(true);
          report = parsed.report;
        } else report = await sandbox.sweep(sandbox.commandChannel(['env']), tag, SWEEP_FAST);
        expect(report.stopped.map((p) => [p.pid, p.foundBy])).toEqual([[child.pid, 'cgroup']]);
        expect(report.complete).toBe(true);
        for (let i = 0; i < 50 && aliveOnHost(id); i++) await sleep(20);
        expect(aliveOnHost(id)).toBe(false);
        expect(existsSync(dir), 'the cgroups were left behind').toBe(false);
      } finally {
        child.kill('SIGKILL');
        await sleep(50);
        for (const d of [join(dir, sub), dir]) if (existsSync(d)) rmdirSync(d);
      }
    },
  );
});

describe('the sweep program finds the session’s cgroups by its tag', () => {
  it('every process in one is a member, env-cleared too; the cgroup is removed once empty', async (ctx) => {
    const mount = hostCgroup2();
    if (!mount) ctx.skip('no writable cgroup2 mount on this machine');
    const tag = createTag();
    const hex = tag.name.slice('TETHER_SESSION_'.length);
    // As the wrapper names it, below the sweep's own cgroup (this process's: the env channel).
    const own = join(mount, cgroupOf(process.pid));
    const dir = join(own, `tether-helper.${hex}.${process.pid}.${Date.now()}`);
    const other = join(own, `tether-helper.${'cd'.repeat(16)}.${process.pid}.${Date.now()}`);
    mkdirSync(dir);
    mkdirSync(other);
    const child = spawn('sleep', ['86.4201'], { env: {}, stdio: 'ignore' });
    const bystander = spawn('sleep', ['86.4202'], { env: {}, stdio: 'ignore' });
    try {
      const id = identityOf(child.pid as number);
      const by = identityOf(bystander.pid as number);
      if (!id || !by) throw new Error('premise broken: the sleeps did not start');
      writeFileSync(join(dir, 'cgroup.procs'), String(child.pid));
      // Another session's cgroup: never read.
      writeFileSync(join(other, 'cgroup.procs'), String(bystander.pid));
      const report = await sandbox.sweep(sandbox.commandChannel(['env']), tag, SWEEP_FAST);
      expect(report.stopped.map((p) => [p.pid, p.foundBy])).toEqual([[child.pid, 'cgroup']]);
      expect([report.complete, report.ok]).toEqual([true, true]);
      for (let i = 0; i < 50 && aliveOnHost(id); i++) await sleep(20);
      expect(aliveOnHost(id), 'the process in the cgroup outlived the sweep').toBe(false);
      expect(existsSync(dir), 'the empty cgroup was left behind').toBe(false);
      expect(aliveOnHost(by), 'another session’s cgroup was swept').toBe(true);
      expect(existsSync(other), 'another session’s cgroup was removed').toBe(true);
    } finally {
      child.kill('SIGKILL');
      bystander.kill('SIGKILL');
      await sleep(50);
      for (const d of [dir, other]) if (existsSync(d)) rmdirSync(d);
    }
  });
});
