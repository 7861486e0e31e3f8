// A cgroup in the container (docs/sandbox.md, "A cgroup in the container"): where the container's
// cgroup v2 can be written, the wrapper makes a cgroup for each command below its own, the helper
// starts the command in it and, TERMed by the session's sweep, ends and removes it with its
// subtree; the helper's start line says so, and so does the session's report (a note, the
// `cgroup` layer). Where it cannot be written (a read-only mount, as Docker and Kubernetes mount
// it), the command runs under the helper without one, and the report says no cgroup. Ground
// truth: the host's /proc (the leftover's cgroup, its pid and start time gone) and the cgroup's
// directory on the host.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { helperUseOf } from '../../src/sandbox/helper-use.js';
import { reportUnder } from '../../src/sandbox/session-helper.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { cmdlineOf, identityOf, pids } from '../support/proc.js';
import { aliveOnHost, type Container, cgroup2Of, sleep, startContainer, taggedOnHost } from './container.js';

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
let next = 7_500 + (process.pid % 400);

// The leftover's cgroup path (the `0::` line of /proc/PID/cgroup, as the host sees it).
function cgroupOf(pid: number): string {
  const line = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('0::'));
  return line?.slice(3) ?? '';
}

// The env-cleared double fork `sleep S` the command leaves, found by its unique cmdline.
async function leftover(s: number): Promise<{ pid: number; startTime: number }> {
  for (let i = 0; i < 200; i++) {
    const pid = pids().find((p) => cmdlineOf(p) === `sleep ${s}`);
    const id = pid === undefined ? undefined : identityOf(pid);
    if (id) return id;
    await sleep(10);
  }
  throw new Error(`premise broken: the double fork sleep ${s} never appeared`);
}

const command = (s: number) => [
  'sh',
  '-c',
  `grep '^0::' /proc/self/cgroup; env -i /bin/sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 0.4`,
];

describe('a cgroup in the container, where its cgroup v2 can be written', () => {
  let box: Container;
  let premise = '';
  beforeAll(async () => {
    box = await startContainer(120);
    const cg = cgroup2Of(box);
    if (!cg) premise = 'no cgroup2 mount in the container (a v1-only host)';
    else if (!cg.writable) premise = `the cgroup2 mount ${cg.mount} is read-only here`;
  });
  afterAll(async () => {
    await box?.stop();
  });

  it('the command and what it leaves run in a cgroup of their own, ended and removed with the session', async (ctx) => {
    if (premise) ctx.skip(premise);
    const tag = createTag();
    const s = next++;
    try {
      const call = sandbox.run(box.channel, command(s), { tag, sweep: SWEEP, helper: true });
      const seen = await leftover(s);
      const path = cgroupOf(seen.pid);
      const r = await call;
      const mount = cgroup2Of(box)?.mount ?? '';
      expect(r.stdout, 'the command did not run in a cgroup the wrapper made').toMatch(
        /^0::\S*\/tether-helper\.[0-9a-f]{32}\.\d+\.\d+\n$/,
      );
      // The leftover, double-forked with a cleared environment, is in the command's cgroup.
      expect(`0::${path}\n`).toBe(r.stdout);
      // The report says so: its notes, and the cgroup among its layers (the session's own cgroup
      // stays null: each command had one of its own).
      expect(r.report.notes.join('\n')).toMatch(
        /the commands ran under the helper \S+ \([^)]*a subreaper[^)]*\), each in a cgroup of its own/,
      );
      expect(r.report.layers).toContain('cgroup');
      expect(r.report.cgroup).toBeNull();
      // Ground truth: gone, and its cgroup removed.
      for (let i = 0; i < 50 && aliveOnHost(seen); i++) await sleep(20);
      expect(aliveOnHost(seen), 'the leftover outlived the session').toBe(false);
      expect(existsSync(join(mount, path)), `the cgroup ${path} was left behind`).toBe(false);
      expect(taggedOnHost(tag.name)).toEqual([]);
    } finally {
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, SWEEP);
    }
  });
});

describe('a read-only cgroup v2 in the container (Docker’s and Kubernetes’ default)', () => {
  let box: Container;
  let premise = '';
  beforeAll(async () => {
    box = await startContainer(120);
    const cg = cgroup2Of(box);
    if (!cg) premise = 'no cgroup2 mount in the container (a v1-only host)';
    // Remounted in the container's own mount namespace (unshare makes its propagation private):
    // the host's mount is untouched.
    else
      execFileSync('nsenter', ['-t', String(box.init), '-m', 'mount', '-o', 'remount,bind,ro', cg.mount], {
        timeout: 10_000,
      });
  });
  afterAll(async () => {
    await box?.stop();
  });

  it('the command runs under the helper without a cgroup, and what it leaves is still ended', async (ctx) => {
    if (premise) ctx.skip(premise);
    expect(cgroup2Of(box)?.writable, 'premise broken: the mount is still writable').toBe(false);
    const tag = createTag();
    const s = next++;
    try {
      const call = sandbox.run(box.channel, command(s), { tag, sweep: SWEEP, helper: true });
      const seen = await leftover(s);
      const r = await call;
      expect(r.stdout).not.toContain('tether-helper.');
      expect(r.report.notes.join('\n')).toContain('the commands ran under the helper');
      // No cgroup said where none was made.
      expect(r.report.notes.join('\n')).not.toContain('cgroup of its own');
      expect(r.report.layers).not.toContain('cgroup');
      for (let i = 0; i < 50 && aliveOnHost(seen); i++) await sleep(20);
      expect(aliveOnHost(seen), 'the leftover outlived the session').toBe(false);
    } finally {
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, SWEEP);
    }
  });
});

// The report's words when only some commands ran in a cgroup of their own (src/sandbox/session-helper.ts):
// which did, and no `cgroup` layer, as that layer would say every command ran in one.
describe('the report of a session whose commands did not all run in a cgroup', () => {
  const report: SweepReport = {
    version: 1,
    tag: 'TETHER_SESSION_00000000000000000000000000000000',
    complete: true,
    ok: true,
    layers: ['env-tag', 'sandbox'],
    notes: [],
    cgroup: null,
    signalling: 'start-time-recheck',
    proof: 'two-empty-scans',
    stopped: [],
    survivors: [],
    kept: [],
    unreadable: [],
    warnings: [],
    phases: [],
    timings: { startedAt: new Date(0).toISOString(), durationMs: 0, scans: 2, scanMs: 0 },
  };
  const push = {
    path: '/tmp/.tether/helper-x',
    sha256: 'x',
    machine: 'x86_64',
    pushed: true,
    replaced: false,
  };
  const helper = { pid: 40, startTime: 900 };
  const inOne = helperUseOf({ announced: true, byHelper: true, helper, cgroup: true }, false, []);
  const without = helperUseOf({ announced: true, byHelper: true, helper }, false, []);

  it('the start line’s cgroup word is carried to the command’s use', () => {
    expect(inOne).toEqual({ under: 'helper', identity: helper, cgroup: true });
    expect(without).toEqual({ under: 'helper', identity: helper });
  });

  it('names the commands that ran in one; no cgroup layer', () => {
    const r = reportUnder(report, push, [
      { command: ['make', 'build'], use: inOne },
      { command: ['make', 'test'], use: without },
    ]);
    expect(r.notes).toEqual([
      'the commands ran under the helper /tmp/.tether/helper-x (pushed by this session; a subreaper: what they orphaned was found as its descendants); in a cgroup of its own: "make build"',
    ]);
    expect(r.layers).toEqual(['env-tag', 'sandbox', 'subreaper']);
  });

  it('every command in one: the note says each, and the layers gain cgroup', () => {
    const r = reportUnder(report, push, [
      { command: ['make', 'build'], use: inOne },
      { command: ['make', 'test'], use: inOne },
    ]);
    expect(r.notes).toEqual([
      'the commands ran under the helper /tmp/.tether/helper-x (pushed by this session; a subreaper: what they orphaned was found as its descendants), each in a cgroup of its own',
    ]);
    expect(r.layers).toEqual(['env-tag', 'sandbox', 'subreaper', 'cgroup']);
    expect(r.cgroup).toBeNull();
  });
});
