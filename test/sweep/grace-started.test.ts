// A sweep told when its caller's own stop signal went out (`graceStartedAt`) counts its TERM phase
// from then: one grace for the command and what it left (docs/cli.md#tether-run). A grace spent
// already sends TERM and goes on to KILL at once; a part of one is what the TERM phase waits.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, sweep } from '../../src/index.js';
import { ticksNow } from '../../src/proc/identity.js';
import { identityOf, isAlive, type ProcessId, readStat } from '../support/proc.js';
import { waitFor } from '../support/zoo.js';

const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

const GRACE_MS = 5000;

// A carrier of `tag` that ignores TERM (a sleep exec'd with TERM ignored), by identity.
async function termIgnoringCarrier(tag: string): Promise<ProcessId> {
  const child = spawn('sh', ['-c', `trap '' TERM; exec sleep 300.${randomBytes(3).readUIntBE(0, 3)}`], {
    env: { PATH: process.env.PATH, [tag]: '1' },
    stdio: 'ignore',
    detached: true,
  });
  child.unref();
  const pid = child.pid;
  if (pid === undefined) throw new Error('premise broken: the carrier did not start');
  let id: ProcessId | undefined;
  // Once it is sleep, its TERM is ignored (the trap ran before the exec).
  await waitFor('the carrier to exec its sleep', () => {
    id = readStat(pid)?.comm === 'sleep' ? identityOf(pid) : undefined;
    return id !== undefined;
  });
  started.push(id as ProcessId);
  return id as ProcessId;
}

describe('a sweep whose grace began before it', () => {
  it('sends TERM then KILL at once when the grace is spent, not a second grace', async () => {
    const tag = createTag();
    const notBefore = ticksNow();
    const carrier = await termIgnoringCarrier(tag.name);
    const began = performance.now();
    const report = await sweep({ tag, notBefore, graceMs: GRACE_MS, graceStartedAt: began - GRACE_MS });
    const tookMs = performance.now() - began;
    expect(isAlive(carrier), `the TERM-ignoring carrier ${carrier.pid} survived the sweep`).toBe(false);
    expect(report.stopped.find((r) => r.pid === carrier.pid)).toMatchObject({
      signals: ['SIGTERM', 'SIGKILL'],
      endedBy: 'SIGKILL',
    });
    expect(tookMs, `took ${Math.round(tookMs)} ms: a second grace would be ≥ ${GRACE_MS} ms`).toBeLessThan(
      GRACE_MS / 2,
    );
  });

  it('waits in its TERM phase only for what is left of the grace', async () => {
    const tag = createTag();
    const notBefore = ticksNow();
    const carrier = await termIgnoringCarrier(tag.name);
    const began = performance.now();
    const leftMs = 1500;
    const report = await sweep({
      tag,
      notBefore,
      graceMs: GRACE_MS,
      graceStartedAt: began - (GRACE_MS - leftMs),
    });
    const tookMs = performance.now() - began;
    expect(isAlive(carrier), `the TERM-ignoring carrier ${carrier.pid} survived the sweep`).toBe(false);
    expect(report.stopped.find((r) => r.pid === carrier.pid)?.endedBy).toBe('SIGKILL');
    // A timer never fires early; the whole grace would be ≥ 5000 ms.
    expect(tookMs, `took ${Math.round(tookMs)} ms for ${leftMs} ms of grace left`).toBeGreaterThan(
      leftMs - 100,
    );
    expect(tookMs, `took ${Math.round(tookMs)} ms for ${leftMs} ms of grace left`).toBeLessThan(
      leftMs + (GRACE_MS - leftMs) / 2,
    );
  });
});
