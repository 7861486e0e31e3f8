// The guard's input files (docs/guard.md, "Inputs"): the allow file and the registrations file
// must be regular files of at most 1 MiB. A FIFO in their place once blocked every tick forever,
// and /dev/zero as --allow grew the guard without end; now either is refused with status 125 at
// start, and with an INPUT_REFUSED warning per tick later while the tick goes on (ground truth:
// the orphan's pid + start time gone, the spared processes alive). `tether guard allow` and the
// guard find the registrations file the same way, whatever XDG_RUNTIME_DIR each has.
import { execFile } from 'node:child_process';
import { mkdirSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TickResult } from '../../src/guard/guard.js';
import { INPUT_MAX_BYTES, readInputFile } from '../../src/guard/input-file.js';
import { isAlive } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { allGone, canRun, cgroupMount, type Scenario, startScenario, TETHER, until } from './support.js';

let scenario: Scenario | undefined;
let cgroup: string;
let dir: string;
beforeEach(() => {
  if (!canRun) return;
  // An empty cgroup of the test's: an explicit target, so that the start checks are what refuses.
  cgroup = join(cgroupMount() as string, `tether-guard-inputs-${process.pid}-${Date.now()}`);
  mkdirSync(cgroup);
  dir = testDir('tether-guard-inputs-');
});
afterEach(async () => {
  await scenario?.end();
  scenario = undefined;
  if (!canRun) return;
  rmdirSync(cgroup);
  rmSync(dir, { recursive: true, force: true });
});

function tether(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [TETHER, ...args],
      { env: { ...process.env, ...env }, timeout: 15_000, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => {
        const e = error as { code?: number; signal?: string } | null;
        resolve({ code: e ? (e.code ?? null) : 0, signal: e?.signal ?? null, stdout, stderr });
      },
    );
  });
}

const mkfifo = (path: string) =>
  new Promise<void>((resolve, reject) =>
    execFile('mkfifo', [path], (error) => (error ? reject(error) : resolve())),
  );

describe.skipIf(!canRun)('the guard’s input files', () => {
  it('refuses at start, with status 125 naming the file and why, a FIFO or /dev/zero as --allow, a FIFO as the registrations file, and files over 1 MiB', async () => {
    const fifo = join(dir, 'allow.fifo');
    await mkfifo(fifo);
    const guard = (allow: string, state = join(dir, 'state')) =>
      tether(['guard', '--once', '--dry-run', '--cgroup', cgroup, '--allow', allow], {
        TETHER_GUARD_STATE: state,
      });
    const byFifo = await guard(fifo);
    expect(byFifo.signal, 'the guard blocked on the FIFO (killed after 15 s)').toBeNull();
    expect(byFifo.code, byFifo.stderr).toBe(125);
    expect(byFifo.stderr).toContain(`invalid allow file ${JSON.stringify(fifo)}: a FIFO, not a regular file`);
    const byZero = await guard('/dev/zero');
    expect(byZero.signal, 'the guard read /dev/zero without end (killed after 15 s)').toBeNull();
    expect(byZero.code).toBe(125);
    expect(byZero.stderr).toContain('invalid allow file "/dev/zero": a character device, not a regular file');
    const big = join(dir, 'big.allow');
    writeFileSync(big, Buffer.alloc(1024 * 1024 + 1, 0x61));
    const byBig = await guard(big);
    expect(byBig.code).toBe(125);
    expect(byBig.stderr).toContain('over the 1048576-byte cap');
    const missing = await guard(join(dir, 'no-such.allow'));
    expect(missing.code).toBe(125);
    expect(missing.stderr).toContain('no such file');
    // The registrations file: absent is fine, a FIFO is refused.
    const good = join(dir, 'good.allow');
    writeFileSync(good, '*never-matches-anything-here*\n');
    expect((await guard(good)).code).toBe(0);
    const state = join(dir, 'fifo-state');
    mkdirSync(state);
    await mkfifo(join(state, 'guard-allow'));
    const byRegs = await guard(good, state);
    expect(byRegs.signal, 'the guard blocked on the registrations FIFO').toBeNull();
    expect(byRegs.code).toBe(125);
    expect(byRegs.stderr).toContain(`invalid registrations file ${join(state, 'guard-allow')}: a FIFO`);
  });

  it('a FIFO put in place of the allow file and of the registrations file while the guard runs: a warning each tick, the last good read still applies, and the tick still stops the orphan', async () => {
    const s = await startScenario(`
      printf 'sleep 341 & wait\\n' > "$OUT/inputs-daemon-$RUN.sh"
      printf '*inputs-daemon-%s*\\n' "$RUN" > "$OUT/allow"
      mark daemon setsid sh -c 'sh "$OUT/inputs-daemon-$RUN.sh" & exit 0'
      mark reg setsid sh -c 'sleep 342 & echo $! > "$OUT/reg.pid"; exit 0'
      "$NODE" "$TETHER" guard allow --ttl 1h "$(cat "$OUT/reg.pid")" > /dev/null || exit 96
      guard --interval 300ms --startup-delay 0 --min-age 2s --grace 1s --json --allow "$OUT/allow"
      ready
      mkfifo "$OUT/allow.fifo" "$OUT/regs.fifo"
      mv "$OUT/allow.fifo" "$OUT/allow"
      mv "$OUT/regs.fifo" "$TETHER_GUARD_STATE/guard-allow"
      echo ok > "$OUT/swapped"
      sleep 1
      mark orphan setsid sh -c 'sleep 343 & exit 0'
      echo ok > "$OUT/orphaned"
      park`);
    scenario = s;
    await s.waitFile('ready');
    const daemon = s.find('daemon');
    const reg = s.find('reg');
    expect(daemon, 'premise: the daemon and its child').toHaveLength(2);
    expect(reg, 'premise: the registered process').toHaveLength(1);
    // A tick read both files as they were: the daemon and its child spared by the pattern.
    const sawPattern = await until(() => s.ticks().some((t) => t.spared.pattern === 2), 20_000);
    expect(sawPattern, s.stderr()).toBe(true);
    s.go();
    await s.waitFile('orphaned');
    const orphan = s.find('orphan');
    expect(orphan, 'premise: the orphan').toHaveLength(1);
    expect(await allGone(orphan, 20_000), `a tick blocked on a FIFO: ${s.stderr().slice(-2000)}`).toBe(true);
    const refused = await until(() => {
      const t = s.ticks().find((r) => r.warnings.filter((w) => w.code === 'INPUT_REFUSED').length === 2);
      return t;
    }, 10_000);
    expect(refused, JSON.stringify(s.ticks().at(-1)?.warnings)).toBeDefined();
    const messages = (refused as TickResult).warnings.map((w) => w.message);
    expect(messages).toContainEqual(
      expect.stringMatching(
        /^allow file .*\/allow refused: a FIFO, not a regular file: the 1 patterns read at tick \d+ still apply$/,
      ),
    );
    expect(messages).toContainEqual(
      expect.stringMatching(
        /^registrations file .*guard-allow refused: a FIFO, not a regular file: the 1 registrations read at tick \d+ still apply/,
      ),
    );
    expect(
      [...daemon, ...reg].filter((id) => !isAlive(id)),
      'a process the last good read spares was stopped',
    ).toEqual([]);
    expect(s.stderr()).toContain('tether guard: warning INPUT_REFUSED: allow file');
  });

  it('`guard allow` and the guard find the same registrations file whatever XDG_RUNTIME_DIR each has; allow says where it wrote', async () => {
    const s = await startScenario(`
      mount -t tmpfs tmpfs /run || exit 98
      unset TETHER_GUARD_STATE
      mark reg setsid sh -c 'sleep 397 & echo $! > "$OUT/reg.pid"; exit 0'
      XDG_RUNTIME_DIR="$OUT/xdg-allow" "$NODE" "$TETHER" guard allow --ttl 1h "$(cat "$OUT/reg.pid")" > "$OUT/allow.out" 2>&1
      mark orphan setsid sh -c 'sleep 398 & exit 0'
      ready
      XDG_RUNTIME_DIR="$OUT/xdg-guard" guard --once --min-age 0 --grace 1s --json
      park`);
    scenario = s;
    await s.waitFile('ready');
    const reg = s.find('reg');
    const orphan = s.find('orphan');
    expect(reg, 'premise: the registered process').toHaveLength(1);
    expect(orphan, 'premise: the orphan').toHaveLength(1);
    const allowOut = await s.waitFile('allow.out');
    s.go();
    await s.waitFile('rc');
    const tick = await until(() => s.ticks()[0], 5000);
    expect(tick, s.stderr()).toBeDefined();
    expect(await allGone(orphan, 5000)).toBe(true);
    expect(
      reg.filter((id) => !isAlive(id)),
      `the registered process was stopped: ${allowOut}`,
    ).toEqual([]);
    expect(tick?.spared.registered).toBe(1);
    expect(allowOut).toMatch(/^allowed pid \d+ \(start \d+\) until \S+ in \/run\/tether\/guard-allow\n$/);
  });
});

describe('tether guard --cgroup', () => {
  it('refuses a path that is no cgroup v2 directory by its flag, --cgroup, before anything runs (125)', async () => {
    const missing = join(testDir('tether-guard-cgroup-'), 'no-such-cgroup');
    const ran = await tether(['guard', '--once', '--dry-run', '--cgroup', missing]);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toContain(`invalid --cgroup ${JSON.stringify(missing)}: not a cgroup v2 directory`);
  });
});

describe('readInputFile', () => {
  it('reads a regular file up to 1 MiB; refuses a FIFO, a device and a bigger file without blocking; says missing', async () => {
    const d = testDir('tether-input-');
    try {
      const ok = join(d, 'ok');
      writeFileSync(ok, 'a\nb\n');
      expect(await readInputFile(ok)).toEqual({ kind: 'ok', text: 'a\nb\n' });
      const full = join(d, 'full');
      writeFileSync(full, Buffer.alloc(INPUT_MAX_BYTES, 0x61));
      const r = await readInputFile(full);
      expect(r.kind === 'ok' && r.text.length).toBe(INPUT_MAX_BYTES);
      const big = join(d, 'big');
      writeFileSync(big, Buffer.alloc(INPUT_MAX_BYTES + 1, 0x61));
      expect(await readInputFile(big)).toEqual({
        kind: 'refused',
        why: expect.stringContaining('over the 1048576-byte cap'),
      });
      const fifo = join(d, 'fifo');
      await mkfifo(fifo);
      expect(await readInputFile(fifo)).toEqual({ kind: 'refused', why: 'a FIFO, not a regular file' });
      expect(await readInputFile('/dev/zero')).toEqual({
        kind: 'refused',
        why: 'a character device, not a regular file',
      });
      expect(await readInputFile(d)).toEqual({
        kind: 'refused',
        why: expect.stringMatching(/directory|EISDIR/),
      });
      expect(await readInputFile(join(d, 'none'))).toEqual({ kind: 'missing' });
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
