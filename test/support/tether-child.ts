// The real `tether` CLI as a child a test watches while it runs (bin/tether.cjs under this Node):
// what it wrote so far, a hook once its command said `ready`, its exit and its close. cli.ts's
// `tether` is the one for a run that is only awaited (it also checks the schema of what it wrote).
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './paths.js';

const BIN = join(ROOT, 'bin/tether.cjs');

/** A `tether ARGS…` started by `startTether`. */
export interface TetherChild {
  child: ChildProcess;
  /** What it wrote so far ('' for an ignored stdout). */
  output: { stdout: string; stderr: string };
  /** Its exit ('exit'): what it started may still hold its pipes open. */
  exited: Promise<void>;
  /** Its status once it exited and its pipes closed ('close'); null when a signal ended it. */
  closed: Promise<number | null>;
}

/**
 * Starts `tether ARGS…`, stdin ignored, stderr piped, stdout piped unless `stdout: 'ignore'`;
 * `onReady` is called once, when its stdout first holds `ready`.
 */
export function startTether(
  args: string[],
  opts: { stdout?: 'pipe' | 'ignore'; onReady?: (child: ChildProcess) => void } = {},
): TetherChild {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', opts.stdout ?? 'pipe', 'pipe'] });
  const output = { stdout: '', stderr: '' };
  let ready = false;
  child.stdout?.on('data', (d) => {
    output.stdout += d;
    if (!ready && output.stdout.includes('ready')) {
      ready = true;
      opts.onReady?.(child);
    }
  });
  child.stderr?.on('data', (d) => (output.stderr += d));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const closed = new Promise<number | null>((r) => child.once('close', (status) => r(status)));
  return { child, output, exited, closed };
}

/**
 * Runs `tether ARGS…` (as `startTether`) to its end: its status (null when a signal ended it),
 * stdout and stderr. A run still going after `killAfterMs` is SIGKILLed, and so ends.
 */
export async function tetherToEnd(
  args: string[],
  opts: { stdout?: 'pipe' | 'ignore'; onReady?: (child: ChildProcess) => void; killAfterMs: number },
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const run = startTether(args, opts);
  const timer = setTimeout(() => run.child.kill('SIGKILL'), opts.killAfterMs);
  const status = await run.closed;
  clearTimeout(timer);
  return { status, ...run.output };
}
