// `tether launcher --out FILE [run options] -- CMD…`: the file it writes passes every word
// through sh exactly, refuses run options `tether run` would refuse, and — given to the real
// @openai/codex-sdk as `codexPathOverride` — ends the background process a stand-in `codex`
// leaves, which the SDK alone leaves running.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, statSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Codex } from '@openai/codex-sdk';
import { afterEach, describe, expect, it } from 'vitest';
import type { Identity } from '../../src/index.js';
import { FIXTURES, ROOT } from '../support/paths.js';
import { isAlive } from '../support/proc.js';
import { cleanup, describeProcess, started, tempDir } from '../support/zoo.js';

const BIN = join(ROOT, 'bin/tether.cjs');
const STANDIN = join(FIXTURES, 'codex/codex');
const run = promisify(execFile);

afterEach(() => cleanup());

// `tether launcher ARGS`, its exit status and stderr.
async function launcher(args: string[]): Promise<{ code: number; stderr: string }> {
  try {
    const { stderr } = await run(process.execPath, [BIN, 'launcher', ...args], { timeout: 20_000 });
    return { code: 0, stderr };
  } catch (error) {
    const failed = error as { code?: number; stderr?: string };
    return { code: failed.code ?? -1, stderr: failed.stderr ?? '' };
  }
}

// Words sh would otherwise split, expand or end: spaces, both quotes, `$`, backquotes, a
// backslash, a newline, a glob, an empty word, a leading dash.
const AWKWARD = ['a b', "it's", '"double"', '$HOME', '`id`', '\\n', 'x\ny', '*', '', '-e', "'"];

describe('tether launcher', () => {
  it('writes an executable whose arguments, and its callers, reach CMD byte for byte', async () => {
    const out = join(tempDir(), 'launch');
    const argv = ['-e', 'process.stdout.write(JSON.stringify(process.argv.slice(1)))', ...AWKWARD];
    const wrote = await launcher(['--out', out, '--grace', '1s', '--', process.execPath, ...argv]);
    expect(wrote, wrote.stderr).toEqual({ code: 0, stderr: '' });
    expect(statSync(out).mode & 0o777, 'the launcher is executable').toBe(0o755);

    const passed = ['more words', '$PATH', "o'k", 'line\nbreak', ''];
    const { stdout } = await run(out, passed, { timeout: 20_000 });
    expect(JSON.parse(stdout)).toEqual([...AWKWARD, ...passed]);
  });

  it('runs CMD under tether run: a leftover of CMD ends when CMD does', async () => {
    const dir = tempDir();
    const out = join(dir, 'launch');
    const pidfile = join(dir, 'pids');
    const leaves = `setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo "$! $(cut -d' ' -f22 /proc/$!/stat)" > "$1"`;
    expect((await launcher(['--out', out, '--', 'sh', '-c', leaves, 'sh'])).code).toBe(0);
    await run(out, [pidfile], { timeout: 20_000 });
    const [pid, startTime] = readFileSync(pidfile, 'latin1').trim().split(' ').map(Number);
    const leftover = { pid: pid as number, startTime: startTime as number };
    started.push(leftover);
    expect(isAlive(leftover), `${describeProcess(leftover)} outlived the launcher`).toBe(false);
  });

  it('refuses run options tether run would refuse, and writes nothing', async () => {
    const out = join(tempDir(), 'launch');
    const unknown = await launcher(['--out', out, '--no-such-flag', '--', 'true']);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/invalid tether run option "--no-such-flag".*accepted: .*--grace/);
    const badDuration = await launcher(['--out', out, '--grace', 'soon', '--', 'true']);
    expect(badDuration.stderr).toMatch(/invalid --grace "soon": expected a duration/);
    const badLayer = await launcher(['--out', out, '--containment=cgroup,nope', '--', 'true']);
    expect(badLayer.stderr).toMatch(/--containment/);
    const noCommand = await launcher(['--out', out, '--grace', '1s', '--']);
    expect(noCommand.stderr).toMatch(/invalid command/);
    expect(existsSync(out), 'no launcher was written').toBe(false);
    const noDir = await launcher(['--out', join(out, 'missing/launch'), '--', 'true']);
    expect(noDir.stderr).toMatch(/invalid --out .*cannot write it \(ENOENT\)/);
  });
});

describe('tether launcher checks each value as tether run would', () => {
  // Each a launcher that `tether run` would refuse at every start, and the message it gives.
  const refused: [string, (dir: string) => string[], RegExp][] = [
    ['a bad --signal', () => ['-s', 'NOPE'], /invalid --signal "NOPE": expected a signal name/],
    ['a --keep without its TTL', () => ['--keep', 'x'], /invalid --keep "x": expected --keep GLOB=TTL/],
    ['a --keep glob that keeps everything', () => ['--keep', '*=1h'], /invalid keep\[0\]\.match: "\*"/],
    [
      '--keep with --containment pid-namespace (or its older spelling pidns)',
      () => ['--keep', 'redis-server *=1h', '--containment', 'pidns'],
      /invalid --keep with --containment pid-namespace/,
    ],
    [
      '--grace and -k at odds',
      () => ['--grace', '1s', '-k', '2s'],
      /invalid --grace "1s" with --kill-after "2s"/,
    ],
    ['-k inf', () => ['-k', 'inf'], /invalid --kill-after "inf": expected a finite duration/],
    [
      'a --report-file in a directory that does not exist',
      () => ['--report-file', '/nonexistent/x'],
      /invalid --report-file "\/nonexistent\/x": its directory "\/nonexistent" cannot be used \(ENOENT\)/,
    ],
    [
      'a --report-file that is a symbolic link',
      (dir) => {
        symlinkSync(join(dir, 'elsewhere'), join(dir, 'link'));
        return ['--report-file', join(dir, 'link')];
      },
      /invalid --report-file ".*link": a symbolic link \(ELOOP\)/,
    ],
    [
      'a relative --events path',
      () => ['--events', 'events.jsonl'],
      /invalid --events "events.jsonl": a relative path/,
    ],
    [
      'a relative --ledger path',
      () => ['--ledger', 'ledger.db'],
      /invalid --ledger "ledger.db": a relative path/,
    ],
  ];

  it.each(refused)('refuses %s (125) and writes nothing', async (_name, options, message) => {
    const dir = tempDir();
    const out = join(dir, 'launch');
    const wrote = await launcher(['--out', out, ...options(dir), '--', 'true']);
    expect(wrote.code, wrote.stderr).toBe(125);
    expect(wrote.stderr).toMatch(message);
    expect(existsSync(out), 'a launcher that fails at every start was written').toBe(false);
  });

  it("writes one with timeout(1)'s forms and files run can open, and its run writes them", async () => {
    const dir = tempDir();
    const out = join(dir, 'launch');
    const report = join(dir, 'report.json');
    const options = ['--timeout', 'inf', '-k', '.5', '--report-file', report, '--no-ledger'];
    const wrote = await launcher(['--out', out, ...options, '--', 'sh', '-c', 'exit 4']);
    expect(wrote, wrote.stderr).toEqual({ code: 0, stderr: '' });
    expect(existsSync(report), 'the check created the report file').toBe(false);
    const status = await run(out, [], { timeout: 20_000 }).then(
      () => 0,
      (error: { code?: number }) => error.code,
    );
    expect(status).toBe(4);
    expect(JSON.parse(readFileSync(report, 'utf8'))).toMatchObject({ version: 1, complete: true });
  });
});

describe('tether launcher with @openai/codex-sdk', () => {
  // One turn of the real SDK against the stand-in at `codexPath`; the stand-in's leftover.
  async function turn(codexPath: string, pidfile: string): Promise<{ response: string; leftover: Identity }> {
    const codex = new Codex({
      codexPathOverride: codexPath,
      env: { ...(process.env as Record<string, string>), CODEX_STANDIN_PIDFILE: pidfile },
    });
    const result = await codex.startThread().run('start the dev server');
    const [pid, startTime] = readFileSync(pidfile, 'latin1').trim().split(' ').map(Number);
    const leftover = { pid: pid as number, startTime: startTime as number };
    started.push(leftover);
    return { response: result.finalResponse, leftover };
  }

  it("ends the stand-in codex's background server, which the SDK alone leaves running", async () => {
    const dir = tempDir();
    const alone = await turn(STANDIN, join(dir, 'alone'));
    expect(alone.response).toBe('started a server for: start the dev server');
    expect(
      isAlive(alone.leftover),
      'premise broken: without tether the server does not outlive the turn',
    ).toBe(true);

    const out = join(dir, 'codex');
    expect((await launcher(['--out', out, '--grace', '2s', '--', STANDIN])).code).toBe(0);
    const tethered = await turn(out, join(dir, 'tethered'));
    expect(tethered.response).toBe('started a server for: start the dev server');
    expect(isAlive(tethered.leftover), `${describeProcess(tethered.leftover)} outlived the SDK's turn`).toBe(
      false,
    );
  });
});
