// tether/claude-agent-sdk with the SDK's real query() driving a stand-in `claude` executable
// (test/fixtures/node/claude-standin.mjs) that leaves a setsid'd, nohup'd TCP server behind.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { query, type SDKMessage } from '@anthropic-ai/claude-agent-sdk';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createClaudeCodeSpawner,
  lostBackgroundWork,
  type TetheredClaudeProcess,
} from '../../src/adapters/claude-agent-sdk.js';
import type { SweepReport } from '../../src/index.js';
import { FIXTURES } from '../support/paths.js';
import { cmdlineOf, isAlive } from '../support/proc.js';
import { cleanup, killIfAlive, tempDir, waitFor } from '../support/zoo.js';
import { connectOutcome, serverIn } from './support.js';

afterEach(() => cleanup());

const STANDIN = join(FIXTURES, 'node/claude-standin.mjs');
const FAST = { graceMs: 1000, killAfterMs: 1000, outputCapMs: 500 } as const;

function standinEnv(dir: string, mode?: string): Record<string, string | undefined> {
  return { ...process.env, STANDIN_DIR: dir, ...(mode ? { STANDIN_MODE: mode } : {}) };
}

describe('spawnClaudeCodeProcess under query()', () => {
  it("a query's background server is gone when the query ends, and its port is free", async () => {
    const dir = tempDir();
    const reports: SweepReport[] = [];
    const spawner = createClaudeCodeSpawner({ ...FAST, onReport: (r) => reports.push(r) });
    const messages: SDKMessage[] = [];
    let server: Awaited<ReturnType<typeof serverIn>> | undefined;
    for await (const m of query({
      prompt: 'start the dev server',
      options: { pathToClaudeCodeExecutable: STANDIN, spawnClaudeCodeProcess: spawner, env: standinEnv(dir) },
    })) {
      messages.push(m);
      // The stand-in starts the server before its first message: its identity is taken live.
      server ??= await serverIn(join(dir, 'pids'));
    }

    // Premise: the SDK spoke stream-json to the stand-in, and the turn ran.
    expect(JSON.parse(readFileSync(join(dir, 'argv'), 'utf8'))).toEqual(
      expect.arrayContaining(['--output-format', 'stream-json', '--input-format', 'stream-json']),
    );
    expect(readFileSync(join(dir, 'stdin'), 'utf8')).toMatch(/"subtype":"initialize"/);
    expect(messages.map((m) => m.type)).toEqual(['system', 'assistant', 'result']);
    if (!server) throw new Error('premise broken: no server was recorded');
    const { identity, port } = server;

    // The query's end came after the sweep: the report is there, the server is gone.
    expect(reports).toHaveLength(1);
    expect(
      isAlive(identity),
      `the server pid ${identity.pid} (${cmdlineOf(identity.pid)}) outlived the query`,
    ).toBe(false);
    expect(await connectOutcome(port)).toBe('ECONNREFUSED');
    const report = reports[0] as SweepReport;
    const record = report.stopped.find((p) => p.pid === identity.pid);
    expect(record?.listening).toEqual([{ protocol: 'tcp', address: '127.0.0.1', port }]);
    expect(lostBackgroundWork(report)).toContain(`pid ${identity.pid}: `);
    expect(lostBackgroundWork(report)).toContain(`127.0.0.1:${port}`);
  });

  it("without the adapter the SDK's own spawn leaves the server running (the contrast)", async () => {
    const dir = tempDir();
    for await (const _ of query({
      prompt: 'start the dev server',
      options: { pathToClaudeCodeExecutable: STANDIN, env: standinEnv(dir) },
    })) {
      // drain
    }
    const { identity, port } = await serverIn(join(dir, 'pids'));
    expect(isAlive(identity), 'premise broken: the server died with the CLI even without tether').toBe(true);
    expect(await connectOutcome(port)).toBe('connected');
    killIfAlive(identity); // this test started it
    await waitFor(`the server pid ${identity.pid} to end`, () => !isAlive(identity));
  });

  it("the SDK's abort mid-query ends the session: the CLI and its server", async () => {
    const dir = tempDir();
    const reports: SweepReport[] = [];
    const processes: TetheredClaudeProcess[] = [];
    const spawner = createClaudeCodeSpawner({ ...FAST, onReport: (r) => reports.push(r) });
    const abortController = new AbortController();
    const q = query({
      prompt: 'start the dev server and wait',
      options: {
        pathToClaudeCodeExecutable: STANDIN,
        abortController,
        spawnClaudeCodeProcess: (o) => {
          const p = spawner(o);
          processes.push(p);
          return p;
        },
        env: standinEnv(dir, 'hang'),
      },
    });
    let error: unknown;
    let server: Awaited<ReturnType<typeof serverIn>> | undefined;
    try {
      for await (const m of q) {
        if (m.type !== 'system') continue;
        server = await serverIn(join(dir, 'pids'));
        expect(await connectOutcome(server.port), 'premise broken: the server does not listen').toBe(
          'connected',
        );
        abortController.abort();
      }
    } catch (e) {
      error = e;
    }
    expect(String(error)).toMatch(/abort/i);
    if (!server) throw new Error('premise broken: no server was recorded');
    const { identity, port } = server;
    const cli = processes[0] as TetheredClaudeProcess;
    await cli.report;
    expect(reports).toHaveLength(1);
    expect(isAlive(identity), `the server pid ${identity.pid} outlived the abort`).toBe(false);
    expect(await connectOutcome(port)).toBe('ECONNREFUSED');
    expect(cli.exitCode !== null || cli.signalCode !== null, 'the CLI has no exit status').toBe(true);
  });
});

describe('the spawned process', () => {
  it("kill('SIGKILL') reaches the CLI itself: its exit says SIGKILL, and the session is swept", async () => {
    const dir = tempDir();
    let reported: SweepReport | undefined;
    const spawn = createClaudeCodeSpawner({ ...FAST, onReport: (r) => (reported = r) });
    const p = spawn({
      command: process.execPath,
      args: [STANDIN],
      env: standinEnv(dir, 'hang'),
      signal: new AbortController().signal,
    });
    const exit = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      p.once('exit', (code, signal) => resolve([code, signal])),
    );
    p.stdin.write(`${JSON.stringify({ type: 'user', message: { role: 'user', content: 'go' } })}\n`);
    const { identity } = await serverIn(join(dir, 'pids'));
    expect(p.kill('SIGKILL')).toBe(true);
    expect(await exit).toEqual([null, 'SIGKILL']);
    expect([p.exitCode, p.signalCode, p.killed]).toEqual([null, 'SIGKILL', true]);
    expect(reported?.stopped.map((r) => r.pid)).toContain(identity.pid);
    expect(isAlive(identity), `the server pid ${identity.pid} outlived the CLI's SIGKILL`).toBe(false);
  });

  it("a CLI that cannot start is an 'error' with Node's errno error, and the session is still reported", async () => {
    const p = createClaudeCodeSpawner(FAST)({
      command: '/nonexistent/claude',
      args: [],
      env: { PATH: process.env.PATH },
      signal: new AbortController().signal,
    });
    const error = await new Promise<NodeJS.ErrnoException>((resolve) => p.once('error', resolve));
    expect(error.code).toBe('ENOENT');
    expect((await p.report).complete).toBe(true);
  });

  it('a bad session option throws INVALID_OPTION when the spawner is made', () => {
    expect(() => createClaudeCodeSpawner({ graceMs: -1 })).toThrow(/invalid graceMs/);
    expect(() => createClaudeCodeSpawner({ onReport: 'x' as never })).toThrow(/invalid onReport/);
  });
});
