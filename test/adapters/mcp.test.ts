// tether/mcp with the MCP SDK's real Client and a real stdio MCP server
// (test/fixtures/node/mcp-server.mjs) that starts a detached child of its own.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as SdkStdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterEach, describe, expect, it } from 'vitest';
import { lostBackgroundWork, StdioClientTransport } from '../../src/adapters/mcp.js';
import { FIXTURES, ROOT } from '../support/paths.js';
import { cmdlineOf, identityOf, isAlive } from '../support/proc.js';
import { cleanup, killIfAlive, started, tempDir, waitFor } from '../support/zoo.js';
import { connectOutcome, serverIn } from './support.js';

afterEach(() => cleanup());

const SERVER = join(FIXTURES, 'node/mcp-server.mjs');
const FAST = { graceMs: 1000, killAfterMs: 1000, outputCapMs: 500, closeTimeoutMs: 1000 } as const;

function textOf(result: Awaited<ReturnType<Client['callTool']>>): string {
  const [first] = result.content as { type: string; text: string }[];
  return first?.text ?? '';
}

describe('StdioClientTransport', () => {
  it('client.close() ends the server and the detached child it started; the report names the child and its port', async () => {
    const pidfile = join(tempDir(), 'pids');
    const transport = new StdioClientTransport(
      { command: process.execPath, args: [SERVER, pidfile], stderr: 'pipe' },
      FAST,
    );
    const client = new Client({ name: 'tether-test', version: '1.0.0' });
    await client.connect(transport);

    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name).sort()).toEqual(['ping', 'worker-port']);
    expect(textOf(await client.callTool({ name: 'ping' }))).toBe('pong');
    const port = Number(textOf(await client.callTool({ name: 'worker-port' })));
    const child = await serverIn(pidfile);
    expect(child.port).toBe(port);
    const server = identityOf(transport.pid as number);
    if (!server) throw new Error('premise broken: the server is not running');
    started.push(server);
    expect(await connectOutcome(port), 'premise broken: the child does not listen').toBe('connected');

    await client.close();
    expect(isAlive(server), `the MCP server pid ${server.pid} outlived close()`).toBe(false);
    expect(
      isAlive(child.identity),
      `the detached child pid ${child.identity.pid} (${cmdlineOf(child.identity.pid)}) outlived close()`,
    ).toBe(false);
    expect(await connectOutcome(port)).toBe('ECONNREFUSED');
    const report = transport.report;
    expect(report?.stopped.find((p) => p.pid === child.identity.pid)?.listening).toEqual([
      { protocol: 'tcp', address: '127.0.0.1', port },
    ]);
    expect(report && lostBackgroundWork(report)).toContain(`127.0.0.1:${port}`);
  });

  it("the SDK's own StdioClientTransport leaves the detached child running (the contrast)", async () => {
    const pidfile = join(tempDir(), 'pids');
    const transport = new SdkStdioClientTransport({
      command: process.execPath,
      args: [SERVER, pidfile],
      stderr: 'pipe',
    });
    const client = new Client({ name: 'tether-test', version: '1.0.0' });
    await client.connect(transport);
    const port = Number(textOf(await client.callTool({ name: 'worker-port' })));
    const child = await serverIn(pidfile);
    const server = identityOf(transport.pid as number);
    if (server) started.push(server);
    await client.close();
    if (server) await waitFor(`the MCP server pid ${server.pid} to exit`, () => !isAlive(server));
    expect(isAlive(child.identity), 'premise broken: the SDK transport ended the detached child itself').toBe(
      true,
    );
    expect(await connectOutcome(port)).toBe('connected');
    killIfAlive(child.identity); // this test started it
    await waitFor(`the child pid ${child.identity.pid} to end`, () => !isAlive(child.identity));
  });

  it('a server that exits by itself ends its session: onclose comes after the sweep, with the report', async () => {
    const pidfile = join(tempDir(), 'pids');
    // A "server" that starts the same detached child and exits at once.
    const script = `require('child_process').spawn(process.execPath, [${JSON.stringify(join(FIXTURES, 'node/tcp-server.mjs'))}, ${JSON.stringify(pidfile)}], { detached: true, stdio: 'ignore' }).unref(); setTimeout(() => {}, 300)`;
    const transport = new StdioClientTransport({ command: process.execPath, args: ['-e', script] }, FAST);
    const closed = new Promise<void>((resolve) => {
      transport.onclose = resolve;
    });
    await transport.start();
    const child = await serverIn(pidfile);
    await closed;
    expect(transport.report?.stopped.map((p) => p.pid)).toContain(child.identity.pid);
    expect(isAlive(child.identity), `the child pid ${child.identity.pid} outlived its server`).toBe(false);
  });

  it('a command that cannot start reports its ENOENT through onerror, not an EPIPE of the write before it', async () => {
    const transport = new StdioClientTransport({ command: 'tether-no-such-mcp-server' }, FAST);
    const errors: Error[] = [];
    transport.onerror = (error) => errors.push(error);
    const closed = new Promise<void>((resolve) => {
      transport.onclose = resolve;
    });
    const client = new Client({ name: 'tether-test', version: '1.0.0' });
    await expect(client.connect(transport)).rejects.toThrow();
    await closed;
    const codes = errors.map((e) => (e as NodeJS.ErrnoException).code);
    expect(codes).toContain('ENOENT');
    expect(codes).not.toContain('EPIPE');
  });

  it('start() without the MCP SDK installed rejects, saying what to install', () => {
    // A copy of dist/ whose node_modules has every package but @modelcontextprotocol.
    const dir = tempDir();
    cpSync(join(ROOT, 'dist'), join(dir, 'dist'), { recursive: true });
    writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
    mkdirSync(join(dir, 'node_modules'));
    for (const name of readdirSync(join(ROOT, 'node_modules'))) {
      if (name !== '@modelcontextprotocol')
        symlinkSync(join(ROOT, 'node_modules', name), join(dir, 'node_modules', name));
    }
    const program = `import { StdioClientTransport } from './dist/adapters/mcp.js';
      new StdioClientTransport({ command: 'true' }).start().then(() => console.log('started'), (e) => console.log(e.message));`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', program], {
      cwd: dir,
      encoding: 'utf8',
    });
    expect(out.trim()).toBe(
      'tether/mcp needs the MCP SDK, which is not installed: npm install @modelcontextprotocol/sdk',
    );
  });

  it('a bad option throws INVALID_OPTION in the constructor', () => {
    expect(() => new StdioClientTransport({ command: 'x' }, { closeTimeoutMs: -5 })).toThrow(
      /invalid closeTimeoutMs/,
    );
    expect(() => new StdioClientTransport({ command: 'x' }, { containment: ['nope'] as never })).toThrow(
      /INVALID_OPTION|containment/,
    );
  });
});
