// Runs a child Node program for a test (exits, containment): `node ARGS`, optionally as another uid.
import { spawn as spawnChild } from 'node:child_process';
import { identityOf } from './proc.js';
import { started } from './zoo.js';

/**
 * Runs `node ARGS` (as `uid` through setpriv when given), bounded at 30 s (then killed, and
 * `done` rejects); its pid joins `started`.
 */
export function runNode(args: string[], opts: { uid?: number; env?: NodeJS.ProcessEnv } = {}) {
  const argv =
    opts.uid === undefined
      ? [process.execPath, ...args]
      : [
          'setpriv',
          `--reuid=${opts.uid}`,
          `--regid=${opts.uid}`,
          '--clear-groups',
          process.execPath,
          ...args,
        ];
  const child = spawnChild(argv[0] as string, argv.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: opts.env ?? process.env,
  });
  const id = child.pid === undefined ? undefined : identityOf(child.pid);
  if (id) started.push(id);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`node ${args.join(' ')} did not exit in 30 s: ${stderr}`));
    }, 30_000);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
  return {
    child,
    done,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
  };
}
