// A guard on a host (docs/guard.md, "On a host"): in the initial PID namespace, or whose cgroup
// is the cgroup v2 hierarchy's root, its default target is every process of the machine. It is
// refused (status 125, nothing stopped, nothing listed) unless `--host` asks for it. The runs on
// the host itself are dry runs only (what the old code did there was list the machine); the runs
// that would stop are in a PID namespace of the test's, joined to the hierarchy's root cgroup,
// beside an orphan of the test's that must survive the refused guard (ground truth: /proc).
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { TickResult } from '../../src/guard/guard.js';
import { environOf, isAlive, type ProcessId, pids, readStat } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { allGone, canRun, cgroupMount, inPidNamespace, TETHER, until } from './support.js';

function tether(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [TETHER, ...args],
      { env: { ...process.env, ...env }, timeout: 60_000, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

let namespaces: ChildProcess[] = [];
afterEach(() => {
  for (const ns of namespaces) ns.kill('SIGKILL'); // unshare --kill-child ends the namespace with it
  namespaces = [];
});

// A PID namespace in the hierarchy's root cgroup (a host's), with an orphan of its init marked
// `GUARD_MARK=orphan.<run>`; then `tether guard ARGS…` there, its status written to $OUT/rc.
async function inRootCgroupNamespace(
  args: string[],
): Promise<{ out: string; orphan: ProcessId[]; rc: string }> {
  const run = `${process.pid}-${Date.now()}-${Math.random().toString(16).slice(2, 8)}`;
  const out = testDir('tether-guard-host-');
  const script = `
    env GUARD_MARK="orphan.$RUN" setsid sh -c 'sleep 396 & exit 0'
    sleep 1
    "$NODE" "$TETHER" guard "$@" > "$OUT/stdout" 2> "$OUT/stderr"
    echo $? > "$OUT/rc.tmp" && mv "$OUT/rc.tmp" "$OUT/rc"
    exec sleep 1000`;
  const ns = spawn(...inPidNamespace(['sh', '-c', script, 'sh', ...args], cgroupMount()), {
    stdio: 'ignore',
    env: {
      ...process.env,
      OUT: out,
      RUN: run,
      NODE: process.execPath,
      TETHER,
      TETHER_GUARD_STATE: join(out, 'state'),
    },
  });
  namespaces.push(ns);
  // The orphan is the `sleep`: the `sh` that started it carries the mark too until it exits, and
  // one caught before that was counted as an orphan the guard stopped (a loaded whole suite's).
  const orphan = await until(() => {
    const found = marked(`orphan.${run}`).filter((id) => readStat(id.pid)?.comm === 'sleep');
    return found.length > 0 ? found : undefined;
  }, 20_000);
  expect(orphan, 'premise: the orphan runs').toBeDefined();
  const rc = await until(
    () => (existsSync(join(out, 'rc')) ? readFileSync(join(out, 'rc'), 'utf8') : ''),
    60_000,
  );
  return { out, orphan: orphan as ProcessId[], rc: rc.trim() };
}

function marked(mark: string): ProcessId[] {
  const found: ProcessId[] = [];
  for (const pid of pids()) {
    const stat = readStat(pid);
    if (!stat || stat.state === 'Z') continue;
    if (environOf(pid).split('\0').includes(`GUARD_MARK=${mark}`))
      found.push({ pid, startTime: stat.startTime });
  }
  return found;
}

// The tests that run on the host itself need to be there: the initial PID namespace's fixed inode.
const onHost = readlinkSync('/proc/self/ns/pid') === 'pid:[4026531836]';

const read = (out: string, file: string) => readFileSync(join(out, file), 'utf8');

describe.skipIf(!canRun)('a guard on a host', () => {
  it.skipIf(!onHost)(
    'in the host PID namespace refuses a dry run with status 125, saying why and what to pass, and lists nothing',
    async () => {
      const r = await tether(['guard', '--once', '--dry-run', '--json', '--min-age', '0']);
      expect(r.code, `a dry run over the whole machine was not refused: ${r.stdout.slice(0, 500)}`).toBe(125);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(
        /refused to guard this machine: .*(host's PID namespace|root of the cgroup v2 hierarchy)/,
      );
      expect(r.stderr).toContain('--cgroup PATH');
      expect(r.stderr).toContain('--host');
      expect(r.stderr).not.toContain('would stop');
      const none = await tether(['guard', '--once', '--dry-run', '--cgroup', 'none']);
      expect(none.code).toBe(125);
      expect(none.stderr).toContain(
        "the guard runs in the host's PID namespace and would watch every process",
      );
    },
  );

  it.skipIf(!onHost)('--host lets a dry run watch the host (and lists what it would stop)', async () => {
    const r = await tether([
      'guard',
      '--once',
      '--dry-run',
      '--json',
      '--host',
      '--cgroup',
      'none',
      '--min-age',
      '0',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const tick = JSON.parse(r.stdout) as TickResult;
    expect(tick.dryRun).toBe(true);
    expect(tick.target.kind).toBe('pid-namespace');
    expect(tick.target.processes).toBeGreaterThan(1);
  });

  it('in the root cgroup of a PID namespace stops nothing and exits 125; --cgroup none then watches the namespace alone', async () => {
    const refused = await inRootCgroupNamespace(['--once', '--min-age', '0', '--grace', '1s']);
    expect(refused.rc, read(refused.out, 'stderr')).toBe('125');
    expect(read(refused.out, 'stderr')).toContain('root of the cgroup v2 hierarchy');
    expect(read(refused.out, 'stderr')).toContain('--cgroup none (this PID namespace only)');
    expect(
      refused.orphan.filter((id) => !isAlive(id)),
      'the refused guard stopped the orphan',
    ).toEqual([]);
    const allowed = await inRootCgroupNamespace([
      '--once',
      '--min-age',
      '0',
      '--grace',
      '1s',
      '--cgroup',
      'none',
    ]);
    expect(allowed.rc, read(allowed.out, 'stderr')).toBe('0');
    expect(await allGone(allowed.orphan, 5000), 'the namespace guard left the orphan').toBe(true);
  });
});
