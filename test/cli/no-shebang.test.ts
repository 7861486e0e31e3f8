// An executable file without `#!` (a script an agent wrote): execve(2) refuses it with ENOEXEC,
// and execvp(3) — glibc's, timeout(1)'s, env(1)'s, a shell's — then runs it as `sh FILE ARGS…`.
// `tether run` and `spawn()` start it so on both paths: through the helper (the default: the
// static helper's musl execvp stops at ENOEXEC, so it searches and falls back itself) and
// directly (`env-tag`: Node's libuv calls glibc's execvp, which already did). Before, the helper's
// path said `cannot start ./script: spawn ./script ENOEXEC` and exited 126. What the script
// leaves running is stopped as any command's leftover (ground truth: its pid + start time gone).
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { spawn } from '../../src/index.js';
import { type Ran, RECORD, recordedIds, tether } from '../support/cli.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { testDir } from '../support/temp.js';

const dir = testDir('tether-no-shebang-');
const bin = join(dir, 'bin');
mkdirSync(bin);
// A sleep of a length no other test uses, so that a survivor is this file's.
const NAP = 4000 + Math.floor(Math.random() * 900);
const SCRIPT = `echo "zero=$0"
echo "args=$*"
setsid sleep ${NAP} >/dev/null 2>&1 &
${RECORD}
`;
for (const file of [join(dir, 'script'), join(bin, 'on-path-script')]) {
  writeFileSync(file, SCRIPT);
  chmodSync(file, 0o755);
}
writeFileSync(join(dir, 'not-executable'), SCRIPT);
chmodSync(join(dir, 'not-executable'), 0o644);

const seen: ProcessId[] = [];
afterAll(() => {
  for (const id of seen) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

// `tether ARGS…` with its cwd in the test's directory and PATH starting with its bin/.
function tetherIn(args: string[]): Promise<Ran> {
  return tether(args, { cwd: dir, env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } });
}

// The leftover the script recorded, now gone (its pid + start time).
function expectLeftoverStopped(stdout: string): void {
  const ids = recordedIds(stdout);
  seen.push(...ids);
  for (const id of ids) expect(isAlive(id), `the script's setsid sleep ${id.pid} survived`).toBe(false);
}

const CONTAINMENTS: [string, string[]][] = [
  ['the helper (default containment)', []],
  ['no helper (--containment env-tag)', ['--containment', 'env-tag']],
];

describe.each(CONTAINMENTS)('tether run of an executable without #!, through %s', (_name, flags) => {
  it('runs ./script a b under /bin/sh as execvp does ($0 the path given), exit 0, leftover stopped', async () => {
    const ran = await tetherIn(['run', ...flags, '--', './script', 'a', 'b']);
    expect(ran.stderr).not.toMatch(/ENOEXEC|cannot start/);
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toMatch(/^zero=\.\/script\nargs=a b\n/);
    expectLeftoverStopped(ran.stdout);
  });

  it('runs one found on PATH as sh DIR/NAME ARGS…', async () => {
    const ran = await tetherIn(['run', ...flags, '--', 'on-path-script', 'x y']);
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toMatch(new RegExp(`^zero=${bin}/on-path-script\nargs=x y\n`));
    expectLeftoverStopped(ran.stdout);
  });

  it('keeps the other start failures: not executable 126 (EACCES), missing 127', async () => {
    const denied = await tetherIn(['run', ...flags, '--', './not-executable']);
    expect(denied.code, denied.stderr).toBe(126);
    expect(denied.stderr).toMatch(/EACCES/);
    expect(denied.stdout).toBe('');
    const missing = await tetherIn(['run', ...flags, '--', './missing']);
    expect(missing.code, missing.stderr).toBe(127);
  });
});

describe.each([
  ['the helper (default containment)', undefined],
  ['no helper (containment env-tag)', ['env-tag']],
] as const)('spawn() of an executable without #!, through %s', (_name, containment) => {
  it('runs it under /bin/sh, exit 0, and stops its leftover', async () => {
    const r = await spawn(join(dir, 'script'), ['a', 'b'], {
      cwd: dir,
      containment: containment ? [...containment] : undefined,
      graceMs: 1000,
      reject: false,
    });
    expect(r.failed, String(r.stderr)).toBe(false);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^zero=${dir}/script\nargs=a b\n`));
    expectLeftoverStopped(String(r.stdout));
  });
});
