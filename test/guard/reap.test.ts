// The init's reaper, in this worker (a child subreaper: test/support/reaper.ts): it reaps a
// zombie reparented to it, with its status, and never one it was told libuv owns — a command
// Node spawned keeps its zombie until libuv reaps it and reports the exit. Each zombie is made
// and reaped within one synchronous stretch, so neither libuv nor the worker's own reaper (timer
// passes) can act in between.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { becomeSubreaper, type Reaped, Reaper } from '../../src/guard/reap.js';
import { readStat, stateOf } from '../support/proc.js';

/** Blocks the thread (no event loop turn) until `check` holds, at most `ms`. */
function spinUntil(what: string, ms: number, check: () => boolean): void {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
  }
}

describe('the init reaper', () => {
  it('becomes a child subreaper (this worker is not PID 1)', () => {
    expect(becomeSubreaper()).toEqual({ mode: 'subreaper' });
  });

  it('reaps a zombie reparented to it, with its exit status', () => {
    const reaped: Reaped[] = [];
    const reaper = new Reaper('/proc', (r) => reaped.push(r));
    // sh starts an orphan that exits 7 once sh has gone; spawnSync waits for sh alone.
    const r = spawnSync('sh', ['-c', 'sh -c "sleep 0.2; exit 7" >/dev/null & echo $!'], {
      encoding: 'latin1',
    });
    const orphan = Number(r.stdout.trim());
    expect(readStat(orphan)?.ppid, 'premise broken: the orphan was not reparented to this worker').toBe(
      process.pid,
    );
    spinUntil(`orphan ${orphan} to become a zombie`, 5_000, () => stateOf(orphan) === 'Z');
    expect(reaper.pass()).toBe(1);
    expect(stateOf(orphan), 'the zombie is still in /proc').toBe('gone');
    expect(reaped).toEqual([{ pid: orphan, status: 7 << 8 }]);
  });

  it("never reaps a spared child: Node's own child keeps its zombie until libuv reports its exit", async () => {
    const reaper = new Reaper();
    const child = spawn('sh', ['-c', 'exit 5'], { stdio: 'ignore' });
    const pid = child.pid as number;
    reaper.spare(pid);
    // No turn of the event loop until the pass has run: libuv cannot have reaped it yet.
    spinUntil(`child ${pid} to become a zombie`, 5_000, () => stateOf(pid) === 'Z');
    reaper.pass();
    expect(stateOf(pid), "the reaper took the spared child's zombie (libuv would never see its exit)").toBe(
      'Z',
    );
    const [code] = await once(child, 'exit');
    expect(code).toBe(5);
    expect(reaper.count).toBe(0);
  });
});
