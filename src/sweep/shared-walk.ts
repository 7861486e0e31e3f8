// One process-table walk shared by the sweeps that end together (src/sweep/loop.ts's async
// driver waits on the grid below; src/sweep/run.ts takes its walks here).
import { type Snapshot, takeSnapshot, type WalkEnviron } from '../proc/snapshot.js';

// Sweeps ending together share each round's process-table walk, but a walk serves a round only
// if it shows the table as it was when that round became due, never earlier:
// - a sweep's first round is due when the sweep starts, on an event read in the current task
//   of the event loop (a command's end; one callback and the promise jobs it sets off): it
//   takes a walk made in this task, or a new one. (A walk from an earlier task showed a
//   daemon's copy still under its parent, which had exited before the command ended.)
// - a later round is due at the end of its pause: the pauses end on a shared 10 ms grid, and a
//   round takes any walk of this loop iteration made since its pause ended.
let turnSnapshot: Snapshot | undefined;
let walkedInThisTask = false;
const SHARED_GRID_MS = 10;
const gridWaiters = new Map<number, Array<(endedAt: number) => void>>();

/**
 * A walk of `procRoot` fresh enough for this round (see above), the last one or a new one.
 * `dueAt`: when a later round's pause ended (performance.now() ms); undefined for a first round.
 * `environ`: what a new walk also reads (`takeSnapshot`); a walk taken as it was may hold other
 * environs or none (the scan reads what it lacks). Throws what `takeSnapshot` throws
 * (`NoProcError`, EMFILE…).
 */
export function sharedSnapshot(procRoot: string, dueAt: number | undefined, environ?: WalkEnviron): Snapshot {
  const last = turnSnapshot;
  if (last?.procRoot === procRoot && (dueAt === undefined ? walkedInThisTask : last.takenAt >= dueAt)) {
    return last;
  }
  const snapshot = takeSnapshot(procRoot, environ);
  turnSnapshot = snapshot;
  walkedInThisTask = true;
  // A tick queued from a promise job runs once the job queue is drained: the end of the task.
  process.nextTick(() => {
    if (turnSnapshot === snapshot) walkedInThisTask = false;
  });
  setImmediate(() => {
    if (turnSnapshot === snapshot) turnSnapshot = undefined;
  });
  return snapshot;
}

/**
 * Waits at least `ms`, ending on the next multiple of SHARED_GRID_MS (10 ms) of the monotonic
 * clock; resolves to the moment the pause ended (performance.now() ms). Never rejects.
 */
export function gridDelay(ms: number): Promise<number> {
  const slot = Math.ceil((performance.now() + ms) / SHARED_GRID_MS) * SHARED_GRID_MS;
  return new Promise((resolve) => {
    const waiters = gridWaiters.get(slot);
    if (waiters) {
      waiters.push(resolve);
      return;
    }
    gridWaiters.set(slot, [resolve]);
    setTimeout(
      () => {
        // The pause ended at the slot, or now if Node's timer fired a fraction of a
        // millisecond before it (its clock is rounded to milliseconds).
        const endedAt = Math.min(slot, performance.now());
        const all = gridWaiters.get(slot) ?? [];
        gridWaiters.delete(slot);
        for (const wake of all) wake(endedAt);
      },
      Math.max(0, slot - performance.now()),
    );
  });
}
