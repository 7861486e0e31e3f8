// The sandbox CLI: tether sandbox exec|sweep --via PREFIX, tether script NAME.
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../support/paths.js';
import { aliveOnHost, type Container, startContainer, taggedOnHost } from './container.js';

const TETHER = join(ROOT, 'bin/tether.js');

function cmdline(pid: string): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'latin1').replaceAll('\0', ' ').trim();
  } catch {
    return '';
  }
}

function tether(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [TETHER, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

let box: Container;
let via: string;
let lossy: string;
beforeAll(async () => {
  box = await startContainer(120);
  via = box.prefix.join(' ');
  // A channel that loses the command's stream after 5 bytes and exits 0, as client-go does;
  // the sweep's exec goes through untouched.
  lossy = join(mkdtempSync(join(tmpdir(), 'tether-cli-')), 'lossy-exec');
  writeFileSync(
    lossy,
    `#!/bin/sh\ncase "$*" in *tether-wrap*) ${via} "$@" | head -c 5; exit 0 ;; esac\nexec ${via} "$@"\n`,
  );
  chmodSync(lossy, 0o755);
});
afterAll(async () => {
  await box?.stop();
});

describe('tether sandbox exec', () => {
  it("passes the command's output through byte-exact and exits with its status", async () => {
    const r = await tether([
      'sandbox',
      'exec',
      '--via',
      via,
      '--',
      'sh',
      '-c',
      'printf out; echo err >&2; exit 3',
    ]);
    expect(r).toEqual({ status: 3, stdout: 'out', stderr: 'err\n' });
  });

  it('on a lost stream, sweeps the session and exits 125 with the error and report as JSON', async () => {
    const r = await tether([
      'sandbox',
      'exec',
      '--via',
      lossy,
      '--grace',
      '1s',
      '--json',
      '--',
      'sh',
      '-c',
      'setsid sleep 48 </dev/null >/dev/null 2>&1 & i=0; while [ $i -lt 50 ]; do echo line $i; i=$((i+1)); sleep 0.01; done',
    ]);
    expect(r.status, r.stderr).toBe(125);
    const error = JSON.parse(r.stderr.trim().split('\n').at(-1) as string);
    expect(error.code).toBe('EXEC_STATUS_UNKNOWN');
    expect(error.report.ok).toBe(true);
    expect(error.report.stopped.map((p: { cmdline: string }) => p.cmdline)).toContain('sleep 48');
    expect(taggedOnHost(error.report.tag).filter(aliveOnHost)).toEqual([]);
  });

  it('SIGTERM cancels: the session is swept in the container and the command ends proven, 143', async () => {
    const child = spawn(
      process.execPath,
      [TETHER, 'sandbox', 'exec', '--via', via, '--', 'sh', '-c', 'echo up; sleep 31'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    const status = new Promise<number | null>((resolve) => child.on('close', resolve));
    await new Promise<void>((resolve) =>
      child.stdout.on('data', (d) => {
        out += d;
        // The final newline is held back until more bytes arrive: it could begin the line.
        if (out.includes('up')) resolve();
      }),
    );
    let sleeper: string[] = [];
    for (let i = 0; i < 100 && sleeper.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
      sleeper = readdirSync('/proc').filter((p) => /^\d+$/.test(p) && cmdline(p) === 'sleep 31');
    }
    expect(sleeper.length, 'premise broken: the command is not running').toBe(1);
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    expect(await status).toBe(143);
    clearTimeout(timer);
    expect(out).toBe('up\n');
    expect(sleeper.filter((p) => cmdline(p) === 'sleep 31')).toEqual([]);
  });

  it('refuses an unbalanced --via, naming it', async () => {
    const r = await tether(['sandbox', 'exec', '--via', "docker exec -i 'x", '--', 'true']);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/invalid --via "docker exec -i 'x": unbalanced '/);
  });
});

describe('tether sandbox sweep', () => {
  it('prints the report as JSON', async () => {
    const tag = `TETHER_SESSION_${'ab'.repeat(16)}`;
    const r = await tether(['sandbox', 'sweep', '--via', via, '--tag', tag, '--json']);
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect([report.tag, report.ok, report.layers]).toEqual([tag, true, ['env-tag', 'sandbox']]);
  });

  it('says when the channel cannot reach the container', async () => {
    const tag = `TETHER_SESSION_${'cd'.repeat(16)}`;
    const r = await tether([
      'sandbox',
      'sweep',
      '--via',
      '/nonexistent/kubectl exec -i p --',
      '--tag',
      tag,
      '--budget',
      '1s',
    ]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/could not reach \/nonexistent\/kubectl exec -i p -- in \d+ attempts/);
  });
});

describe('tether script', () => {
  it('prints each program as it is in the source', async () => {
    for (const name of ['sweep', 'wrap', 'write']) {
      const r = await tether(['script', name]);
      expect(r.stdout).toBe(readFileSync(join(ROOT, `src/sandbox/programs/${name}.sh`), 'utf8'));
    }
  });
});
