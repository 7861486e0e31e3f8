// What ends a sandbox call besides its command: a cancel during an unknown end's sweep, a
// silent client; and what the sweep of an unknown end needs: the command's shell, a /proc.

import { getEventListeners } from 'node:events';
import { chmodSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { testDir } from '../support/temp.js';
import { aliveOnHost, type Container, lossyChannel, startContainer, taggedOnHost } from './container.js';

let box: Container;
let dir: string;
beforeAll(async () => {
  box = await startContainer(300);
  dir = testDir('tether-stops-');
  // A container whose `sh` cannot run (as one without sh): dash is there, sh is not.
  mkdirSync(join(dir, 'nosh'));
  writeFileSync(join(dir, 'nosh/sh'), '#!/bin/dash\necho "sh: not found" >&2\nexit 127\n');
  chmodSync(join(dir, 'nosh/sh'), 0o755);
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
// A pid that names no process: nsenter cannot open its namespaces, as a pod already gone.
const GONE = sandbox.commandChannel(['nsenter', '-t', '2147483646', '-a']);

function hostPids(cmdline: string): number[] {
  const found: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, 'latin1').replaceAll('\0', ' ').trim() === cmdline)
        found.push(Number(p));
    } catch {
      // gone
    }
  }
  return found;
}

describe('the sweep of an unknown end', () => {
  it("runs under the command's shell: in a container without sh it still stops the leftover", async () => {
    const noSh = sandbox.commandChannel([...box.prefix, 'env', `PATH=${dir}/nosh:/usr/bin:/bin`]);
    const tag = createTag();
    const cut = lossyChannel(noSh, { after: 'up\n' });
    const outcome = await sandbox
      .exec(cut, ['dash', '-c', 'setsid sleep 52 </dev/null >/dev/null 2>&1 & echo up; sleep 0.5'], {
        shell: ['dash'],
        tag,
        sweep: { ...SWEEP, budgetMs: 1500 },
      })
      .catch((e: Error) => e);
    try {
      expect(outcome, 'premise broken: the stream was not lost').toBeInstanceOf(Error);
      expect((outcome as { code?: string }).code, (outcome as Error).message).toBe('EXEC_STATUS_UNKNOWN');
      const report = (outcome as InstanceType<typeof sandbox.ExecStatusUnknownError>).report;
      expect(report.stopped.map((p) => p.cmdline)).toContain('sleep 52');
      expect(taggedOnHost(tag.name).filter(aliveOnHost), 'the leftover sleep 52 survived').toEqual([]);
    } finally {
      await sandbox.sweep(box.channel, tag, SWEEP);
    }
  });

  it('a cancel during its retries ends it within the cancel budget, not the whole budget', async () => {
    const tag = createTag();
    let calls = 0;
    const lossy = lossyChannel(box.channel, { after: 'up\n' });
    // The command's exec reaches the container and loses its stream; every sweep exec is
    // unreachable, so the sweep retries until its budget (20 s) — or a cancel's (1 s).
    const channel: sandbox.ExecChannel = {
      describe: 'then-gone',
      exec(argv) {
        calls += 1;
        return (calls === 1 ? lossy : GONE).exec(argv);
      },
    };
    const abort = new AbortController();
    let abortedAt = 0;
    const outcome = await sandbox
      .exec(channel, ['sh', '-c', 'echo up; sleep 0.3'], {
        tag,
        signal: abort.signal,
        sweep: {
          ...SWEEP,
          budgetMs: 20_000,
          cancelBudgetMs: 1000,
          onRetry: () => {
            if (abortedAt) return;
            abortedAt = performance.now();
            abort.abort();
          },
        },
      })
      .catch((e: Error) => e);
    const ms = performance.now() - abortedAt;
    expect(abortedAt, 'premise broken: the sweep never retried').toBeGreaterThan(0);
    expect((outcome as { code?: string }).code).toBe('AMBIGUOUS_EFFECT');
    expect(ms, `the call ended ${Math.round(ms)} ms after the cancel: the cancel was ignored`).toBeLessThan(
      4000,
    );
    await sandbox.sweep(box.channel, tag, SWEEP);
  });

  it('without /proc in the container says NO_PROC instead of dying on its clock', async () => {
    // /proc hidden under an empty tmpfs, in a mount namespace of the sweep's own.
    const noProc = sandbox.commandChannel([
      ...box.prefix,
      'unshare',
      '--mount',
      'sh',
      '-c',
      'mount -t tmpfs none /proc && exec "$@"',
      'no-proc',
    ]);
    const report = await sandbox.sweep(noProc, createTag(), SWEEP);
    expect([report.complete, report.ok]).toEqual([false, false]);
    expect(report.warnings.map((w) => w.code)).toEqual(['NO_PROC']);
  });
});

describe('a silent client', () => {
  it('is bounded by silenceMs: the session is swept, the client ended, an unknown end', async () => {
    // The command's client hangs without a byte and never exits (as a half-dead kubectl
    // connection); the sweep goes through the real channel.
    let calls = 0;
    const hung = sandbox.commandChannel(['sh', '-c', 'exec sleep 33.3', 'hung']);
    const channel: sandbox.ExecChannel = {
      describe: 'hung',
      exec(argv) {
        calls += 1;
        return (calls === 1 ? hung : box.channel).exec(argv);
      },
    };
    const started = performance.now();
    const outcome = await sandbox
      .exec(channel, ['true'], { silenceMs: 500, sweep: SWEEP })
      .catch((e: Error) => e);
    const ms = performance.now() - started;
    expect(outcome).toBeInstanceOf(sandbox.ExecStatusUnknownError);
    expect((outcome as Error).message).toMatch(/silent for 500 ms/);
    expect(ms, `the silent client held the call ${Math.round(ms)} ms`).toBeLessThan(8000);
    expect(hostPids('sleep 33.3'), 'the hung client is still running').toEqual([]);
  });

  it('rejects a silenceMs that is not a duration, naming it', async () => {
    await expect(sandbox.exec(box.channel, ['true'], { silenceMs: -1 })).rejects.toThrow(
      /invalid silenceMs: -1/,
    );
  });
});

describe('a long-lived AbortSignal', () => {
  it('keeps no listener of a call once the call has ended', async () => {
    const abort = new AbortController();
    for (let i = 0; i < 3; i++) await sandbox.exec(box.channel, ['true'], { signal: abort.signal });
    expect(getEventListeners(abort.signal, 'abort').length, 'listeners left on the signal').toBe(0);
  });
});
