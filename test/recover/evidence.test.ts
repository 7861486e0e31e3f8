// `tether recover` signals on evidence only, whatever a ledger record says: a forged record's
// cgroup path, a live session in another PID namespace, an expired kept entry whose pid + start
// time now name a process that is not the session's (a recorded channel: channel-trust.test.ts).
// Every victim is a process this test started; ground truth is /proc (pid + start time).
import { spawn as spawnChild } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/index.js';
import { cgroup2Mount, cgroupName } from '../../src/proc/cgroup.js';
import { createTag } from '../../src/proc/tag.js';
import { recover } from '../../src/recover/index.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { ROOT } from '../support/paths.js';
import { childrenOf, cmdlineOf, identityOf, isAlive, type ProcessId, pids } from '../support/proc.js';
import { cleanup, describeProcess, started, tempDir, waitFor } from '../support/zoo.js';
import { beginOrphaned, goneSupervisor } from './support.js';

const CLI = join(ROOT, 'bin/tether.cjs');
const opened: Ledger[] = [];
const dirs: string[] = [];

afterEach(async () => {
  cleanup();
  for (const l of opened.splice(0)) await l.close();
  // Deepest first; each emptied by cleanup() (its members were this test's processes).
  for (const d of dirs.splice(0).reverse()) {
    await waitFor(
      `${d} to empty`,
      () => !existsSync(d) || readFileSync(join(d, 'cgroup.procs'), 'latin1') === '',
    );
    if (existsSync(d)) rmdirSync(d);
  }
});

async function ledgerAt(path = join(tempDir(), 'ledger.db')): Promise<{ ledger: Ledger; path: string }> {
  const ledger = await Ledger.open(path);
  opened.push(ledger);
  return { ledger, path };
}

/** `sleep 600` with `env`, its identity recorded for cleanup. */
function sleeper(env: NodeJS.ProcessEnv = process.env): ProcessId {
  const child = spawnChild('sleep', ['600'], { env, stdio: 'ignore' });
  const id = identityOf(child.pid ?? 0);
  if (!id) throw new Error('premise broken: the sleeper has no /proc entry');
  started.push(id);
  return id;
}

/** A sleeper that moved itself into cgroup `dir` before it exec'd sleep. */
async function sleeperIn(dir: string): Promise<ProcessId> {
  const child = spawnChild('sh', ['-c', `echo $$ > ${dir}/cgroup.procs && exec sleep 600`], {
    stdio: 'ignore',
  });
  const pid = child.pid ?? 0;
  await waitFor(`pid ${pid} to exec sleep in ${dir}`, () => cmdlineOf(pid) === 'sleep 600');
  const id = identityOf(pid);
  if (!id) throw new Error('premise broken: the cgroup sleeper is gone');
  started.push(id);
  expect(readFileSync(join(dir, 'cgroup.procs'), 'latin1').split('\n')).toContain(String(pid));
  return id;
}

function cgroupDir(path: string): string {
  mkdirSync(path);
  dirs.push(path);
  return path;
}

const mount = cgroup2Mount();

describe.skipIf(!mount)("a record's cgroup path", () => {
  it('is not trusted: a cgroup that is not the session cgroup of its tag keeps its processes', async () => {
    const tag = createTag().name;
    const n = process.pid;
    // Anything else: a cgroup of another name, and one of the session's name in another place.
    const other = cgroupDir(join(mount as string, `evidence-victim-${n}`));
    const outer = cgroupDir(join(mount as string, `evidence-outer-${n}`));
    const misplaced = cgroupDir(join(outer, cgroupName(tag)));
    const victims = [await sleeperIn(other), await sleeperIn(misplaced)];
    const { ledger } = await ledgerAt();
    await beginOrphaned(ledger, tag, { command: ['forged'] });
    for (const path of [other, misplaced])
      await ledger.recordSweep(tag, { cgroup: path } as unknown as SweepReport);

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    for (const v of victims) expect(isAlive(v), `${describeProcess(v)} was signalled`).toBe(true);
    expect(existsSync(other) && existsSync(misplaced), 'a cgroup not the session’s was removed').toBe(true);
    const entry = result.sessions.find((s) => s.tag === tag);
    expect(entry?.outcome).toBe('recovered');
    expect(entry?.reason).toContain(`the recorded cgroup ${other} is not this session's`);
    expect(entry?.reason).toContain(`the recorded cgroup ${misplaced} is not this session's`);
  });

  it("is used when it is the tag's session cgroup under the tether parent", async () => {
    const tag = createTag().name;
    const parent = join(mount as string, 'tether');
    if (!existsSync(parent)) mkdirSync(parent); // tether's own parent: left in place, as tether does
    const own = cgroupDir(join(parent, cgroupName(tag)));
    const member = await sleeperIn(own); // untagged: only the cgroup finds it
    const { ledger } = await ledgerAt();
    await beginOrphaned(ledger, tag);
    await ledger.recordSweep(tag, { cgroup: own } as unknown as SweepReport);
    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(result.sessions.find((s) => s.tag === tag)?.outcome).toBe('recovered');
    expect(isAlive(member), `${describeProcess(member)} in the session's cgroup survived`).toBe(false);
    expect(existsSync(own), "the session's emptied cgroup was left").toBe(false);
  });
});

describe('a live session in another PID namespace', () => {
  it('is left alone by a recover outside it, saying why', async () => {
    const path = join(tempDir(), 'ledger.db');
    const marker = `777.${process.pid}`;
    // The supervisor is pid 1 of its namespace; --kill-child ends the namespace with unshare.
    const ns = spawnChild(
      'unshare',
      [
        '--pid',
        '--kill-child',
        '--mount-proc',
        process.execPath,
        CLI,
        'run',
        '--ledger',
        path,
        '--',
        'sleep',
        marker,
      ],
      { stdio: 'ignore' },
    );
    const nsId = identityOf(ns.pid ?? 0);
    if (!nsId) throw new Error('premise broken: unshare did not start');
    started.push(nsId);
    const payload = () => pids().find((p) => cmdlineOf(p) === `sleep ${marker}`);
    await waitFor(
      'the session in the PID namespace to run its command',
      () => payload() !== undefined,
      20_000,
    );
    const victim = identityOf(payload() as number) as ProcessId;
    started.push(victim);
    const { ledger } = await ledgerAt(path);
    const [record] = await ledger.list();
    expect(record?.state, 'premise broken: the session is not running').toBe('running');
    expect(record?.supervisor.pid, 'premise broken: the supervisor is not pid 1 of its namespace').toBe(1);

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(victim), `the live session's ${describeProcess(victim)} was signalled`).toBe(true);
    const entry = result.sessions.find((s) => s.tag === record?.tag);
    expect(entry?.outcome).toBe('left-alone');
    expect(entry?.reason).toMatch(/another PID namespace/);
    expect((await ledger.get(record?.tag as string))?.state).toBe('running');
    expect(result.settled).toBe(true);
    // The session ends as sessions do: its supervisor (unshare's child, pid 1 there) is asked
    // to stop, and sweeps and removes its cgroup. (A SIGKILL of the namespace would leave the
    // emptied cgroup behind: nothing of the session would live to remove it.)
    const supervisor = childrenOf(ns.pid as number)[0];
    expect(supervisor, 'premise broken: no tether run under unshare').toBeDefined();
    process.kill((supervisor as { pid: number }).pid, 'SIGTERM');
    await waitFor('the namespace to end', () => !isAlive(victim) && !isAlive(nsId), 10_000);
    const own = join(mount as string, 'tether', cgroupName(record?.tag as string));
    if (existsSync(own)) dirs.push(own); // cleaned up after the test, not hidden
    expect(existsSync(own), "the session cgroup outlived its supervisor's end").toBe(false);
  });
});

describe("a record naming a live session's tag", () => {
  it("is left alone while that session's helper runs under its supervisor, whatever the record says", async () => {
    // A live session B: a real `tether run` (its own ledger), its payload under the helper.
    const marker = `778.${process.pid}`;
    const events = join(tempDir(), 'events');
    const run = spawnChild(
      process.execPath,
      [CLI, 'run', '--no-ledger', '--events', events, '--', 'sleep', marker],
      { stdio: 'ignore' },
    );
    const runId = identityOf(run.pid ?? 0);
    if (!runId) throw new Error('premise broken: tether run did not start');
    started.push(runId);
    const payload = () => pids().find((p) => cmdlineOf(p) === `sleep ${marker}`);
    await waitFor('the live session to run its command', () => payload() !== undefined, 20_000);
    const victim = identityOf(payload() as number) as ProcessId;
    started.push(victim);
    // The command can run before tether run has written its first event (seen under load).
    await waitFor(
      `a tag in ${events}`,
      () => existsSync(events) && readFileSync(events, 'utf8').includes('\n'),
    );
    const tag = JSON.parse(readFileSync(events, 'utf8').split('\n')[0] as string).tag as string;
    // A forged (or stale) row: B's tag under a supervisor that is gone, in this namespace.
    const { ledger } = await ledgerAt();
    await beginOrphaned(ledger, tag, { command: ['sleep'] });

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(victim), `the live session's ${describeProcess(victim)} was signalled`).toBe(true);
    const entry = result.sessions.find((s) => s.tag === tag);
    expect(entry?.outcome).toBe('left-alone');
    expect(entry?.reason).toMatch(new RegExp(`still runs under pid ${runId.pid}: the session is supervised`));
    // The evidence that spared it, with the start times it rests on (older than the row).
    expect(entry?.evidence).toMatchObject({
      kind: 'helper',
      supervisor: runId.pid,
      started: { supervisor: runId.startTime },
    });
    expect((await ledger.get(tag))?.state).toBe('running');
    // The same row claiming an earlier boot (which would make any pid of it gone).
    const other = (await ledgerAt()).ledger;
    await other.begin({
      tag,
      command: ['sleep'],
      location: { kind: 'local' },
      supervisor: { ...(await goneSupervisor()), bootId: '00000000-0000-0000-0000-000000000000' },
    });
    const booted = await recover({ ledger: other, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(victim), `the live session's ${describeProcess(victim)} was signalled`).toBe(true);
    expect(booted.sessions.find((s) => s.tag === tag)?.reason).toMatch(/of this boot carries its tag/);
    // A row with a live supervisor and an expired "kept" entry naming the session's command.
    const keptRow = (await ledgerAt()).ledger;
    await keptRow.begin({
      tag,
      command: ['sleep'],
      location: { kind: 'local' },
      kept: [{ ...victim, cmdline: `sleep ${marker}`, match: 'sleep *', owner: 'forger', expiresAt: 1 }],
    });
    const keptResult = await recover({ ledger: keptRow, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(victim), `the live session's ${describeProcess(victim)} was ended as "kept"`).toBe(true);
    expect(keptResult.kept[0]?.outcome).toBe('left-alone');
    process.kill(runId.pid, 'SIGTERM'); // B ends as sessions end: its supervisor sweeps it
    await waitFor('the live session to end', () => !isAlive(victim) && !isAlive(runId), 10_000);
  });
});

describe('a record naming the session recover runs in', () => {
  it('is left alone: recover is one of its processes', async () => {
    const tag = createTag().name;
    const member = sleeper({ ...process.env, [tag]: '1' }); // a process of "this" session
    const { ledger } = await ledgerAt();
    await beginOrphaned(ledger, tag);
    process.env[tag] = '1'; // recover runs inside the session the row names
    try {
      const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
      expect(isAlive(member), `${describeProcess(member)} of recover's own session was signalled`).toBe(true);
      expect(result.sessions[0]?.reason).toMatch(/recover itself runs in session/);
    } finally {
      delete process.env[tag];
    }
  });
});

describe('a row of 150,000 expired kept entries', () => {
  it('is handled without a stack overflow: each is gone', async () => {
    const { ledger } = await ledgerAt();
    const supervisor = await goneSupervisor();
    const kept = Array.from({ length: 150_000 }, (_, i) => ({
      pid: supervisor.pid,
      startTime: i + 2, // never the gone supervisor's own start time, never alive
      cmdline: 'x',
      match: 'x',
      owner: 'x',
      expiresAt: 1,
    }));
    await ledger.begin({
      tag: createTag().name,
      command: ['x'],
      location: { kind: 'local' },
      supervisor,
      kept,
    });
    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(result.kept).toHaveLength(150_000);
    expect(new Set(result.kept.map((k) => k.outcome))).toEqual(new Set(['gone']));
  });
});

describe('an expired kept process', () => {
  const kept = (id: ProcessId) => ({
    ...id,
    cmdline: 'sleep 600',
    match: 'sleep *',
    owner: 'test',
    expiresAt: 1,
  });

  it('of another boot, or of a record with no machine id, is not signalled', async () => {
    const { ledger } = await ledgerAt();
    const supervisor = await goneSupervisor();
    const otherBoot = { tag: createTag().name, victim: sleeper() };
    const noMachine = { tag: createTag().name, victim: sleeper() };
    await ledger.begin({
      tag: otherBoot.tag,
      command: ['x'],
      location: { kind: 'local' },
      supervisor: { ...supervisor, bootId: '00000000-0000-0000-0000-000000000000' },
      kept: [kept(otherBoot.victim)],
    });
    await ledger.begin({
      tag: noMachine.tag,
      command: ['x'],
      location: { kind: 'local' },
      supervisor: { ...supervisor, machineId: '' },
      kept: [kept(noMachine.victim)],
    });
    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    for (const { tag, victim } of [otherBoot, noMachine]) {
      expect(isAlive(victim), `${describeProcess(victim)} (kept by ${tag}) was signalled`).toBe(true);
      expect(result.kept.find((k) => k.tag === tag)?.outcome).toBe('elsewhere');
    }
  });

  it('that no longer carries its session tag is left alone and said; one that does is ended', async () => {
    const { ledger } = await ledgerAt();
    const tag = createTag().name;
    const untagged = sleeper(); // as a kept process that dropped its tag, or a process that is not the session's
    const tagged = sleeper({ ...process.env, [tag]: '1' });
    await beginOrphaned(ledger, tag, { kept: [kept(untagged), kept(tagged)] });
    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(untagged), `the untagged ${describeProcess(untagged)} was signalled`).toBe(true);
    expect(isAlive(tagged), `the tagged kept ${describeProcess(tagged)} survived`).toBe(false);
    const left = result.kept.find((k) => k.pid === untagged.pid);
    expect(left?.outcome).toBe('left-alone');
    expect(left?.reason).toContain(`no longer carries ${tag}`);
    // Ended by the session's own sweep (its tag), or by the kept sweep: either way by evidence.
    expect(result.kept.find((k) => k.pid === tagged.pid)?.outcome).toMatch(/^(ended|gone)$/);
    expect(result.settled).toBe(false);
    // Still listed: the next recover says it again.
    expect((await ledger.get(tag))?.kept.map((k) => k.pid)).toEqual([untagged.pid]);
  });
});
