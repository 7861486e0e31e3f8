// `tether guard [options] -- CMD`: the CLI's guard-as-init, as PID 1 of a real PID namespace
// (`unshare --pid --fork --kill-child --mount-proc`). The command itself is the witness: it
// makes an orphan (its subshell exits, the sleep is reparented to the guard) and a child of its
// own, then reads /proc in the namespace to see which of them the guard's ticks ended.
import { spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const TETHER = join(ROOT, 'bin/tether.cjs');

function runInNamespace(args: string[], ms: number): Promise<{ status: number | null; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(
      'unshare',
      ['--pid', '--fork', '--kill-child', '--mount-proc', process.execPath, TETHER, ...args],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL'); // unshare's --kill-child ends the namespace with it
      fail(new Error(`tether guard -- … did not exit within ${ms} ms; stderr: ${stderr}`));
    }, ms);
    child.on('exit', (status) => {
      clearTimeout(timer);
      done({ status, stderr });
    });
  });
}

// Exits 3 when, after 3 s, the orphan is gone and its own child still runs; else 4 or 5 naming
// which. `kill -0` succeeds on a zombie too: gone means reaped, which the guard also does.
const WITNESS = [
  'f=$(mktemp) ;',
  '(sleep 300 & echo $! > "$f") ;',
  'sleep 300 & child=$! ;',
  'orphan=$(cat "$f") ; rm -f "$f" ;',
  'sleep 3 ;',
  'if kill -0 "$orphan" 2>/dev/null; then exit 4; fi ;',
  'if ! kill -0 "$child" 2>/dev/null; then exit 5; fi ;',
  'exit 3',
].join(' ');

describe('tether guard -- CMD', () => {
  it('runs CMD as PID 1’s protected service: a tick stops the orphan, spares CMD’s child, and the guard exits with CMD’s status', async () => {
    const { status, stderr } = await runInNamespace(
      ['guard', '--startup-delay', '0', '--interval', '200ms', '--min-age', '0', '--', 'sh', '-c', WITNESS],
      30_000,
    );
    expect(status, `4: the orphan outlived the ticks; 5: CMD's child was stopped. stderr: ${stderr}`).toBe(3);
    expect(stderr).toMatch(/stopped pid=\d+ .*cmdline="sleep 300"/);
    // CMD's child was left for the end: swept once CMD exited.
    expect(stderr).toMatch(/sh ended \(status 3\); what was left below the guard: 1 stopped, 0 survived/);
  });

  it('refuses --once and --dry-run with a command, naming the option', async () => {
    for (const flag of ['--once', '--dry-run']) {
      const { status, stderr } = await runInNamespace(['guard', flag, '--', 'true'], 20_000);
      expect(status).toBe(125);
      expect(stderr).toContain(`invalid ${flag} with a command`);
    }
  });
});
