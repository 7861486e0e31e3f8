// A session whose sweep ran but could not look (docs/sandbox.md, "Agent sessions"): a channel
// that enters the container's PID namespace but not its mount namespace (`nsenter -p`) runs the
// command, and the sweep finds no /proc of that namespace (NO_PROC). Nothing was settled — what
// the command started may still run — so the session's end is AMBIGUOUS_EFFECT (`tether sandbox
// run`: 121), never a success: before, `sandbox.run` resolved with `failed: false` and the CLI
// exited 0 while the leftover ran on (found by a new user's trial). Ground truth: the leftover,
// by its unique cmdline, alive on the host until the test's own sweep through a channel that
// sees the container.
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { tether } from '../support/cli.js';
import { cmdlineOf, pids } from '../support/proc.js';
import { type Container, privateTmp, sleep, startContainer, taggedOnHost } from './container.js';

const SWEEP = { graceMs: 500, killAfterMs: 500 };
let box: Container;
beforeAll(async () => {
  box = await startContainer(120);
});
afterAll(async () => {
  await box?.stop();
});

// The container's PID namespace only: its processes run with the host's /proc mounted.
const pidOnly = () => ['nsenter', '-t', String(box.init), '-p'];

// Polled for up to 10 s: it starts a moment after the command, later on a busy machine.
async function leftover(cmdline: string): Promise<number | undefined> {
  for (let i = 0; i < 500; i++) {
    const pid = pids().find((p) => cmdlineOf(p) === cmdline);
    if (pid !== undefined) return pid;
    await sleep(20);
  }
  return undefined;
}

describe('a session whose sweep cannot look', () => {
  it('sandbox.run: AMBIGUOUS_EFFECT, whatever `reject` says; the leftover may still run, and does', async () => {
    const tag = createTag();
    const s = 8_700 + (process.pid % 200);
    try {
      const call = sandbox.run(
        sandbox.commandChannel(pidOnly()),
        ['sh', '-c', `setsid sleep ${s} </dev/null >/dev/null 2>&1 & echo started`],
        { tag, sweep: SWEEP, reject: false },
      );
      await expect(call).rejects.toMatchObject({ code: 'AMBIGUOUS_EFFECT' });
      const error = await call.catch((e: { message: string; report?: { complete: boolean } }) => e);
      expect((error as { message: string }).message).toMatch(/NO_PROC/);
      expect((error as { report?: { complete: boolean } }).report?.complete).toBe(false);
      // Premise and ground truth: the leftover ran, and runs on — the end claimed nothing else.
      expect(await leftover(`sleep ${s}`), 'premise broken: the leftover never ran').toBeDefined();
    } finally {
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, SWEEP);
    }
  });

  it('tether sandbox run: 121, and the message says the session could not be settled', async () => {
    const tag = createTag();
    const s = 8_900 + (process.pid % 200);
    try {
      const r = await tether([
        'sandbox',
        'run',
        '--tag',
        tag.name,
        '-k',
        '500ms',
        '--via',
        pidOnly().join(' '),
        '--',
        'sh',
        '-c',
        `setsid sleep ${s} </dev/null >/dev/null 2>&1 & echo started`,
      ]);
      expect(r.code, r.stderr).toBe(121);
      expect(r.stderr).toMatch(/could not be swept: its sweep could not settle it \(NO_PROC/);
    } finally {
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, SWEEP);
    }
  });
});

describe('a session on the env tag alone, with nothing to list', () => {
  it('tether sandbox run says the helper could not be had and what the env tag cannot see', async () => {
    // A read-only /tmp of the container's own: the helper cannot be pushed.
    privateTmp(box, 'tether-ue');
    execFileSync('nsenter', ['-t', String(box.init), '-m', 'mount', '-o', 'remount,ro', '/tmp'], {
      timeout: 10_000,
    });
    const tag = createTag();
    try {
      const r = await tether([
        'sandbox',
        'run',
        '--tag',
        tag.name,
        '--via',
        box.prefix.join(' '),
        '--',
        'true',
      ]);
      expect(r.code, r.stderr).toBe(0);
      // Before, only the tag line: the env tag's blind spot was in --json alone.
      expect(r.stderr).toMatch(/^tether: warning: no helper in .*the session runs on the env tag alone$/m);
      expect(r.stderr).toMatch(/^tether: not seen: env-cleared processes are invisible to the env tag/m);
    } finally {
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag.name, SWEEP);
    }
  });
});
