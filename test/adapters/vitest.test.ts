// tether/vitest with the real vitest runner: a fixture project (test/fixtures/runners) whose
// globalSetup starts a server through `tetherGlobalSetup`; the server leaves a detached child,
// and the project's one test fetches the server. After the run both are gone; after a SIGKILL
// of the vitest process mid-run (no teardown runs) both are gone within the session's grace,
// ended by the subreaper helper's dead man's switch.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Identity } from '../../src/index.js';
import { isHelper } from '../containment/support.js';
import { freePort } from '../support/net.js';
import { FIXTURES, ROOT } from '../support/paths.js';
import { childrenOf, identityOf, isAlive } from '../support/proc.js';
import { cleanup, describeProcess, started, tempDir, waitFor } from '../support/zoo.js';

const PROJECT = join(FIXTURES, 'runners');
const VITEST = join(ROOT, 'node_modules/vitest/vitest.mjs');
/** The fixture's session grace (servers.mjs). */
const GRACE_MS = 1000;

afterEach(() => cleanup());

// The inner run's environment: this run's own VITEST* variables removed, the fixture's added.
function fixtureEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('VITEST')));
  return { ...env, ...extra };
}

// Spawns the fixture's vitest run; `done` resolves with its exit status and output.
function runFixture(argv: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(argv[0] as string, argv.slice(1), {
    cwd: PROJECT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const done = new Promise<{ code: number | null; output: string }>((resolve) =>
    child.once('close', (code) => resolve({ code, output })),
  );
  return { child, done, output: () => output };
}

// The server and its detached child, as the server recorded them while it ran.
function recorded(pidfile: string): { server: Identity; child: Identity } {
  const text = existsSync(pidfile) ? readFileSync(pidfile, 'latin1') : '';
  const id = (label: string) => {
    const m = new RegExp(`^${label} (\\d+) (\\d+)$`, 'm').exec(text);
    if (!m)
      throw new Error(`premise broken: the server did not record its ${label} (${JSON.stringify(text)})`);
    return { pid: Number(m[1]), startTime: Number(m[2]) };
  };
  const ids = { server: id('server'), child: id('child') };
  started.push(ids.server, ids.child);
  return ids;
}

function killTimer(child: ChildProcess, ms: number): NodeJS.Timeout {
  return setTimeout(() => child.kill('SIGKILL'), ms);
}

describe('tether/vitest with the real vitest runner', () => {
  it('the server and its detached child are gone after `npx vitest run`', async () => {
    const dir = tempDir();
    const pidfile = join(dir, 'pids');
    const env = fixtureEnv({ PORT: String(await freePort()), RUNNERS_PIDFILE: pidfile });
    const run = runFixture(['npx', 'vitest', 'run', '--config', 'vitest.config.mjs'], env);
    const timer = killTimer(run.child, 60_000);
    const { code, output } = await run.done;
    clearTimeout(timer);
    expect(code, output).toBe(0);
    expect(output).toMatch(/1 passed/);
    const { server, child } = recorded(pidfile);
    for (const [label, id] of [
      ['server', server],
      ['detached child', child],
    ] as const)
      expect(isAlive(id), `the ${label} ${describeProcess(id)} outlived the vitest run`).toBe(false);
  });

  it('the server and its detached child are gone within the grace after vitest is SIGKILLed', async () => {
    const dir = tempDir();
    const pidfile = join(dir, 'pids');
    const hang = join(dir, 'fetched');
    const env = fixtureEnv({ PORT: String(await freePort()), RUNNERS_PIDFILE: pidfile, RUNNERS_HANG: hang });
    // vitest's own process (not npx's wrapper): the one whose death must not leave the server.
    const run = runFixture([process.execPath, VITEST, 'run', '--config', 'vitest.config.mjs'], env);
    const timer = killTimer(run.child, 60_000);
    const vitest = identityOf(run.child.pid ?? 0);
    if (!vitest) throw new Error('premise broken: vitest did not start');
    started.push(vitest);
    await waitFor(`the fixture's test to fetch the server (${run.output()})`, () => existsSync(hang), 30_000);
    const { server, child } = recorded(pidfile);
    expect(isAlive(server) && isAlive(child), 'premise broken: the server or its child is not running').toBe(
      true,
    );
    expect(
      childrenOf(vitest.pid).some((c) => isHelper(c.pid)),
      "premise broken: the session's helper is not vitest's child",
    ).toBe(true);

    process.kill(vitest.pid, 'SIGKILL');
    await run.done;
    clearTimeout(timer);
    await waitFor(
      `the server ${describeProcess(server)} and its child ${describeProcess(child)} to end after vitest's SIGKILL`,
      () => !isAlive(server) && !isAlive(child),
      GRACE_MS + 1000,
    );
  });
});
