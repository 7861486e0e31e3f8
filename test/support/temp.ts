// The suite's temporary directories: every test makes its own through `testDir` (never
// mkdtempSync in tmpdir() itself: test/suite/temp-dirs.test.ts holds the tree to that), which
// records it; the setup file test/support/temp-cleanup.ts removes what the file made once its
// own after-hooks have run, and the global teardown (test/support/global.ts) names whatever of
// the run's is still there. A test that leaves nothing behind on its own loses nothing: removing
// what is already gone is a no-op.
import {
  appendFileSync,
  chmodSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The file (made by the global setup) each `testDir` of the run is appended to, one path a line. */
export const TEMPS_LOG_VAR = 'TETHER_TEST_TEMPS_LOG';

const made: string[] = [];

/**
 * A fresh directory `<tmpdir()>/<prefix>XXXXXX` (`prefix` starts with `tether-`), removed after
 * the test file. TMPDIR is left as the caller has it: what tether itself resolves from
 * os.tmpdir() is unchanged.
 */
export function testDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  const log = process.env[TEMPS_LOG_VAR];
  if (log) appendFileSync(log, `${dir}\n`);
  return dir;
}

/** The directories of the run's log (absent or unreadable: none). */
export function loggedTestDirs(log: string): string[] {
  try {
    return readFileSync(log, 'utf8').split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

/** Mount points in this mount namespace (/proc/self/mountinfo field 5, octal escapes decoded). */
function mountPoints(): string[] {
  let text = '';
  try {
    text = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((p): p is string => !!p)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8))));
}

/** Gives the owner rwx on every directory under `dir` (a test may have left one mode 000). */
function openModes(dir: string): void {
  let st: ReturnType<typeof lstatSync>;
  try {
    st = lstatSync(dir);
  } catch {
    return;
  }
  if (!st.isDirectory()) return; // a symlink is never followed
  try {
    chmodSync(dir, (st.mode & 0o7777) | 0o700);
    for (const name of readdirSync(dir)) openModes(join(dir, name));
  } catch {
    // not ours to change (another uid's): the removal then says what is left
  }
}

/**
 * Removes `dirs` and all they hold. A directory that has a mount point at or under it is left
 * (a removal unmounts nothing, and never descends into a filesystem a test mounted there).
 * Returns what is left, each with the reason.
 */
export function removeTestDirs(dirs: readonly string[]): string[] {
  const left: string[] = [];
  if (dirs.length === 0) return left;
  const mounts = mountPoints();
  for (const dir of dirs) {
    const mounted = mounts.find((m) => m === dir || m.startsWith(`${dir}/`));
    if (mounted) {
      left.push(`${dir} (left: ${mounted} is a mount point)`);
      continue;
    }
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      openModes(dir);
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
      } catch (err) {
        left.push(`${dir} (${(err as Error).message})`);
      }
    }
  }
  return left;
}

/** Removes the directories this process made through `testDir`; returns what is left. */
export function removeOwnTestDirs(): string[] {
  return removeTestDirs(made.splice(0));
}
