// The README's "With your agent SDK" snippet, run as written against the stand-in `claude`: the
// one substitution gives query() the stand-in's path and directory (a real CLI needs an account).
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { BUILD, FIXTURES, ROOT } from '../support/paths.js';
import { isAlive } from '../support/proc.js';
import { cleanup, readPidfile, tempDir } from '../support/zoo.js';
import { connectOutcome } from './support.js';

afterEach(() => cleanup());

function snippet(): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const m = /<!-- readme-agent-sdk:[^>]*-->\n```js\n([\s\S]*?)```/.exec(readme);
  if (!m) throw new Error('README.md has no readme-agent-sdk snippet');
  return m[1] as string;
}

it("the README's agent SDK snippet ends the agent's server and prints what it lost", async () => {
  const dir = tempDir();
  const code = snippet()
    .replace(
      "'tether/claude-agent-sdk'",
      `'${pathToFileURL(join(ROOT, 'dist/adapters/claude-agent-sdk.js')).href}'`,
    )
    .replace(
      'spawnClaudeCodeProcess,\n',
      `spawnClaudeCodeProcess, pathToClaudeCodeExecutable: ${JSON.stringify(join(FIXTURES, 'node/claude-standin.mjs'))}, env: { ...process.env, STANDIN_DIR: ${JSON.stringify(dir)} },\n`,
    );
  expect(code, 'premise broken: the substitution did not apply').toContain('STANDIN_DIR');
  const file = join(BUILD, `readme-agent-sdk-${process.pid}.mjs`); // under the checkout: its node_modules resolve
  writeFileSync(file, code);
  let out: string;
  try {
    out = execFileSync(process.execPath, [file], { encoding: 'utf8', timeout: 60_000 });
  } finally {
    rmSync(file, { force: true });
  }
  const [server] = readPidfile(join(dir, 'pids'));
  if (!server?.startTime) throw new Error('premise broken: the stand-in started no server');
  const port = Number(readFileSync(join(dir, 'pids.port'), 'utf8'));
  expect(out).toContain('started a server for: Start the dev server');
  expect(out).toContain(`pid ${server.pid}: `);
  expect(out).toContain(`127.0.0.1:${port}`);
  expect(
    isAlive({ pid: server.pid, startTime: server.startTime }),
    `the server pid ${server.pid} outlived the snippet`,
  ).toBe(false);
  expect(await connectOutcome(port)).toBe('ECONNREFUSED');
});
