// The Playwright `webServer` recipe of docs/integrations.md with the real @playwright/test
// runner: `command: 'tether run -- node server.mjs'` (test/fixtures/runners), a test that only
// uses the `request` fixture (no browser). The server leaves a child in a POSIX session of its
// own, which Playwright's signal to the command's process group never reaches. With
// `gracefulShutdown` (SIGTERM to the group) tether ends the session before it exits; with
// Playwright's default (SIGKILL to the group) tether dies at once and its helper — in a group
// of its own — ends the session through its dead man's switch, within the grace.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Identity } from '../../src/index.js';
import { freePort } from '../support/net.js';
import { FIXTURES, ROOT } from '../support/paths.js';
import { isAlive } from '../support/proc.js';
import { cleanup, describeProcess, started, tempDir, waitFor } from '../support/zoo.js';

const CONFIG = join(FIXTURES, 'runners/playwright.config.mjs');
/** `--grace` of the fixture's `tether run`. */
const GRACE_MS = 1000;

afterEach(() => cleanup());

// `npx playwright test` on the fixture, bounded at 90 s.
function playwright(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('VITEST')));
  const child = spawn('npx', ['playwright', 'test', '-c', CONFIG], {
    cwd: ROOT,
    env: { ...base, RUNNERS_RESULTS: join(tempDir(), 'results'), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 90_000);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    }),
  );
}

// The server and its child, as the server recorded them while it ran.
function recorded(pidfile: string): Array<[string, Identity]> {
  const text = existsSync(pidfile) ? readFileSync(pidfile, 'latin1') : '';
  const ids = ['server', 'child'].map((label): [string, Identity] => {
    const m = new RegExp(`^${label} (\\d+) (\\d+)$`, 'm').exec(text);
    if (!m)
      throw new Error(`premise broken: the server did not record its ${label} (${JSON.stringify(text)})`);
    return [label, { pid: Number(m[1]), startTime: Number(m[2]) }];
  });
  started.push(...ids.map(([, id]) => id));
  return ids;
}

describe('the Playwright webServer recipe with the real @playwright/test runner', () => {
  it('with gracefulShutdown SIGTERM: the server and its setsid child are gone when Playwright exits', async () => {
    const pidfile = join(tempDir(), 'pids');
    const run = await playwright({
      PORT: String(await freePort()),
      RUNNERS_PIDFILE: pidfile,
      RUNNERS_GRACEFUL: '1',
    });
    expect(run.code, run.output).toBe(0);
    expect(run.output).toMatch(/1 passed/);
    for (const [label, id] of recorded(pidfile))
      expect(isAlive(id), `the ${label} ${describeProcess(id)} outlived the Playwright run`).toBe(false);
  });

  it("with Playwright's default SIGKILL to the group: the helper's dead man's switch ends them within the grace", async () => {
    const pidfile = join(tempDir(), 'pids');
    const run = await playwright({ PORT: String(await freePort()), RUNNERS_PIDFILE: pidfile });
    expect(run.code, run.output).toBe(0);
    expect(run.output).toMatch(/1 passed/);
    const ids = recorded(pidfile);
    await waitFor(
      `${ids.map(([label, id]) => `the ${label} ${describeProcess(id)}`).join(' and ')} to end after the group SIGKILL`,
      () => ids.every(([, id]) => !isAlive(id)),
      GRACE_MS + 1000,
    );
  });
});
