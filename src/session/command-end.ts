// How a started command ends, before its output is awaited (src/session/result.ts builds the
// result from it): its helper's report, Node's exit event with the kernel's wait status, or a
// start failure (SPAWN_FAILED naming the errno).
import type { ChildProcess } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import type { Helper, PayloadEnd } from '../containment/helper.js';
import type { HelperPool } from '../containment/helper-pool.js';
import { TetherError } from '../errors.js';
import { isAlive } from '../proc/identity.js';
import { type ExitWatch, endFromWatch } from '../proc/wait-status.js';
import type { SweepWarning } from '../sweep/report.js';
import { clip } from './options.js';
import type { CommandEnd } from './result.js';

/** What `helperEnd` tells: the session's helpers, its warnings, where /proc is, and a loss. */
export interface HelperEndContext {
  helpers: HelperPool;
  warnings: SweepWarning[];
  procRoot: string;
  /** The helper was lost before it reported the command's end. */
  onLost: () => void;
}

/** How often a command whose helper was lost is checked for its end, ms. */
const HELPER_LOST_POLL_MS = 50;

/**
 * How a command run under its helper ends: the helper's report of its exit or its start failure;
 * a helper lost first is `HELPER_LOST` (its status unknown, `ctx.onLost` runs), and the command's
 * end is then when its identity is gone.
 */
export function helperEnd(helper: Helper, command: string, ctx: HelperEndContext): Promise<CommandEnd> {
  return helper.end.then(async (end: PayloadEnd): Promise<CommandEnd> => {
    ctx.helpers.commandEnded(helper);
    if (end.kind === 'exit') {
      const ended: CommandEnd = { exitCode: end.exitCode, signal: end.signal };
      if (end.signal === null && end.signalNumber !== undefined) ended.signalNumber = end.signalNumber;
      ctx.helpers.releaseIdle();
      return ended;
    }
    if (end.kind === 'exec-failed') {
      const cause = Object.assign(new Error(`spawn ${command} ${end.errno}`), { code: end.errno });
      const why =
        end.stage === 'exec'
          ? cause.message
          : end.stage === 'cgroup'
            ? `joining the session cgroup failed (${end.errno})`
            : `setting up the PID namespace failed (${end.errno})`;
      return { error: new TetherError('SPAWN_FAILED', `cannot start ${command}: ${why}`, { cause }) };
    }
    ctx.warnings.push({
      code: 'HELPER_LOST',
      message: `the helper (pid ${helper.helper.pid}) of ${command} could not report the command's end (it, or its PID namespace's init, was killed): its exit status is unknown`,
    });
    ctx.onLost();
    // The command may still run, reparented: its end is when its identity is gone (the
    // session's end sweeps it; `spawn()` ends its session at once).
    while (isAlive(helper.payload, ctx.procRoot)) await delay(HELPER_LOST_POLL_MS);
    return { exitCode: null, signal: null };
  });
}

// A start failure Node threw synchronously, as SPAWN_FAILED naming the errno (E2BIG: the
// arguments and environment exceed the kernel's limit, execve(2)).
export function spawnFailed(command: string, cause: unknown): TetherError {
  const code = (cause as NodeJS.ErrnoException).code;
  const why =
    code === 'E2BIG'
      ? 'E2BIG: its arguments and environment are too large for execve(2) (one string over 128 KiB, or all of them over the limit)'
      : clip((cause as Error).message, 200);
  return new TetherError('SPAWN_FAILED', `cannot start ${clip(command)}: ${why}`, { cause });
}

// A command Node started itself: its `exit` event — the kernel's wait status when `exitWatch`
// has it (a real-time signal by number) — or its start failure (ENOENT, EACCES…).
export function directEnd(child: ChildProcess, command: string, exitWatch?: ExitWatch): Promise<CommandEnd> {
  return new Promise((resolve) => {
    child.once('error', (cause) => {
      if (child.pid !== undefined) return; // an error after a successful start (kill failed…)
      resolve({
        error: new TetherError('SPAWN_FAILED', `cannot start ${command}: ${(cause as Error).message}`, {
          cause,
        }),
      });
    });
    child.once('exit', (exitCode, signal) => resolve(endFromWatch(exitWatch, exitCode, signal)));
  });
}
