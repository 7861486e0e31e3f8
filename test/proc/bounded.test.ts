// Bounded /proc reads: a process that points its environ or cmdline at gigabytes (prctl(2)
// PR_SET_MM_MAP, unprivileged) neither grows the supervisor's memory nor stops the sweep.
// The environ bomb (c/environ-bomb.c) maps untouched memory that reads as NULs.
import { type ChildProcess, spawn as spawnChild } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Identity, session } from '../../src/index.js';
import { readCmdline } from '../../src/proc/details.js';
import { readEnviron } from '../../src/proc/environ.js';
import { sharedBuffer } from '../../src/proc/read.js';
import { BUILD } from '../support/paths.js';
import { identityOf, isAlive, readStat } from '../support/proc.js';
import { readPidfile, tempDir, waitFor } from '../support/zoo.js';

const BOMB = join(BUILD, 'zoo-environ-bomb');
const MIB = 1024 * 1024;
/** The shared buffer's size before any of this: 64 KiB, in the old code and the new. */
const BUFFER_BYTES = 64 * 1024;

const started: Identity[] = [];
const children: ChildProcess[] = [];

// Ground truth and cleanup read through test/support/proc.ts, not src/: they must hold even when
// the code under test broke its reader (the old reader's 2 GiB buffer made every later read throw).
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** env_end - env_start (fields 50, 51 of /proc/<pid>/stat; shown to root), or 0 when unread. */
function environSpan(pid: number): number {
  const f = readStat(pid)?.fields;
  return f ? Number(f[51]) - Number(f[50]) : 0;
}

function uidOf(pid: number): number | undefined {
  const m = readFileSync(`/proc/${pid}/status`, 'latin1').match(/^Uid:\s+(\d+)/m);
  return m ? Number(m[1]) : undefined;
}

/** Starts a bomb of `mib` MiB as uid 65534, outside any session; waits until its environ is moved. */
async function startBystander(mib: number): Promise<Identity> {
  const pidfile = join(tempDir(), 'pids');
  const child = spawnChild(BOMB, [String(mib), pidfile, '65534', 'fg'], { stdio: 'ignore' });
  children.push(child);
  const id = child.pid === undefined ? undefined : identityOf(child.pid);
  if (!id) throw new Error('premise broken: the environ bomb did not start');
  started.push(id);
  await waitFor(
    `the bystander bomb ${id.pid} to move its environ`,
    () => environSpan(id.pid) === mib * MIB,
    5000,
  );
  expect(uidOf(id.pid), 'premise broken: the bystander runs as uid 65534').toBe(65534);
  return id;
}

/** A procfs-shaped directory holding one environ file, for the chunk-boundary cases. */
function fakeEnviron(content: Buffer): { root: string; pid: number } {
  const root = tempDir();
  mkdirSync(join(root, '4242'));
  writeFileSync(join(root, '4242', 'environ'), content);
  return { root, pid: 4242 };
}

describe('bounded reads', () => {
  const entry = `TETHER_SESSION_${'0123456789abcdef'.repeat(2)}=1`;

  it('finds a session record split across two reads at every offset around the buffer edge', () => {
    for (let at = BUFFER_BYTES - entry.length - 2; at <= BUFFER_BYTES + 1; at++) {
      const filler = `F=${'f'.repeat(at - 3)}`; // a record of at - 1 bytes, then its NUL
      const { root, pid } = fakeEnviron(Buffer.from(`${filler}\0${entry}\0HOME=/\0`));
      const r = readEnviron(root, pid, false);
      expect(r.kind === 'ok' && r.entries, `the record at byte ${at}`).toEqual([entry]);
    }
  });

  it('does not take a longer record sharing the prefix, wherever the buffer edge cuts it', () => {
    const longer = [`X${entry}`, `${entry}0`, `${entry.slice(0, -2)}_X=1`, `OTHER=${entry}`];
    for (const record of longer) {
      for (let at = BUFFER_BYTES - record.length - 1; at <= BUFFER_BYTES + 1; at++) {
        const filler = `F=${'f'.repeat(at - 3)}`;
        const { root, pid } = fakeEnviron(Buffer.from(`${filler}\0${record}\0`));
        const r = readEnviron(root, pid, false);
        expect(r.kind === 'ok' && r.entries, `"${record.slice(0, 20)}…" at byte ${at}`).toEqual([]);
      }
    }
  });

  it('finds a record after one longer than the whole buffer', () => {
    const { root, pid } = fakeEnviron(Buffer.from(`BIG=${'b'.repeat(3 * BUFFER_BYTES)}\0${entry}`));
    const r = readEnviron(root, pid, false);
    expect(r).toMatchObject({ kind: 'ok', entries: [entry], oversized: false });
  });

  it('reads 6 MiB of an environ and no more: an entry within is found, one beyond is unknown (oversized)', () => {
    const block = (tagAt: number, size: number) => {
      const b = Buffer.alloc(size, 0);
      b.write(entry, tagAt + 1, 'latin1');
      return b;
    };
    const exact = fakeEnviron(block(6 * MIB - entry.length - 2, 6 * MIB));
    expect(readEnviron(exact.root, exact.pid, false), 'an environ of exactly 6 MiB').toMatchObject({
      entries: [entry],
      oversized: false,
    });
    const early = fakeEnviron(block(1024, 8 * MIB));
    expect(readEnviron(early.root, early.pid, false)).toMatchObject({ entries: [entry], oversized: true });
    const late = fakeEnviron(block(7 * MIB, 8 * MIB));
    const r = readEnviron(late.root, late.pid, false);
    expect(r).toMatchObject({ entries: [], oversized: true });
    // The chunk that crossed 6 MiB, then the one byte that showed the environ goes on.
    expect(r.kind === 'ok' && r.bytes, 'bytes read').toBeLessThanOrEqual(6 * MIB + BUFFER_BYTES + 1);
    expect(sharedBuffer().length, 'the shared buffer grew').toBe(BUFFER_BYTES);
  });

  it('caps a cmdline pointed at 1 GiB at 4 KiB and marks the cut with …', async () => {
    const bomb = await startBystander(1024);
    const cmdline = readCmdline('/proc', bomb.pid);
    expect(cmdline?.startsWith('environ-bomb xxx'), `cmdline "${cmdline?.slice(0, 40)}"`).toBe(true);
    expect(cmdline?.length).toBe(4096 + 1);
    expect(cmdline?.endsWith('x\u2026')).toBe(true);
    expect(sharedBuffer().length, 'the shared buffer grew').toBe(BUFFER_BYTES);
    // A command of exactly 4 KiB is whole, not marked.
    const root = tempDir();
    mkdirSync(join(root, '7'));
    writeFileSync(join(root, '7', 'cmdline'), `${'a'.repeat(4094)}\0b\0`);
    expect(readCmdline(root, 7)).toBe(`${'a'.repeat(4094)} b`);
  });

  it('a 1 GiB environ of a uid-65534 bystander: the leftover is still stopped, the bystander named oversized and left running, the buffer not grown', async () => {
    const s = session({ containment: ['env-tag'], graceMs: 2000, killAfterMs: 1000 });
    const bystander = await startBystander(1024);
    expect(
      bystander.startTime,
      'premise broken: the bystander started before the session',
    ).toBeGreaterThanOrEqual(s.startTicks);
    const p = s.spawn('sh', ['-c', 'sleep 300 </dev/null >/dev/null 2>&1 & echo $!'], { stdio: 'pipe' });
    let out = '';
    p.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    expect((await p).exitCode).toBe(0);
    const leftoverPid = Number(out.trim());
    const leftover = identityOf(leftoverPid);
    if (!leftover) throw new Error(`premise broken: the leftover sleep ${out.trim()} is not running`);
    started.push(leftover);

    const before = sharedBuffer().length;
    const report = await s.end();
    const json = JSON.stringify(report);

    expect(isAlive(leftover), `the tagged leftover sleep ${leftover.pid} survived the sweep: ${json}`).toBe(
      false,
    );
    expect(report.stopped.map((r) => r.pid)).toContain(leftover.pid);
    expect(
      report.warnings.map((w) => w.code),
      json,
    ).not.toContain('SCAN_FAILED');
    expect(report.complete).toBe(true);
    expect(isAlive(bystander), `the bystander ${bystander.pid} was signalled`).toBe(true);
    expect(
      report.unreadable.find((u) => u.pid === bystander.pid),
      json,
    ).toMatchObject({
      reason: 'oversized',
      uid: 65534,
      comm: 'zoo-environ-bom',
    });
    expect(report.unreadable.find((u) => u.pid === bystander.pid)?.cmdline.length).toBeLessThanOrEqual(4097);
    expect(before, 'the shared buffer before the sweep').toBe(BUFFER_BYTES);
    expect(sharedBuffer().length, 'the shared buffer grew during the sweep').toBe(BUFFER_BYTES);
  });

  it('a session daemon with a 1 GiB environ is a carrier when its entry is within 6 MiB, and named oversized when beyond', async () => {
    const s = session({ containment: ['env-tag'], graceMs: 2000, killAfterMs: 1000 });
    const dir = tempDir();
    const within = join(dir, 'within');
    const beyond = join(dir, 'beyond');
    const script = `"$1" 1024 "$2" - daemon 4096 && "$1" 1024 "$3" - daemon ${7 * MIB}`;
    const p = s.spawn('sh', ['-c', script, 'sh', BOMB, within, beyond], { stdio: 'ignore' });
    expect((await p).exitCode, 'the bombs detached').toBe(0);
    await waitFor(
      'both bombs to record themselves',
      () => readPidfile(within).length + readPidfile(beyond).length === 2,
    );
    const ids = [within, beyond].map((f) => {
      const r = readPidfile(f)[0];
      const id = { pid: r?.pid ?? 0, startTime: r?.startTime ?? -1 };
      started.push(id);
      if (!isAlive(id)) throw new Error(`premise broken: the bomb of ${f} is not running`);
      return id;
    });
    const [carrier, hidden] = ids as [Identity, Identity];
    await waitFor('both bombs to move their environs', () =>
      ids.every((id) => environSpan(id.pid) === 1024 * MIB),
    );

    const report = await s.end();
    const json = JSON.stringify(report);
    expect(isAlive(carrier), `the bomb with its entry at 4 KiB survived: ${json}`).toBe(false);
    expect(report.stopped.find((r) => r.pid === carrier.pid)?.foundBy).toBe('carrier');
    expect(isAlive(hidden), 'the bomb with its entry at 7 MiB was signalled without evidence').toBe(true);
    expect(
      report.unreadable.find((u) => u.pid === hidden.pid),
      json,
    ).toMatchObject({ reason: 'oversized', uid: 0 });
    expect(sharedBuffer().length, 'the shared buffer grew').toBe(BUFFER_BYTES);
  });
});
