// The sweep in PID namespaces: a supervisor that is not PID 1 of its namespace still stops its
// payload, and a procfs of another PID namespace is refused, never swept.
import { spawn as spawnChild } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const DIST = join(import.meta.dirname, '../../dist/index.js');

// Runs `node -e PROGRAM` under `unshare ARGS`, with a hard timeout; returns its stdout.
function inNamespace(unshareArgs: string[], program: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawnChild(
      'unshare',
      [...unshareArgs, process.execPath, '--input-type=module', '-e', program],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`unshare ${unshareArgs.join(' ')} exited ${code}: ${err}`));
    });
  });
}

describe('PID namespaces', () => {
  it('a supervisor that is PID 2 of its namespace (under an init) still stops its payload', async () => {
    // unshare --fork makes `sh` PID 1 and node PID 2: its children have ppid 2, which is not
    // what makes a kernel thread.
    const program = `
      const { spawn } = await import(${JSON.stringify(DIST)});
      const started = performance.now();
      const r = await spawn('sleep', ['30'], { timeout: 200, graceMs: 500, killAfterMs: 500, reject: false });
      console.log(JSON.stringify({ pid: process.pid, ms: performance.now() - started, signal: r.signal, ok: r.report.ok }));`;
    const out = await inNamespace(
      ['--pid', '--fork', '--mount-proc', 'sh', '-c', '"$0" "$@"; true'],
      program,
    );
    const r = JSON.parse(out);
    expect(r.pid, 'premise broken: node was not PID 2 in its namespace').toBe(2);
    expect(r.signal, `the payload was not stopped by the timeout: ${out}`).toBe('SIGTERM');
    expect(r.ms).toBeLessThan(10_000);
    expect(r.ok).toBe(true);
  });

  it('refuses to sweep through a procfs of another PID namespace, and says so', async () => {
    // Without --mount-proc, /proc is the parent namespace's: its pids are not ours.
    const program = `
      const { sweep, createTag } = await import(${JSON.stringify(DIST)});
      const r = await sweep({ tag: createTag(), graceMs: 100, killAfterMs: 100 });
      console.log(JSON.stringify({ complete: r.complete, ok: r.ok, warnings: r.warnings.map((w) => w.code), scans: r.timings.scans }));`;
    const r = JSON.parse(await inNamespace(['--pid', '--fork'], program));
    expect(r).toEqual({
      complete: false,
      ok: false,
      warnings: expect.arrayContaining(['PROC_NAMESPACE']),
      scans: 0,
    });
  });
});
