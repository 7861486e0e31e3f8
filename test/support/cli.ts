// Running the real `tether` CLI from tests: bin/tether.cjs under this Node, with a hard timeout.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ProcessId } from './proc.js';

export const BIN = join(import.meta.dirname, '../../bin/tether.cjs');

export interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `tether ARGS…`; a run that has not ended in 20 s is SIGKILLed and fails the test instead
 * of hanging the suite. `onStart` gets tether's pid (to signal it).
 */
export function tether(
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; onStart?: (pid: number) => void } = {},
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: opts.env ?? process.env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`tether ${args.join(' ')} did not end within 20 s; stderr: ${stderr}`));
    }, 20_000);
    if (child.pid) opts.onStart?.(child.pid);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/**
 * A shell line that records the last background job as "pid PID START" (START: field 22 of its
 * stat, read while it runs), so ground truth does not depend on reading it after tether ended it.
 */
export const RECORD = `echo "pid $! $(cut -d' ' -f22 /proc/$!/stat)"`;

/** The identities `RECORD` lines in `text` name; throws when there is none (a broken premise). */
export function recordedIds(text: string): ProcessId[] {
  const ids = [...text.matchAll(/^pid (\d+) (\d+)$/gm)].map((m) => ({
    pid: Number(m[1]),
    startTime: Number(m[2]),
  }));
  if (ids.length === 0)
    throw new Error(`premise broken: the payload recorded no leftover (${JSON.stringify(text)})`);
  return ids;
}

/** The file's text, or '' while it does not exist. */
export function readFileSafe(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

/** Polls `check` every 20 ms until it holds or `ms` pass; returns whether it held. */
export async function waitFor(check: () => boolean, ms = 10_000): Promise<boolean> {
  for (let waited = 0; waited < ms; waited += 20) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}
