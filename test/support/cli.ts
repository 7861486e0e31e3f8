// Running the real `tether` CLI from tests: bin/tether.cjs under this Node, with a hard timeout.
import { spawn } from 'node:child_process';
import { lstatSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ProcessId } from './proc.js';
import { invalid } from './schemas.js';

export const BIN = join(import.meta.dirname, '../../bin/tether.cjs');

export interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `tether ARGS…` (in `cwd`, with `env`); a run that has not ended in 20 s is SIGKILLed and
 * fails the test instead of hanging the suite. `onStart` gets tether's pid (to signal it).
 */
export function tether(
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; cwd?: string; onStart?: (pid: number) => void } = {},
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: opts.env ?? process.env, cwd: opts.cwd });
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
      // What the run wrote for other programs must hold its published schema (dist/schemas/).
      const problems = schemaProblems(args, stdout, stderr);
      if (problems.length > 0)
        reject(
          new Error(`tether ${args.join(' ')} wrote what its schema refuses:\n  ${problems.join('\n  ')}`),
        );
      else resolve({ code, signal, stdout, stderr });
    });
  });
}

// The documents a `tether run` or `tether sweep` wrote (a --json report, --report-file,
// --events lines) that their schema (test/support/schemas.ts) refuses, as lines; [] when all hold.
function schemaProblems(args: string[], stdout: string, stderr: string): string[] {
  const [command] = args;
  if (command !== 'run' && command !== 'sweep') return [];
  const cut = args.indexOf('--');
  const own = cut < 0 ? args : args.slice(0, cut);
  const value = (flag: string) => {
    const i = own.indexOf(flag);
    return i < 0 ? undefined : own[i + 1];
  };
  const out: string[] = [];
  if (own.includes('--json')) {
    // run: the report is stderr's last line; sweep: stdout, indented.
    const text = command === 'run' ? stderr.trim().split('\n').at(-1) : stdout;
    const report = parsed(text);
    if (report !== undefined) out.push(...invalid('report', report).map((p) => `--json report: ${p}`));
  }
  const reportFile = value('--report-file');
  if (reportFile) {
    const report = parsed(regularFileText(reportFile));
    if (report !== undefined) out.push(...invalid('report', report).map((p) => `--report-file: ${p}`));
  }
  const events = value('--events');
  if (events)
    for (const line of regularFileText(events).split('\n')) {
      const event = parsed(line);
      if (event !== undefined)
        out.push(...invalid('event', event).map((p) => `--events line ${line.slice(0, 80)}: ${p}`));
    }
  return out;
}

// The text of `path` when it is a regular file (never a FIFO a test set up: reading one would
// block), else ''.
function regularFileText(path: string): string {
  try {
    return lstatSync(path).isFile() ? readFileSync(path, 'utf8') : '';
  } catch {
    return '';
  }
}

// JSON of `text`, or undefined when it is none (a run that failed before it wrote one).
function parsed(text: string | undefined): unknown {
  if (!text?.trim().startsWith('{')) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
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
