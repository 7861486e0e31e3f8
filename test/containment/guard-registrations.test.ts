// The guard's registrations file on its writing side (docs/guard.md, "Registrations"): writers
// (`tether guard allow`, sessions that end with kept processes) each read, merge and rename, under
// one lock, so writers at once lose none of one another's entries; a lock its writer left behind
// is broken once stale. Real processes write (the built module, dist/), started in one millisecond.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  addRegistrationsSync,
  LOCK_STALE_MS,
  registrationsPath,
} from '../../src/containment/guard-registrations.js';
import { ROOT } from '../support/paths.js';
import { tempDir } from '../support/zoo.js';

const MODULE = join(ROOT, 'dist/containment/guard-registrations.js');

// A writer process: sleeps until 3 ms before `at` (epoch ms), spins to it, then adds
// `pid 1 <in an hour>`.
const writerScript = `
const [module, dir, pid, at] = process.argv.slice(1);
const { addRegistrationsSync } = await import(module);
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Math.max(0, Number(at) - Date.now() - 3));
while (Date.now() < Number(at)) {}
addRegistrationsSync(dir, [{ pid: Number(pid), startTime: 1, expiresAt: Date.now() + 3_600_000 }]);
`;

// A writer that takes the lock at `at`, reads, waits `hold` ms (a process descheduled between its
// read and its write), writes `pid 1 <in an hour>`, and writes again when its lock was broken
// meanwhile: the loop of src/guard/registrations.ts (addRegistrations), by the module's API.
const slowWriterScript = `
const [module, dir, pid, at, hold] = process.argv.slice(1);
const { lockRegistrations, readRegistrationsSync, writeRegistrations, LOCK_ATTEMPTS } = await import(module);
const cell = new Int32Array(new SharedArrayBuffer(4));
Atomics.wait(cell, 0, 0, Math.max(0, Number(at) - Date.now()));
for (let attempt = 1; ; attempt++) {
  const lock = lockRegistrations(dir);
  try {
    const old = readRegistrationsSync(dir);
    if (attempt === 1) Atomics.wait(cell, 0, 0, Number(hold));
    writeRegistrations(dir, old.entries, [{ pid: Number(pid), startTime: 1, expiresAt: Date.now() + 3_600_000 }]);
    if (lock.held() || attempt >= LOCK_ATTEMPTS) break;
  } finally {
    lock();
  }
}
`;

const entriesOf = (dir: string) =>
  readFileSync(registrationsPath(dir), 'utf8')
    .split('\n')
    .filter((l) => /^\d/.test(l))
    .map((l) => Number(l.split(' ')[0]));

// One writer process per pid, each adding its entry to `dir` at the same moment `at`: their exit codes.
function writers(dir: string, pids: number[], at: number): Promise<(number | null)[]> {
  return Promise.all(
    pids.map(
      (pid) =>
        new Promise<number | null>((resolve) => {
          const args = ['--input-type=module', '-e', writerScript, MODULE, dir, String(pid), String(at)];
          spawn(process.execPath, args, { stdio: 'inherit' }).on('exit', resolve);
        }),
    ),
  );
}

describe('the registrations file on its writing side', () => {
  it('16 writers started in the same millisecond lose none of one another’s entries', async () => {
    if (!existsSync(MODULE)) throw new Error(`premise broken: ${MODULE} is not built`);
    const dir = tempDir();
    const at = Date.now() + 1500; // every writer started and waiting by then
    const pids = Array.from({ length: 16 }, (_, i) => 5000 + i);
    const codes = await writers(dir, pids, at);
    expect(codes, 'a writer failed').toEqual(pids.map(() => 0));
    const lost = pids.filter((p) => !entriesOf(dir).includes(p));
    expect(lost, `entries lost to a concurrent writer (of ${pids.length})`).toEqual([]);
    expect(existsSync(`${registrationsPath(dir)}.lock`), 'the lock was left behind').toBe(false);
  }, 30_000);

  it('16 writers started together over a stale lock lose none of one another’s entries, 4 rounds: one breaking it never takes another’s fresh lock for it', async () => {
    if (!existsSync(MODULE)) throw new Error(`premise broken: ${MODULE} is not built`);
    for (let round = 0; round < 4; round++) {
      const dir = tempDir();
      const lock = `${registrationsPath(dir)}.lock`;
      writeFileSync(lock, 'a writer that died\n');
      const old = (Date.now() - LOCK_STALE_MS - 1000) / 1000;
      utimesSync(lock, old, old);
      const at = Date.now() + 1500;
      const pids = Array.from({ length: 16 }, (_, i) => 6000 + 100 * round + i);
      const codes = await writers(dir, pids, at);
      expect(codes, `round ${round}: a writer failed`).toEqual(pids.map(() => 0));
      const lost = pids.filter((p) => !entriesOf(dir).includes(p));
      expect(lost, `round ${round}: entries lost over a stale lock`).toEqual([]);
      expect(existsSync(lock), `round ${round}: the lock was left behind`).toBe(false);
    }
  }, 60_000);

  it('a writer slower than LOCK_STALE_MS between its read and its write keeps its lock while alive: 15 writers started meanwhile lose nothing', async () => {
    // A loaded machine deschedules a writer for seconds; here it waits on purpose, holding the
    // lock between its read and its write as `tether guard allow` does (src/guard/registrations.ts).
    // Its lock was broken at LOCK_STALE_MS, the 15 wrote, and its rename put back the file it had
    // read, without their entries (15 of 15 lost).
    if (!existsSync(MODULE)) throw new Error(`premise broken: ${MODULE} is not built`);
    const dir = tempDir();
    const at = Date.now() + 1500;
    const slow = new Promise<number | null>((resolve) => {
      const args = [
        '--input-type=module',
        '-e',
        slowWriterScript,
        MODULE,
        dir,
        '7000',
        String(at - 200),
        String(LOCK_STALE_MS + 300),
      ];
      spawn(process.execPath, args, { stdio: 'inherit' }).on('exit', resolve);
    });
    const pids = Array.from({ length: 15 }, (_, i) => 7001 + i);
    const [code, codes] = await Promise.all([slow, writers(dir, pids, at)]);
    expect([code, ...codes], 'a writer failed').toEqual([0, ...pids.map(() => 0)]);
    const lost = [7000, ...pids].filter((p) => !entriesOf(dir).includes(p));
    expect(lost, 'entries lost to a slow writer’s lock broken as stale').toEqual([]);
    expect(existsSync(`${registrationsPath(dir)}.lock`), 'the lock was left behind').toBe(false);
  }, 30_000);

  it('a lock its writer took and then died holding is broken once stale', async () => {
    if (!existsSync(MODULE)) throw new Error(`premise broken: ${MODULE} is not built`);
    const dir = tempDir();
    const script = `const { lockRegistrations } = await import(process.argv[1]); lockRegistrations(process.argv[2]); process.exit(0);`;
    const code = await new Promise<number | null>((resolve) => {
      spawn(process.execPath, ['--input-type=module', '-e', script, MODULE, dir], { stdio: 'inherit' }).on(
        'exit',
        resolve,
      );
    });
    expect(code).toBe(0);
    expect(existsSync(`${registrationsPath(dir)}.lock`), 'premise: the dead writer’s lock').toBe(true);
    addRegistrationsSync(dir, [{ pid: 4343, startTime: 1, expiresAt: Date.now() + 60_000 }]);
    expect(entriesOf(dir)).toEqual([4343]);
    expect(existsSync(`${registrationsPath(dir)}.lock`), 'the lock was left behind').toBe(false);
  }, 30_000);

  it('a lock left by a writer that died holding it is broken once stale', () => {
    const dir = tempDir();
    const lock = `${registrationsPath(dir)}.lock`;
    writeFileSync(lock, '');
    const old = (Date.now() - LOCK_STALE_MS - 1000) / 1000;
    utimesSync(lock, old, old);
    addRegistrationsSync(dir, [{ pid: 4242, startTime: 1, expiresAt: Date.now() + 60_000 }]);
    expect(entriesOf(dir)).toEqual([4242]);
    expect(existsSync(lock), 'the lock was left behind').toBe(false);
  });
});
