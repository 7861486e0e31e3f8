// Whether this kernel keeps a reaped child's wait status for a pidfd (PIDFD_INFO_EXIT, Linux
// 6.15): asked of a real child, once. Without it, a real-time signal's end is not visible on the
// paths Node spawns directly (env-tag, the guard's command): tests of those paths skip, saying so.
import { execFileSync, spawn } from 'node:child_process';
import { watchExit } from '../../src/proc/wait-status.js';

let answer: Promise<boolean> | undefined;

export function kernelKeepsExitStatus(): Promise<boolean> {
  answer ??= new Promise((resolve) => {
    const child = spawn('sh', ['-c', 'exit 3'], { stdio: 'ignore' });
    const watch = watchExit(child.pid as number);
    child.on('error', () => resolve(false));
    child.on('exit', () => resolve(watch.take()?.exitCode === 3));
  });
  return answer;
}

/** Why a test that needs it is skipped. */
export const NO_EXIT_INFO =
  'this kernel keeps no wait status for a pidfd (PIDFD_INFO_EXIT needs Linux 6.15): skipped';

/** What the shell (sh: dash on Debian) says of `sh -c SCRIPT`'s end: its `$?`, the status the tests compare with. */
export function shellStatus(script: string): number {
  return Number(
    execFileSync('sh', ['-c', 'sh -c "$1"; echo $?', 'sh', script], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim(),
  );
}
