// `tether recover` after a supervisor killed TOGETHER with its helpers (as the OOM killer or a
// `kill -9` of a process tree would): no dead man's switch runs, the leftovers of its local
// sessions and of its sandbox calls keep running — and the real CLI, reading the ledger, ends
// every one of them and records each session `recovered`. Ground truth: /proc (pid + start time).
import { spawn as spawnChild } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/index.js';
import { createTag } from '../../src/proc/tag.js';
import { Session } from '../../src/session/session.js';
import { type Container, startContainer, taggedOnHost } from '../sandbox/container.js';
import { runNode } from '../support/node.js';
import { FIXTURES } from '../support/paths.js';
import { childrenOf, identityOf, isAlive, type ProcessId } from '../support/proc.js';
import { cleanup, describeProcess, started, tempDir, waitFor } from '../support/zoo.js';
import { beginOrphaned, recoverCli } from './support.js';

let container: Container;

beforeAll(async () => {
  container = await startContainer(300);
});
afterEach(() => cleanup());
afterAll(async () => {
  await container?.stop();
});

interface Supervised {
  supervisor: ProcessId;
  local: { tag: string; payload: ProcessId; leftover: ProcessId }[];
  sandbox: { tag: string; processes: ProcessId[] }[];
}

/** Starts test/fixtures/node/ledger-supervisor.mjs and waits until every leftover runs. */
async function startSupervisor(ledgerPath: string, local: number, sandbox: number): Promise<Supervised> {
  const node = runNode([
    join(FIXTURES, 'node/ledger-supervisor.mjs'),
    ledgerPath,
    String(local),
    String(sandbox),
    JSON.stringify(container.prefix),
  ]);
  await waitFor(
    `the supervisor to say READY (stderr: ${node.stderr})`,
    () => /^READY$/m.test(node.stdout),
    30_000,
  );
  const supervisor = identityOf(node.child.pid ?? 0);
  if (!supervisor) throw new Error(`premise broken: the supervisor is gone: ${node.stderr}`);
  const out: Supervised = { supervisor, local: [], sandbox: [] };
  for (const m of node.stdout.matchAll(/^LOCAL (\S+) (\d+) (\d+)$/gm)) {
    const payload = identityOf(Number(m[2]));
    const leftover = identityOf(Number(m[3]));
    if (!payload || !leftover)
      throw new Error(`premise broken: session ${m[1]} lost a process before the kill`);
    started.push(payload, leftover);
    out.local.push({ tag: m[1] as string, payload, leftover });
  }
  for (const m of node.stdout.matchAll(/^SANDBOX (\S+)$/gm)) {
    const tag = m[1] as string;
    // The wrapper, its command and the setsid'd sleeper, as the host's /proc sees them.
    await waitFor(`3 processes of ${tag} in the container`, () => taggedOnHost(tag).length >= 3, 15_000);
    const processes = taggedOnHost(tag).map(({ pid, startTime }) => ({ pid, startTime }));
    started.push(...processes);
    out.sandbox.push({ tag, processes });
  }
  expect(out.local.length, node.stdout).toBe(local);
  expect(out.sandbox.length, node.stdout).toBe(sandbox);
  return out;
}

/**
 * The supervisor and its helpers and exec clients (its children) all stopped first, then all
 * SIGKILLed: none of them runs a line after another has died — no dead man's switch, no sweep.
 */
async function killTree(supervisor: ProcessId): Promise<ProcessId[]> {
  const tree = [
    supervisor,
    ...childrenOf(supervisor.pid).map((s) => ({ pid: s.pid, startTime: s.startTime })),
  ];
  expect(tree.length, 'premise broken: the supervisor has no helper or exec client').toBeGreaterThan(1);
  for (const p of tree) if (isAlive(p)) process.kill(p.pid, 'SIGSTOP');
  for (const p of tree) if (isAlive(p)) process.kill(p.pid, 'SIGKILL');
  await waitFor('the supervisor and its helpers to be gone', () => tree.every((p) => !isAlive(p)), 5000);
  return tree;
}

function alive(list: ProcessId[]): string[] {
  return list.filter((p) => isAlive(p)).map((p) => describeProcess(p));
}

describe('tether recover after the supervisor was killed with its helpers', () => {
  it('ends every leftover of 5 local and 5 sandbox sessions, and the ledger holds all 10 recovered', async () => {
    const path = join(tempDir(), 'ledger.db');
    // A decoy: a running session of this (live) process in the same ledger; recover leaves it.
    const ledger = await Ledger.open(path);
    const decoy = new Session({ ledger });
    const decoyProc = decoy.spawn('sleep', ['600']);
    const decoyId = identityOf(decoyProc.pid ?? 0) as ProcessId;
    started.push(decoyId);

    const s = await startSupervisor(path, 5, 5);
    const leftovers = [
      ...s.local.flatMap((l) => [l.payload, l.leftover]),
      ...s.sandbox.flatMap((b) => b.processes),
    ];
    await killTree(s.supervisor);
    expect(alive(leftovers).length, 'premise broken: leftovers must outlive their supervisor').toBe(
      leftovers.length,
    );

    const { code, json, stderr } = await recoverCli(path);
    expect(code, stderr).toBe(0);
    const handled = new Map(
      (json.sessions as { tag: string; outcome: string }[]).map((r) => [r.tag, r.outcome]),
    );
    for (const tag of [...s.local.map((l) => l.tag), ...s.sandbox.map((b) => b.tag)])
      expect(handled.get(tag), `recover's outcome for ${tag}`).toBe('recovered');
    expect(handled.has(decoy.tag), 'a session whose supervisor is alive was handled').toBe(false);

    await waitFor(
      `every leftover gone (alive: ${alive(leftovers)})`,
      () => alive(leftovers).length === 0,
      3000,
    );
    expect(isAlive(decoyId), `the live supervisor's command ${describeProcess(decoyId)} survived`).toBe(true);

    const records = await ledger.list();
    const states = new Map(records.map((r) => [r.tag, r.state]));
    for (const l of s.local) expect(states.get(l.tag), `local ${l.tag}`).toBe('recovered');
    for (const b of s.sandbox) expect(states.get(b.tag), `sandbox ${b.tag}`).toBe('recovered');
    expect(states.get(decoy.tag)).toBe('running');
    for (const r of records.filter((r) => r.state === 'recovered')) {
      expect(r.reports.at(-1)?.ok, `${r.tag}'s recover report`).toBe(true);
      expect(r.location.kind).toBe(s.local.some((l) => l.tag === r.tag) ? 'local' : 'sandbox');
    }
    // Every local leftover was found by the recover sweep (by tag or its leftover cgroup).
    for (const l of s.local) {
      const report = records.find((r) => r.tag === l.tag)?.reports.at(-1);
      expect(
        report?.stopped.map((p) => p.pid),
        `${l.tag} stopped`,
      ).toEqual(expect.arrayContaining([l.leftover.pid]));
    }
    await decoy.end();
    expect((await ledger.get(decoy.tag))?.state).toBe('cancelled');
    await ledger.close();
  });

  it('--dry-run signals nothing and writes nothing, then a real run recovers', async () => {
    const path = join(tempDir(), 'ledger.db');
    const s = await startSupervisor(path, 1, 1);
    const leftovers = [s.local[0]?.leftover, ...(s.sandbox[0]?.processes ?? [])] as ProcessId[];
    await killTree(s.supervisor);
    const dry = await recoverCli(path, '--dry-run');
    expect(dry.code, dry.stderr).toBe(0);
    expect((dry.json.sessions as { outcome: string }[]).map((r) => r.outcome)).toEqual([
      'would-sweep',
      'would-sweep',
    ]);
    // The local session's dry run names each process its sweep would stop: the leftover among them.
    type Id = { pid: number; startTime: number };
    const key = (p: Id) => `${p.pid}:${p.startTime}`;
    const sessionsOf = (json: Record<string, unknown>) =>
      json.sessions as { where: string; wouldStop?: Id[]; report: { stopped: Id[] } | null }[];
    const wouldStop = sessionsOf(dry.json).find((x) => x.where === 'local')?.wouldStop ?? [];
    const local = s.local[0]?.leftover as ProcessId;
    expect(wouldStop.map(key), 'the dry run does not name the leftover').toContain(key(local));
    await new Promise((r) => setTimeout(r, 300));
    expect(alive(leftovers), 'a dry run ended a process').toEqual(leftovers.map((p) => describeProcess(p)));
    const ledger = await Ledger.open(path);
    expect((await ledger.list()).map((r) => r.state)).toEqual(['running', 'running']);
    const real = await recoverCli(path);
    expect(real.code, real.stderr).toBe(0);
    const stopped = sessionsOf(real.json).find((x) => x.where === 'local')?.report?.stopped ?? [];
    expect(
      wouldStop.map(key).filter((k) => !stopped.map(key).includes(k)),
      'named by the dry run, not stopped by the real one',
    ).toEqual([]);
    await waitFor(
      `the leftovers gone (alive: ${alive(leftovers)})`,
      () => alive(leftovers).length === 0,
      3000,
    );
    expect((await ledger.list()).map((r) => r.state)).toEqual(['recovered', 'recovered']);
    await ledger.close();
  });

  it('parks a sandbox session whose channel cannot reach its target, names it, and exits 1', async () => {
    const path = join(tempDir(), 'ledger.db');
    const ledger = await Ledger.open(path);
    const tag = createTag().name;
    // A target that is gone, as a stopped container's init is — but a pid no process can take
    // (above pid_max): a stopped container's init pid can be reused by the time recover runs on
    // a busy machine, and the channel then enters whatever took it.
    const pidMax = Number(readFileSync('/proc/sys/kernel/pid_max', 'utf8'));
    const dead = { prefix: ['nsenter', '-t', String(pidMax + 1), '-a'] };
    await beginOrphaned(ledger, tag, {
      command: ['sleep', '600'],
      location: { kind: 'sandbox', channel: dead.prefix },
    });
    const { code, json, stderr } = await recoverCli(path, '--channel-budget', '1s');
    expect(code, `exit status with a parked session (stderr: ${stderr})`).toBe(1);
    const entry = (json.sessions as { tag: string; outcome: string; reason: string; where: string }[])[0];
    expect(entry?.tag).toBe(tag);
    expect(entry?.outcome).toBe('parked');
    expect(entry?.where).toBe(dead.prefix.join(' '));
    expect(entry?.reason).toMatch(/could not reach/);
    expect((await ledger.get(tag))?.state).toBe('parked');
    await ledger.close();
  });

  it('ends a kept process whose TTL has passed and spares one whose TTL has not, in a session it recovers', async () => {
    const path = join(tempDir(), 'ledger.db');
    const ledger = await Ledger.open(path);
    const tag = createTag().name;
    // Two carriers of the session's tag, as a kept server and its sibling would be.
    const start = () => {
      const child = spawnChild('sleep', ['600'], { env: { ...process.env, [tag]: '1' }, stdio: 'ignore' });
      const id = identityOf(child.pid ?? 0) as ProcessId;
      started.push(id);
      return id;
    };
    const expired = start();
    const within = start();
    const now = Date.now();
    const kept = (id: ProcessId, expiresAt: number) => ({
      ...id,
      cmdline: 'sleep 600',
      match: 'sleep *',
      owner: 'test',
      expiresAt,
    });
    await beginOrphaned(ledger, tag, {
      command: ['server'],
      kept: [kept(expired, now - 1000), kept(within, now + 600_000)],
    });
    const { code, json, stderr } = await recoverCli(path);
    expect(code, stderr).toBe(0);
    expect(json.sessions[0]?.outcome).toBe('recovered');
    expect(isAlive(expired), `the expired kept process ${describeProcess(expired)} survived`).toBe(false);
    expect(isAlive(within), 'the kept process within its TTL was ended').toBe(true);
    const record = await ledger.get(tag);
    expect(record?.state).toBe('recovered');
    expect(record?.kept.map((k) => k.pid)).toEqual([within.pid]);
    await ledger.close();
  });
});
