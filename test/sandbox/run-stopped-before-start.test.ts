// `sandbox.run` whose signal or timeout ends the session before its command was sent (while the
// helper is checked through a new channel): nothing ran, and the call says so as a cancel or a
// timeout says it — `CANCELLED` / `TIMED_OUT`, `isCanceled` / `timedOut`, the session's sweep in
// `report` — and the CLI exits as for any signal (143). Before, it rejected with the session's own
// `SESSION_ENDED` ("ended before "sh" started"), which the CLI did not map: exit 1 (a fresh user's
// trial, a `tether sandbox run` SIGTERMed about 1 s after its start). Ground truth: the command's
// mark file is never written.
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sandbox } from '../../src/index.js';
import { commandChannel, type ExecChannel } from '../../src/sandbox/index.js';
import { ROOT } from '../support/paths.js';
import { testDir } from '../support/temp.js';
import { type Container, privateTmp, sleep, startContainer } from './container.js';

const TETHER = join(ROOT, 'bin/tether.cjs');

let box: Container;
beforeAll(async () => {
  box = await startContainer(180);
  privateTmp(box, `tether-stopped-before-start-${process.pid}`);
});
afterAll(async () => {
  await box?.stop();
});

// A new channel object (the helper is checked again through it, as a new process does), which
// calls `onFirst` as its first exec (the helper's check) is spawned.
function firstExecThen(onFirst: () => void): ExecChannel {
  const inner = commandChannel(box.prefix);
  let first = true;
  return {
    describe: inner.describe,
    argv: inner.argv,
    exec(argv) {
      const client = inner.exec(argv);
      if (first) {
        first = false;
        onFirst();
      }
      return client;
    },
  };
}

const mark = (name: string) => `/tmp/tether-stopped-before-start-${name}-${process.pid}`;
const inBox = (path: string) => `/proc/${box.init}/root${path}`;

describe('sandbox.run stopped before its command was sent', () => {
  it('by its signal: CANCELLED, isCanceled, nothing ran', async () => {
    const controller = new AbortController();
    const channel = firstExecThen(() => controller.abort());
    const path = mark('signal');
    const call = sandbox.run(channel, ['sh', '-c', `echo ran > ${path}`], { signal: controller.signal });
    await expect(call).rejects.toMatchObject({ code: 'CANCELLED', isCanceled: true, stoppedBy: 'cancel' });
    const r = await sandbox.run(
      firstExecThen(() => {}),
      ['true'],
      { signal: controller.signal, reject: false },
    );
    expect(r).toMatchObject({ failed: true, isCanceled: true, stoppedBy: 'cancel', exitCode: null });
    expect(r.report.complete).toBe(true);
    expect(existsSync(inBox(path)), 'the command never ran').toBe(false);
  }, 60_000);

  it('by its timeout: TIMED_OUT, timedOut, nothing ran', async () => {
    const path = mark('timeout');
    // A channel whose first exec is held 300 ms before it starts: the 100 ms timeout comes first.
    const inner = commandChannel(box.prefix);
    let first = true;
    const slow: ExecChannel = {
      describe: inner.describe,
      argv: inner.argv,
      exec(argv) {
        if (!first) return inner.exec(argv);
        first = false;
        return inner.exec(['sh', '-c', 'sleep 0.3; exec "$@"', 'sh', ...argv]);
      },
    };
    const r = await sandbox.run(slow, ['sh', '-c', `echo ran > ${path}`], { timeout: 100, reject: false });
    expect(r).toMatchObject({ failed: true, timedOut: true, stoppedBy: 'timeout', exitCode: null });
    expect((r.error as { code?: string } | undefined)?.code).toBe('TIMED_OUT');
    expect(existsSync(inBox(path)), 'the command never ran').toBe(false);
  }, 60_000);

  it('tether sandbox run SIGTERMed while its first exec runs: exit 143, said as a cancel (as after its start), nothing ran', async () => {
    const dir = testDir('stopped-before-start');
    const started = join(dir, 'started');
    // A --via whose execs say they started (a file on the host), then wait 1 s before entering.
    const via = join(dir, 'via');
    writeFileSync(via, `#!/bin/sh\n: > ${started}\nsleep 1\nexec ${box.prefix.join(' ')} "$@"\n`, {
      mode: 0o755,
    });
    const path = mark('cli');
    const child = spawn(
      process.execPath,
      [TETHER, 'sandbox', 'run', '--via', via, '--', 'sh', '-c', `echo ran > ${path}`],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const status = new Promise<number | null>((resolve) => child.on('close', resolve));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    // tether's own code started the first exec: its signal handling is in place.
    for (let i = 0; i < 500 && !existsSync(started); i++) await sleep(20);
    expect(existsSync(started), 'premise broken: no exec was started').toBe(true);
    child.kill('SIGTERM');
    expect(await status, err).toBe(143);
    clearTimeout(timer);
    expect(err).toMatch(/^tether: Command was canceled: sh -c echo ran > /m);
    expect(err).not.toMatch(/SESSION_ENDED|ended before/);
    expect(existsSync(inBox(path)), 'the command never ran').toBe(false);
  }, 60_000);
});
