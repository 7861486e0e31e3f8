// The exit status of a payload killed by a real-time signal is 128 + N on every CLI path, as a
// POSIX shell, tini and timeout(1) report it: `tether run` (the helper), `tether run
// --containment env-tag` (Node's own child), and `tether guard -- CMD` as PID 1 of a PID
// namespace and as a subreaper. A spread of SIGRTMIN..SIGRTMAX on each path (every one of them
// on the cheapest path: test/session/signal-status.test.ts).
import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { createTag } from '../../src/proc/tag.js';
import { BIN, tether } from '../support/cli.js';
import { makeTestCgroup, noTestCgroup, type TestCgroup } from '../support/test-cgroup.js';
import { kernelKeepsExitStatus, NO_EXIT_INFO, shellStatus } from '../support/wait-status.js';

const SPREAD = [34, 35, 42, 50, 63, 64];

const kept = await kernelKeepsExitStatus();
if (!kept) console.warn(`env-tag and guard: ${NO_EXIT_INFO}`);

// A guard refuses a host (docs/guard.md, "On a host"): each guard here runs in a cgroup of the
// test's own, as a container's init runs in the container's — the subreaper one given it as its
// `--cgroup` — so that it sweeps nothing but what the test started.
let cgroup: TestCgroup | undefined;
afterAll(() => cgroup?.end());
function guardCgroup(): string {
  cgroup ??= makeTestCgroup();
  return cgroup.dir;
}
/** argv that joins the test cgroup first, then execs `argv`. */
function joined(argv: string[]): string[] {
  return ['sh', '-c', 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', 'sh', guardCgroup(), ...argv];
}
const guards = kept && noTestCgroup === undefined;
if (kept && noTestCgroup) console.warn(`tether guard paths skipped: no test cgroup (${noTestCgroup})`);

/** `unshare --pid --fork --kill-child --mount-proc tether ARGS…` in the test cgroup: tether as PID 1; its status. */
function inNamespace(args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const [cmd = 'sh', ...rest] = joined([
      'unshare',
      '--pid',
      '--fork',
      '--kill-child',
      '--mount-proc',
      process.execPath,
      BIN,
      ...args,
    ]);
    const child = spawn(cmd, rest, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL'); // --kill-child: the namespace ends with it
      reject(new Error(`tether ${args.join(' ')} did not end within 20 s; stderr: ${stderr}`));
    }, 20_000);
    child.on('exit', (status) => {
      clearTimeout(timer);
      resolve({ status, stderr });
    });
  });
}

type Path = (script: string) => Promise<{ status: number | null; stderr: string }>;

// A tag in the environment, so that the suite's guard sees whatever a run might leave.
const env = () => ({ ...process.env, [createTag().name]: '1' });
const PATHS: [string, boolean, Path][] = [
  [
    'tether run (the helper)',
    true,
    async (s) => {
      const r = await tether(['run', '--', 'sh', '-c', s], { env: env() });
      return { status: r.code, stderr: r.stderr };
    },
  ],
  [
    'tether run --containment env-tag',
    kept,
    async (s) => {
      const r = await tether(['run', '--containment', 'env-tag', '--', 'sh', '-c', s], { env: env() });
      return { status: r.code, stderr: r.stderr };
    },
  ],
  ['tether guard -- CMD as PID 1', guards, (s) => inNamespace(['guard', '--', 'sh', '-c', s])],
  [
    'tether guard -- CMD as a subreaper',
    guards,
    async (s) => {
      const [cmd = 'sh', ...rest] = joined([
        process.execPath,
        BIN,
        'guard',
        '--cgroup',
        guardCgroup(),
        '--',
        'sh',
        '-c',
        s,
      ]);
      return new Promise((resolve) => {
        const child = spawn(cmd, rest, { stdio: ['ignore', 'ignore', 'pipe'], env: env() });
        let stderr = '';
        child.stderr.on('data', (d) => (stderr += d));
        child.on('exit', (status) => resolve({ status, stderr }));
      });
    },
  ],
];

describe('exit status 128 + N for a real-time signal N', () => {
  for (const [name, runs, run] of PATHS) {
    it.skipIf(!runs)(`${name}: as the shell says, for ${SPREAD.join(', ')}`, async () => {
      const wrong: string[] = [];
      for (const n of SPREAD) {
        const script = `kill -${n} $$`;
        const shell = shellStatus(script);
        if (shell !== 128 + n) throw new Error(`premise broken: the shell says ${shell} for signal ${n}`);
        const { status, stderr } = await run(script);
        if (status !== shell)
          wrong.push(`signal ${n}: exit ${status} (stderr: ${stderr.trim().slice(-300)})`);
      }
      expect(wrong, `${name}: statuses other than the shell's`).toEqual([]);
    });
  }
});
