// `tether guard [options] -- CMD`: the CLI's guard-as-init, as PID 1 of a real PID namespace
// (`unshare --pid --fork --kill-child --mount-proc`) in a cgroup v2 the test made, as a
// container's init is in the container's cgroup. The command itself is the witness: it
// makes an orphan (its subshell exits, the sleep is reparented to the guard) and a child of its
// own, then reads /proc in the namespace to see which of them the guard's ticks ended.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { canRun, cgroupMount, inPidNamespace, until } from './support.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const TETHER = join(ROOT, 'bin/tether.cjs');

const cgroups: string[] = [];
afterEach(async () => {
  for (const cg of cgroups.splice(0)) {
    try {
      writeFileSync(join(cg, 'cgroup.kill'), '1'); // only what the test started is in it
    } catch {
      // already gone
    }
    await until(() => {
      try {
        rmdirSync(cg);
        return true;
      } catch {
        return false;
      }
    }, 10_000);
  }
});

// Runs `tether ARGS` as PID 1 of a new PID namespace, first joined to a fresh test cgroup (as a
// container's init is in the container's), or with `cgroup: false` to the hierarchy's root (a host's).
function runInNamespace(
  args: string[],
  ms: number,
  { cgroup = true, init = [] as string[] } = {},
): Promise<{ status: number | null; stderr: string }> {
  let cg = cgroupMount() as string;
  if (cgroup) {
    cg = join(cg, `tether-guard-cli-init-${process.pid}-${Date.now()}-${cgroups.length}`);
    mkdirSync(cg);
    cgroups.push(cg);
  }
  return new Promise((done, fail) => {
    const child = spawn(...inPidNamespace([...init, process.execPath, TETHER, ...args], cg), {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL'); // unshare's --kill-child ends the namespace with it
      fail(new Error(`tether guard -- … did not exit within ${ms} ms; stderr: ${stderr}`));
    }, ms);
    child.on('exit', (status) => {
      clearTimeout(timer);
      done({ status, stderr });
    });
  });
}

// Exits 3 when, after 3 s, the orphan is gone and its own child still runs; else 4 or 5 naming
// which. `kill -0` succeeds on a zombie too: gone means reaped, which the guard also does.
const WITNESS = [
  'f=$(mktemp) ;',
  '(sleep 300 & echo $! > "$f") ;',
  'sleep 300 & child=$! ;',
  'orphan=$(cat "$f") ; rm -f "$f" ;',
  'sleep 3 ;',
  'if kill -0 "$orphan" 2>/dev/null; then exit 4; fi ;',
  'if ! kill -0 "$child" 2>/dev/null; then exit 5; fi ;',
  'exit 3',
].join(' ');

describe.skipIf(!canRun)('tether guard -- CMD', () => {
  it('runs CMD as PID 1’s protected service: a tick stops the orphan, spares CMD’s child, and the guard exits with CMD’s status', async () => {
    const { status, stderr } = await runInNamespace(
      ['guard', '--startup-delay', '0', '--interval', '200ms', '--min-age', '0', '--', 'sh', '-c', WITNESS],
      30_000,
    );
    expect(status, `4: the orphan outlived the ticks; 5: CMD's child was stopped. stderr: ${stderr}`).toBe(3);
    expect(stderr).toMatch(/stopped pid=\d+ .*cmdline="sleep 300"/);
    // CMD's child was spared while CMD ran (status 3 says so) and is gone once CMD exited: swept
    // at the end, or by a tick under way when CMD exited and handed it to the guard — either
    // way two `sleep 300`s stopped in all, none survived.
    const ticks = stderr.match(/stopped pid=\d+ [^\n]*cmdline="sleep 300"/g)?.length ?? 0;
    const end = /sh ended \(status 3\); what was left below the guard: (\d+) stopped, 0 survived/.exec(
      stderr,
    );
    expect(end, stderr).not.toBeNull();
    expect(ticks + Number(end?.[1]), stderr).toBe(2);
  });

  it('CMD that execs another program is still known by the guard as its service (by identity): the orphan is stopped', async () => {
    // `sh -c 'exec sh -c "$0"' WITNESS`: CMD's argv is gone once it execs, so no child runs the
    // command the guard was given; the guard knows the child it started, not by its argv.
    const { status, stderr } = await runInNamespace(
      [
        'guard',
        '--startup-delay',
        '0',
        '--interval',
        '200ms',
        '--min-age',
        '0',
        '--',
        'sh',
        '-c',
        'exec sh -c "$0"',
        WITNESS,
      ],
      30_000,
    );
    expect(status, `4: the orphan outlived the ticks; 5: CMD's child was stopped. stderr: ${stderr}`).toBe(3);
    expect(stderr).toMatch(/stopped pid=\d+ .*cmdline="sleep 300"/);
    expect(stderr).not.toContain('INIT_SERVICE_AMBIGUOUS');
  });

  it.skipIf(!existsSync('/usr/bin/tini'))(
    'under tini (`tini -- tether guard -- CMD`: the guard is tini’s service) still stops its own orphans',
    async () => {
      const { status, stderr } = await runInNamespace(
        ['guard', '--startup-delay', '0', '--interval', '200ms', '--min-age', '0', '--', 'sh', '-c', WITNESS],
        30_000,
        { init: ['/usr/bin/tini', '--'] },
      );
      expect(
        status,
        `4: the orphan outlived the ticks (spared as a descendant of tini's service, the guard); 5: CMD's child was stopped. stderr: ${stderr}`,
      ).toBe(3);
      expect(stderr).toMatch(/stopped pid=\d+ .*cmdline="sleep 300"/);
    },
  );

  it('in the root cgroup (a host, not a container) refuses to start, naming what to pass; CMD never runs', async () => {
    const { status, stderr } = await runInNamespace(
      ['guard', '--startup-delay', '0', '--', 'sh', '-c', 'echo ran >&2; exit 3'],
      20_000,
      { cgroup: false },
    );
    expect(status, stderr).toBe(125);
    expect(stderr).toContain('refused to guard this machine');
    expect(stderr).toContain('root of the cgroup v2 hierarchy');
    expect(stderr).toContain('--host');
    expect(stderr).not.toContain('ran');
  });

  it('refuses --once and --dry-run with a command, naming the option', async () => {
    for (const flag of ['--once', '--dry-run']) {
      const { status, stderr } = await runInNamespace(['guard', flag, '--', 'true'], 20_000);
      expect(status).toBe(125);
      expect(stderr).toContain(`invalid ${flag} with a command`);
    }
  });
});
