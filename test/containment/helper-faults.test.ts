// The helper under faults (from a breaker's findings): stopped by its payload, killed by it,
// many commands in one session, a program that never ends its session. Ground truth from /proc.
import { execFileSync, spawn as spawnChild } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Identity, session, spawn } from '../../src/index.js';
import { counted, sample } from '../support/full.js';
import { ROOT } from '../support/paths.js';
import { childrenOf, identityOf, isAlive } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { HELPER_EXE } from './support.js';

const started: Identity[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Resolves once `pred` holds, polled every 20 ms; rejects after `ms` naming `what`. */
async function until(pred: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!pred()) {
    if (performance.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Runs `body` with TETHER_HELPER set to `path`, restoring it after. */
async function withHelper<T>(path: string, body: () => Promise<T>): Promise<T> {
  const before = process.env.TETHER_HELPER;
  process.env.TETHER_HELPER = path;
  try {
    return await body();
  } finally {
    if (before === undefined) delete process.env.TETHER_HELPER;
    else process.env.TETHER_HELPER = before;
  }
}

const FAST = { graceMs: 300, killAfterMs: 1000, outputCapMs: 300 };
/** Guards a payload's signal to its parent: only when the parent is the helper. */
const IF_HELPER = '[ "$(cat /proc/$PPID/comm)" = tether-helper ] || exit 99;';

/** Live children of this process whose command is the helper. */
function helperChildren(): number[] {
  return childrenOf(process.pid)
    .filter((s) => s.state !== 'Z' && s.comm === 'tether-helper')
    .map((s) => s.pid);
}

describe('a TETHER_HELPER that names processes outside its subtree', () => {
  // A file that speaks the protocol but names a bystander (started here, outside any session)
  // as its payload — or as itself, with the bystander's child as the payload. The bystander was
  // held, sent TERM at the end, and its child reported stopped. Now the supervisor checks,
  // before its go, that the payload's parent is the helper it spawned (docs/containment.md).
  for (const forged of ['payload', 'helper'] as const) {
    it(`a "started" line naming a bystander${forged === 'helper' ? '\'s child, under a "helper" line naming the bystander,' : ''} is refused: CONTAINMENT_UNAVAILABLE when asked for, NO_HELPER under auto, the bystander never signalled`, async () => {
      const dir = testDir('tether-forge-');
      dirs.push(dir);
      const got = join(dir, 'got-term');
      const kidFile = join(dir, 'kid');
      const n = 8000 + Math.floor(Math.random() * 900);
      const bystander = spawnChild(
        'sh',
        [
          '-c',
          `trap 'echo TERM >> ${got}' TERM; sleep ${n} & echo $! > ${kidFile}; while :; do sleep 0.1; done`,
        ],
        { stdio: 'ignore' },
      );
      const by = identityOf(bystander.pid ?? 0);
      if (!by) throw new Error('premise broken: the bystander did not start');
      started.push(by);
      await until(
        () => existsSync(kidFile) && readFileSync(kidFile, 'latin1').endsWith('\n'),
        2000,
        'the bystander child',
      );
      const kid = identityOf(Number(readFileSync(kidFile, 'latin1')));
      if (!kid) throw new Error('premise broken: the bystander has no child');
      started.push(kid);
      const [selfLine, payload] =
        forged === 'payload'
          ? ['$$ $(cut -d" " -f22 /proc/$$/stat)', by]
          : [`${by.pid} ${by.startTime}`, kid];
      const forge = join(dir, 'forge.sh');
      writeFileSync(
        forge,
        `#!/bin/bash\necho "helper ${selfLine}" >&3\necho "started ${payload.pid} ${payload.startTime}" >&3\nread -r go <&4\necho "exit code 0" >&3\nread -r rel <&4\n`,
      );
      chmodSync(forge, 0o755);
      await withHelper(forge, async () => {
        let thrown: unknown;
        try {
          await spawn('true', [], { ...FAST, containment: ['subreaper'], stdio: 'ignore' });
        } catch (error) {
          thrown = error;
        }
        expect((thrown as { code?: string })?.code, String(thrown)).toBe('CONTAINMENT_UNAVAILABLE');
        expect((thrown as Error).message).toMatch(/is not a tether helper .*(parent is|"helper" line names)/);
        const { exitCode, report } = await spawn('sh', ['-c', 'exit 0'], { ...FAST, stdio: 'ignore' });
        expect(exitCode).toBe(0);
        expect(report.layers).not.toContain('subreaper');
        const warned = report.warnings.filter((w) => w.code === 'NO_HELPER').map((w) => w.message);
        expect(warned).toEqual([expect.stringMatching(/is not a tether helper/)]);
        expect(report.stopped.map((p) => p.pid)).not.toContain(by.pid);
        expect(report.stopped.map((p) => p.pid)).not.toContain(kid.pid);
      });
      await new Promise((r) => setTimeout(r, 300)); // a TERM sent would be trapped by now
      expect(isAlive(by), 'the bystander was ended').toBe(true);
      expect(isAlive(kid), "the bystander's child was ended").toBe(true);
      expect(existsSync(got), 'the bystander was sent SIGTERM').toBe(false);
    });
  }
});

describe('a helper file the kernel refuses at spawn (Node throws)', () => {
  // spawn(2) of the helper threw synchronously for the file's own reason, and the session took it
  // for the command's: the command ran without the helper, even with the layer listed, unsaid.
  const cases = [
    {
      errno: 'ELOOP',
      make: (dir: string) => {
        const file = join(dir, 'selfloop');
        writeFileSync(file, `#!${file}\n`); // a #! interpreter that is itself
        chmodSync(file, 0o755);
        return { file, done: () => undefined };
      },
    },
    {
      errno: 'ETXTBSY',
      make: (dir: string) => {
        const file = join(dir, 'tether-helper');
        copyFileSync(HELPER_EXE, file);
        chmodSync(file, 0o755);
        const fd = openSync(file, 'r+'); // open for writing: exec(2) refuses it
        return { file, done: () => closeSync(fd) };
      },
    },
  ];
  for (const { errno, make } of cases) {
    it(`${errno}: CONTAINMENT_UNAVAILABLE when the subreaper layer is listed (the command never runs), NO_HELPER naming ${errno} under auto`, async () => {
      const dir = testDir('tether-refused-');
      dirs.push(dir);
      const { file, done } = make(dir);
      const marker = join(dir, 'ran');
      try {
        await withHelper(file, async () => {
          let thrown: unknown;
          try {
            const sub = spawn('sh', ['-c', `echo ran > ${marker}`], {
              ...FAST,
              containment: ['subreaper', 'cgroup'],
              stdio: 'ignore',
            });
            await sub;
          } catch (error) {
            thrown = error;
          }
          expect((thrown as { code?: string })?.code, String(thrown)).toBe('CONTAINMENT_UNAVAILABLE');
          expect((thrown as Error).message).toContain(`${file}: ${errno}`);
          expect(existsSync(marker), 'the command ran without the layer it listed').toBe(false);
          const { exitCode, report } = await spawn('sh', ['-c', `echo ran > ${marker}`], {
            ...FAST,
            stdio: 'ignore',
          });
          expect(exitCode).toBe(0);
          expect(existsSync(marker), 'under auto the command runs, without the helper').toBe(true);
          expect(report.layers).not.toContain('subreaper');
          const warned = report.warnings.filter((w) => w.code === 'NO_HELPER').map((w) => w.message);
          expect(warned).toEqual([expect.stringContaining(`${file}: ${errno}`)]);
        });
      } finally {
        done();
      }
    });
  }
});

describe('the helper under faults', () => {
  it('a payload that stops its helper (kill -STOP $PPID) does not hold the session: the helper is resumed', async () => {
    // (The parent is checked first: were the helper missing, $PPID would be the test runner.)
    const sub = spawn('sh', ['-c', `${IF_HELPER} kill -STOP $PPID; sleep 0.3; exit 4`], {
      ...FAST,
      stdio: 'ignore',
      reject: false, // exit 4 is the premise, looked at below
    });
    const helper = identityOf(sub.child.pid ?? 0);
    if (helper) started.push(helper);
    const result = await sub;
    expect(result.exitCode, JSON.stringify(result.report.warnings)).toBe(4);
    expect(result.report.ok).toBe(true);
    expect(result.report.layers).toContain('subreaper');
  });

  it("a helper killed by its payload ends spawn()'s session at once: the command is swept, its status is unknown (HELPER_LOST)", async () => {
    // Nothing reaps the command's subtree once its helper is gone, and its status cannot be
    // known: spawn() ends the session (docs/sessions.md), it does not wait for the command.
    const dir = testDir('tether-lost-');
    const marker = join(dir, 'done');
    const sub = spawn(
      'sh',
      ['-c', `${IF_HELPER} kill -9 $PPID; sleep 5; echo done > ${marker}; exit 3`, 'sh'],
      {
        ...FAST,
        stdio: 'ignore',
        reject: false, // an unknown status fails (COMMAND_FAILED): looked at below
      },
    );
    const payload = identityOf(sub.pid ?? 0);
    if (payload) started.push(payload);
    const result = await sub;
    expect(payload && isAlive(payload), 'the command outlived its session').toBe(false);
    expect(existsSync(marker), 'the command ran to its end: the session was not ended at the loss').toBe(
      false,
    );
    expect(result.exitCode).toBe(null);
    expect(result.signal).toBe(null);
    expect(result.failed).toBe(true);
    expect(result.report.warnings.map((w) => w.code)).toContain('HELPER_LOST');
    expect(result.report.timings.durationMs).toBeLessThan(5000);
  });

  it('releases each helper whose command ended with nothing left: 30 commands, at most one helper alive', async () => {
    const s = session(FAST);
    try {
      for (let i = 0; i < 30; i++) {
        const r = await s.spawn('true', [], { stdio: 'ignore' });
        expect(r.exitCode).toBe(0);
      }
      expect(helperChildren().length).toBeLessThanOrEqual(1);
    } finally {
      const report = await s.end();
      expect(report.ok).toBe(true);
      expect(report.layers).toContain('subreaper');
    }
    // A helper with a leftover under it stays until the end, and the end stops the leftover.
    const t = session(FAST);
    const left = await t.spawn('sh', ['-c', 'setsid sleep 30 & echo $!'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    expect(left.exitCode).toBe(0);
    expect(helperChildren().length).toBeGreaterThanOrEqual(1);
    const report = await t.end();
    expect(report.stopped.map((p) => p.comm)).toEqual(['sleep']);
    for (let i = 0; i < 100 && helperChildren().length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(helperChildren(), 'released helpers exit').toEqual([]);
  });

  const ENDS = sample(50, 300);
  it(`a helper released at its command's end is never swept, though it still runs a moment: ${counted(ENDS, 300, 'clean ends')}`, async () => {
    // The helper carries the session's tag; released when its command ends with nothing left,
    // it still runs for ~0.3 ms (up to a few ms) while the sweep's first walk may already be
    // made. It must stay a root: never found as a carrier, never signalled. (A regression shows
    // in about 1 clean end in 100 to 300: the 300 of TETHER_TEST_FULL=1 (`npm run stress`) catch
    // it often, not always; the default sample of 50 now and then.)
    const problems: string[] = [];
    for (let i = 0; i < ENDS; i++) {
      const { report } = await spawn('sh', ['-c', 'exit 0'], FAST);
      const swept = report.stopped.map((p) => `${p.pid} ${p.comm} (${p.foundBy})`);
      if (swept.length || report.phases[0]?.rounds !== 1)
        problems.push(`run ${i}: stopped [${swept.join(', ')}], phases ${JSON.stringify(report.phases)}`);
    }
    expect(problems).toEqual([]);
  });

  it('a Node program that never ends its session exits, and its exit hook sweeps the leftover', () => {
    const dir = testDir('tether-noend-');
    const pidfile = join(dir, 'pid');
    const program = `import { session } from ${JSON.stringify(join(ROOT, 'dist/index.js'))};
const s = session({ graceMs: 300 });
await s.spawn('sh', ['-c', 'setsid sleep 30 & echo "$! $(cut -d" " -f22 /proc/$!/stat)" > ${pidfile}'], { stdio: 'ignore' });`;
    execFileSync(process.execPath, ['--input-type=module', '-e', program], { timeout: 20_000 });
    const [pid, startTime] = readFileSync(pidfile, 'latin1').trim().split(' ').map(Number);
    const leftover = { pid: pid ?? 0, startTime: startTime ?? 0 };
    started.push(leftover);
    expect(leftover.pid).toBeGreaterThan(1);
    expect(isAlive(leftover), 'the leftover outlived the program').toBe(false);
  });
});
