// The supervisor killed by SIGKILL mid-session: no exit hook runs and no sweep
// happens in it, yet every session process is gone within grace + 1 s — the helper's dead
// man's switch (its control pipe reaches EOF) ends its subtree, TERM then KILL, and removes the
// session cgroup. Decoys survive.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Identity } from '../../src/index.js';
import { runNode } from '../support/node.js';
import { BUILD, FIXTURES } from '../support/paths.js';
import { identityOf, isAlive, ppidOf } from '../support/proc.js';
import {
  cleanup,
  type Decoy,
  describeProcess,
  type Recorded,
  readPidfile,
  sleep,
  started,
  startFileDecoys,
  startTagDecoys,
  tempDir,
  waitFor,
} from '../support/zoo.js';
import { cgroup2Mount, cgroupDirOf, exeOf, isHelper, workerSubtreeLeft } from './support.js';

const GRACE_MS = 1000;

let server: { decoy: Decoy; port: number };
let runner: Decoy[];

beforeAll(async () => {
  ({ server, runner } = await startFileDecoys());
});

afterEach(() => cleanup());

afterAll(async () => {
  cleanup([server.decoy]);
  expect(await workerSubtreeLeft(), 'processes left under the test worker').toEqual([]);
});

interface Supervised {
  supervisor: Identity;
  helper: Identity;
  payload: Identity;
  recorded: Recorded[];
  cgroup: string;
  decoys: Decoy[];
  pidfile: string;
}

/** Starts test/fixtures/node/supervisor.mjs and waits until its payload's leftovers are recorded. */
async function startSupervisor(): Promise<Supervised> {
  const dir = tempDir();
  const pidfile = join(dir, 'pids');
  const node = runNode([join(FIXTURES, 'node/supervisor.mjs'), pidfile, String(GRACE_MS), BUILD]);
  await waitFor(
    `the supervisor to say READY (stdout: ${node.stdout}, stderr: ${node.stderr})`,
    () => /^(NOT )?READY$/m.test(node.stdout),
    20_000,
  );
  expect(node.stdout, node.stderr).toMatch(/^READY$/m);
  const tag = /^TAG (TETHER_SESSION_[0-9a-f]{32})$/m.exec(node.stdout)?.[1] ?? '';
  const payloadPid = Number(/^PAYLOAD (\d+)$/m.exec(node.stdout)?.[1]);
  const supervisor = identityOf(node.child.pid ?? 0);
  const payload = identityOf(payloadPid);
  if (!supervisor || !payload) throw new Error(`supervisor or payload gone before the test: ${node.stdout}`);
  started.push(payload);
  const helperPid = ppidOf(payloadPid);
  const helper = identityOf(helperPid);
  expect(isHelper(helperPid), `the payload's parent ${helperPid} (${exeOf(helperPid)}) is the helper`).toBe(
    true,
  );
  expect(ppidOf(helperPid), "the helper is the supervisor's child").toBe(supervisor.pid);
  if (!helper) throw new Error('helper gone');
  const recorded: Recorded[] = [{ label: 'payload', identity: payload, cmdline: '' }];
  for (const line of readPidfile(pidfile)) {
    const identity =
      line.startTime !== undefined ? { pid: line.pid, startTime: line.startTime } : identityOf(line.pid);
    if (!identity || !isAlive(identity))
      throw new Error(`${line.label} pid ${line.pid} gone before the kill`);
    started.push(identity);
    recorded.push({
      label: line.label,
      identity,
      cmdline: readFileSync(`/proc/${line.pid}/cmdline`, 'latin1'),
    });
  }
  expect(recorded.map((r) => r.label).sort()).toEqual(
    ['clearenv-daemon', 'ignores-term', 'nohup', 'payload', 'setsid-env-i'].sort(),
  );
  // Premise: every one of them is in the session's cgroup and under the helper.
  const cgroup = cgroupDirOf(payloadPid) ?? '';
  expect(cgroup).toMatch(new RegExp(`/tether-${tag.slice(-32)}$`));
  for (const r of recorded) {
    expect(cgroupDirOf(r.identity.pid), `${r.label} is in the session cgroup`).toBe(cgroup);
    let p = r.identity.pid;
    while (p > 1 && !isHelper(p)) p = ppidOf(p);
    expect(p, `${r.label} is a descendant of the helper`).toBe(helperPid);
  }
  const decoys = await startTagDecoys(tag);
  for (const d of decoys) started.push(d.identity);
  return { supervisor, helper, payload, recorded, cgroup, decoys, pidfile };
}

function alive(recorded: Recorded[]): string[] {
  return recorded.filter((r) => isAlive(r.identity)).map((r) => `${r.label} ${describeProcess(r.identity)}`);
}

describe('the supervisor is killed with SIGKILL mid-session', () => {
  it('every session process is gone within grace + 1 s, the session cgroup is removed, the decoys survive', async () => {
    const s = await startSupervisor();
    const killedAt = performance.now();
    process.kill(s.supervisor.pid, 'SIGKILL');
    await waitFor(
      `every session process gone within ${GRACE_MS} + 1000 ms of the SIGKILL (alive: ${alive(s.recorded)})`,
      () => alive(s.recorded).length === 0,
      GRACE_MS + 1000,
    );
    const goneMs = performance.now() - killedAt;
    expect(goneMs).toBeLessThanOrEqual(GRACE_MS + 1000);
    await waitFor(`the session cgroup ${s.cgroup} removed`, () => !existsSync(s.cgroup), 1000);
    await waitFor('the helper to exit after its dead man’s switch', () => !isAlive(s.helper), 1000);
    for (const d of [...s.decoys, server.decoy, ...runner]) {
      expect(isAlive(d.identity), `decoy "${d.label}" ${describeProcess(d.identity)} survived`).toBe(true);
    }
  });

  it('the leftover that ignores TERM gets TERM, outlives the grace, and ends by KILL after it', async () => {
    const s = await startSupervisor();
    const stubborn = s.recorded.find((r) => r.label === 'ignores-term');
    if (!stubborn) throw new Error('no TERM-ignoring leftover recorded');
    const others = s.recorded.filter((r) => r !== stubborn);
    const killedAt = performance.now();
    process.kill(s.supervisor.pid, 'SIGKILL');
    // TERM phase: the others end at their TERM; the stubborn one logs its TERM and stays.
    await waitFor(
      `the others gone at TERM (alive: ${alive(others)})`,
      () => alive(others).length === 0,
      GRACE_MS - 300,
    );
    const log = `${s.pidfile}.term`;
    await waitFor(
      'the TERM-ignoring leftover to log its TERM',
      () => existsSync(log) && readFileSync(log, 'latin1').includes(`${stubborn.identity.pid} term`),
      GRACE_MS - 300,
    );
    const atTerm = performance.now() - killedAt;
    expect(
      isAlive(stubborn.identity),
      `still alive ${Math.round(atTerm)} ms after the SIGKILL (grace ${GRACE_MS})`,
    ).toBe(true);
    await sleep(Math.max(0, GRACE_MS - 200 - (performance.now() - killedAt)));
    expect(isAlive(stubborn.identity), 'still alive 200 ms before the grace ends').toBe(true);
    await waitFor(
      'the TERM-ignoring leftover to end by KILL',
      () => !isAlive(stubborn.identity),
      GRACE_MS + 1000,
    );
    const goneMs = performance.now() - killedAt;
    expect(goneMs, 'it ended after the grace').toBeGreaterThanOrEqual(GRACE_MS - 100);
    expect(goneMs, 'it ended within grace + 1 s').toBeLessThanOrEqual(GRACE_MS + 1000);
    await waitFor(`the session cgroup ${s.cgroup} removed`, () => !existsSync(s.cgroup), 1000);
  });
});

describe('the supervisor killed by SIGKILL once its command ended with nothing left', () => {
  it('leaves no session cgroup: the idle helper kept for it removes it', async () => {
    const node = runNode([join(FIXTURES, 'node/idle-supervisor.mjs')]);
    const { code, stdout, stderr } = await node.done;
    expect(code, `the supervisor did not die by SIGKILL: ${stderr}`).toBeNull();
    const rel = /^CGROUP (\/\S*tether-[0-9a-f]{32})$/m.exec(stdout)?.[1];
    expect(rel, `premise broken: the command was not in a session cgroup: ${stdout}${stderr}`).toBeDefined();
    const dir = join(cgroup2Mount() ?? '/nonexistent', rel ?? '');
    for (let i = 0; i < 100 && existsSync(dir); i++) await sleep(20);
    expect(existsSync(dir), `${dir} is left behind`).toBe(false);
  });
});
