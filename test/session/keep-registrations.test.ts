// A kept service under a guard (docs/sweep.md, "After the session"; docs/guard.md,
// "Registrations"): the session's end registers each kept process with the guard until its keep
// expires, so a guard tick before the TTL spares it (rule `registered`) and a tick after stops it
// like any orphan. The real CLI (`tether run --keep`, then `tether guard --once`) in a PID
// namespace (the kept process is orphaned to its init, as in a container, not to the test's
// subreaper, which would spare it as an exec entry) and a cgroup namespace rooted in a private
// tree, so `<cgroup2 mount>/tether` is the test's own and the guard's target holds nothing else.
// Root, a cgroup v2 mount and unshare(1) needed.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cgroup2Mount } from '../../src/proc/cgroup.js';
import { createTag } from '../../src/proc/tag.js';
import { registerKept } from '../../src/session/keep-registrations.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { removeMadeCgroups } from '../support/cgroups.js';
import { ROOT } from '../support/paths.js';
import { cmdlineOf, isAlive, type ProcessId, pids, readStat } from '../support/proc.js';
import { cleanup, started, tempDir, waitFor } from '../support/zoo.js';

const mount = cgroup2Mount();
const usable = mount !== undefined && process.getuid?.() === 0 && existsSync('/usr/bin/unshare');
const CLI = join(ROOT, 'bin/tether.cjs');
const made: string[] = [];
const namespaces: ChildProcess[] = [];

afterEach(async () => {
  for (const ns of namespaces.splice(0)) ns.kill('SIGKILL'); // --kill-child ends the namespace
  cleanup();
  await removeMadeCgroups(made);
});

// The namespace's init: mounts the private tree as its cgroup2 hierarchy, runs the session that
// keeps `sleep $MARK` for $TTL, says `kept` and waits for a line on stdin (the test finds the
// kept sleep meanwhile), a guard tick, waits past the TTL, a second tick, then waits to be
// killed (the namespace, and all in it, ends with its init: the test reads /proc before). Each
// tick's JSON line goes to stdout after a `tick N` line; the run's report to $OUT/run.err.
const initScript = `
mount -t cgroup2 cgroup2 "$VIEW" || exit 97
"$NODE" "$CLI" run --keep "sleep $MARK=$TTL" -- sh -c 'sleep "$1" </dev/null >/dev/null 2>&1 &' sh "$MARK" 2>"$OUT/run.err" || exit 98
echo kept
read go
for n in 1 2; do
  [ "$n" = 2 ] && sleep "$WAIT"
  echo "tick $n"
  "$NODE" "$CLI" guard --once --json --cgroup tether --min-age 0 -k 1s --kill-budget 1s 2>>"$OUT/guard.err"
done
exec sleep 60
`;

interface Tick {
  stopped: { pid: number; startTime: number; comm: string }[];
  wouldStop: unknown[];
  spared: Record<string, number>;
}

// The kept `sleep MARK`, in this test's PID namespace, or undefined when none runs.
function keptSleep(mark: string): ProcessId | undefined {
  for (const pid of pids()) {
    if (cmdlineOf(pid) !== `sleep ${mark}`) continue;
    const stat = readStat(pid);
    if (stat && stat.state !== 'Z') return { pid, startTime: stat.startTime };
  }
  return undefined;
}

describe.skipIf(!usable)('a kept service under a guard', () => {
  it('is spared by a guard tick before its TTL (registered at the session end) and stopped by one after it; nothing else is signalled', async () => {
    const root = join(mount as string, `tether-keep-guard-test-${createTag().name.slice(-12)}`);
    mkdirSync(root);
    made.push(root, join(root, 'tether')); // the session makes tether/ (removed after it, first)
    const out = tempDir();
    const state = tempDir();
    const mark = String(700_000 + Math.floor(Math.random() * 99_999));
    const ttlMs = 4000;
    const env = {
      ...process.env,
      VIEW: tempDir(),
      NODE: process.execPath,
      CLI,
      OUT: out,
      MARK: mark,
      TTL: `${ttlMs}ms`,
      WAIT: String(ttlMs / 1000 + 1),
      TETHER_GUARD_STATE: state,
    };
    const outer = `echo $$ > "$1/cgroup.procs" && exec unshare -C -m --propagation private --pid --fork --kill-child --mount-proc sh -c "$2"`;
    const ns = spawn('sh', ['-c', outer, 'outer', root, initScript], {
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    namespaces.push(ns);
    let stdout = '';
    let stderr = '';
    ns.stdout?.on('data', (d) => (stdout += d));
    ns.stderr?.on('data', (d) => (stderr += d));
    let exit: string | undefined;
    ns.on('exit', (code, signal) => (exit = `${code ?? signal}`));
    const runErr = () => (existsSync(join(out, 'run.err')) ? readFileSync(join(out, 'run.err'), 'utf8') : '');
    const guardErr = () =>
      existsSync(join(out, 'guard.err')) ? readFileSync(join(out, 'guard.err'), 'utf8') : '';
    const ticks = () =>
      stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Tick);

    const tick = async (n: number) => {
      await waitFor(`guard tick ${n}`, () => ticks().length >= n || exit !== undefined, 30_000);
      const got = ticks()[n - 1];
      if (!got)
        throw new Error(`no guard tick ${n}: the init exited ${exit}: ${stderr} ${runErr()} ${guardErr()}`);
      return got;
    };
    await waitFor('the session to end', () => stdout.includes('kept\n') || exit !== undefined, 30_000);
    const kept = keptSleep(mark);
    if (!kept) throw new Error(`premise broken: the session kept no 'sleep ${mark}': ${stderr} ${runErr()}`);
    started.push(kept);
    ns.stdin?.end('go\n');
    const first = await tick(1);
    expect(
      isAlive(kept),
      `the kept 'sleep ${mark}' (pid ${kept.pid}, start ${kept.startTime}) was stopped by a guard tick before its ${ttlMs} ms TTL: ${JSON.stringify(first.stopped)}`,
    ).toBe(true);
    expect(first.stopped, 'the first tick stopped something').toEqual([]);
    expect(
      first.spared.registered,
      `the first tick's spared: ${JSON.stringify(first.spared)}`,
    ).toBeGreaterThanOrEqual(1);

    expect(runErr(), 'the run names the kept sleep').toContain(`sleep ${mark}`);
    expect(runErr(), 'the run could not register it').not.toContain('not registered with the guard');
    const file = join(state, 'guard-allow');
    expect(
      existsSync(file) ? readFileSync(file, 'utf8') : '(no file)',
      'the kept sleep is registered by its start time',
    ).toMatch(new RegExp(`^\\d+ ${kept.startTime} \\d+$`, 'm'));

    const second = await tick(2);
    expect(
      isAlive(kept),
      `the kept 'sleep ${mark}' (pid ${kept.pid}, start ${kept.startTime}) survived a guard tick after its TTL`,
    ).toBe(false);
    expect(
      second.stopped.map((p) => [p.comm, p.startTime]),
      'the second tick stopped the kept sleep, and nothing else',
    ).toEqual([['sleep', kept.startTime]]);
  }, 60_000);
});

// A report holding `kept` alone: what registerKept reads and writes.
const reportOf = (kept: { pid: number; startTime: number; expiresAt: number }[]) =>
  ({ kept, notes: [] }) as unknown as SweepReport;

describe('registerKept', () => {
  it('adds each unexpired kept process to what the file held, and skips an expired one', () => {
    const state = tempDir();
    const now = Date.now();
    writeFileSync(join(state, 'guard-allow'), `4243 7 ${now + 60_000}\n4244 8 ${now - 1}\n`);
    const report = registerKept(
      reportOf([
        { pid: 4242, startTime: 5, expiresAt: now + 30_000 },
        { pid: 4245, startTime: 9, expiresAt: now - 1 },
      ]),
      { TETHER_GUARD_STATE: state },
      now,
    );
    expect(report.notes).toEqual([]);
    const lines = readFileSync(join(state, 'guard-allow'), 'utf8')
      .split('\n')
      .filter((l) => /^\d/.test(l));
    expect(lines, 'the file after the end').toEqual([`4243 7 ${now + 60_000}`, `4242 5 ${now + 30_000}`]);
  });

  it('a registration that cannot be written is a note of the report, never a failure; a FIFO there is never waited on', () => {
    const kept = [{ pid: 4242, startTime: 5, expiresAt: Date.now() + 30_000 }];
    const file = join(tempDir(), 'a-file');
    writeFileSync(file, '');
    const notDir = registerKept(reportOf(kept), { TETHER_GUARD_STATE: file });
    expect(notDir.notes).toEqual([
      expect.stringMatching(
        /^kept: pid 4242 not registered with the guard \(EEXIST: file already exists, mkdir '.*a-file'\)/,
      ),
    ]);
    const withFifo = tempDir();
    execFileSync('mkfifo', [join(withFifo, 'guard-allow')]);
    const fifo = registerKept(reportOf(kept), { TETHER_GUARD_STATE: withFifo });
    expect(fifo.notes).toEqual([
      expect.stringContaining(
        `not registered with the guard (cannot add to the registrations file ${join(withFifo, 'guard-allow')}: not a regular file)`,
      ),
    ]);
  });
});
