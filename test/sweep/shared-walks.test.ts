// Sweeps ending together share process-table walks, but never a walk older than the round it
// serves: a sweep started on an event read in a later task of the event loop walks again.
// (CI caught the stale walk once: a daemon's copy, reparented to the helper before the command
// ended, was attributed to its exited parent because the first round used the previous loop
// iteration's walk.)
import { spawn as spawnChild } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, type SweepProgress, sweep } from '../../src/index.js';
import type { Identity } from '../../src/proc/identity.js';
import { snapshotCount } from '../../src/proc/snapshot.js';
import { environOf, hasEntry, identityOf, isAlive } from '../support/proc.js';

const started: Identity[] = [];

afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

// Busy-waits `ms` (so that a timer set before it has expired when this callback returns).
function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe('shared process-table walks', () => {
  it('a sweep started in a later task of the same loop iteration does not use the earlier walk', async () => {
    const tag = createTag();
    const firstRound = await new Promise<{
      progress: SweepProgress;
      child: Identity;
      said: string;
      other: Promise<unknown>;
    }>((resolve, reject) => {
      // Check phase of iteration i: another sweep walks the table (its walk would be kept
      // until the check phase of iteration i + 1).
      setImmediate(() => {
        const other = sweep({ tag: createTag() });
        setTimeout(() => {
          // Timers phase of iteration i + 1, a new task: a tagged process starts, then its
          // sweep begins. Its first round must see the process.
          const child = spawnChild('sleep', ['30'], {
            env: { ...process.env, [tag.name]: '1' },
            stdio: 'ignore',
          });
          const id = child.pid === undefined ? undefined : identityOf(child.pid);
          if (!id) return reject(new Error('sleep did not start'));
          started.push(id);
          let first: SweepProgress | undefined;
          const walksBefore = snapshotCount();
          const done = sweep({
            tag,
            graceMs: 2000,
            onProgress: (p) => {
              first ??= p;
            },
          });
          if (!first) return reject(new Error('the first round did not run at once'));
          // What a miss would need told apart: a walk reused (no new one) or the sleep's environ.
          const said = `walks by the first round: ${snapshotCount() - walksBefore}; the sleep's environ holds the tag: ${hasEntry(environOf(id.pid), `${tag.name}=1`)}`;
          resolve({ progress: first, child: id, said, other: Promise.all([done, other]) });
        }, 1);
        spin(3); // the timer above has expired before this iteration's check phase ends
      });
    });
    expect(firstRound.progress.waiting, `the first round found the tagged process (${firstRound.said})`).toBe(
      1,
    );
    await firstRound.other;
    expect(isAlive(firstRound.child), 'the tagged process is gone').toBe(false);
  });

  it('sweeps started in one task share their first walk, and their later rounds share walks too', async () => {
    const before = snapshotCount();
    const t0 = performance.now();
    const sweeps = Array.from({ length: 10 }, () => sweep({ tag: createTag() }));
    const t1 = performance.now();
    const firstWalks = snapshotCount() - before;
    const reports = await Promise.all(sweeps);
    const laterWalks = snapshotCount() - before - firstWalks;
    expect(
      reports.map((r) => r.timings.scans),
      'each sweep of nothing scanned twice',
    ).toEqual(Array(10).fill(2));
    // At most one walk for the ten first rounds (none when a walk was made earlier in this task).
    expect(firstWalks).toBeLessThanOrEqual(1);
    // Each pause ends on the 10 ms slot after it began + 50 ms: one walk per slot those ten
    // pauses spread over (one, or two when they straddle a boundary; more only after a pause
    // of the thread between the calls).
    const slots = Math.ceil((t1 + 50) / 10) - Math.ceil((t0 + 50) / 10) + 1;
    expect(laterWalks).toBeLessThanOrEqual(slots);
    expect(laterWalks).toBeGreaterThanOrEqual(1);
  });
});
