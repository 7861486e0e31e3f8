import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, type Identity } from '../../src/index.js';
import { BIN, RECORD, readFileSafe, recordedIds, tether } from '../support/cli.js';
import { identityOf, isAlive } from '../support/proc.js';
import { testDir } from '../support/temp.js';

// Decoys and strays this file started; killed after each test if still alive.
const started: Identity[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

function pidsFrom(text: string): Identity[] {
  const ids = recordedIds(text);
  started.push(...ids);
  return ids;
}

describe('tether run', () => {
  it('exits 125 when the helper is killed before it reports the exit status', async () => {
    const ran = await tether(['run', '--grace', '300ms', '--', 'sh', '-c', 'kill -9 $PPID; exit 3']);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toMatch(/exit status of "sh" is unknown/);
    expect(ran.stderr).toMatch(/could not report the command's end/);
  });

  it('a tether sweep run from inside its own session stops the leftover, not itself', async () => {
    const script = `TAG=$(env | grep -o '^TETHER_SESSION_[0-9a-f]*' | head -1)
sleep 30 & ${RECORD}
${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} sweep --tag "$TAG" -k 300ms --kill-budget 300ms
echo "sweep exited $?, still here"`;
    const ran = await tether(['run', '--grace', '300ms', '--', 'sh', '-c', script]);
    const [leftover] = pidsFrom(ran.stdout);
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toMatch(/sweep exited 0, still here/);
    expect(leftover && isAlive(leftover)).toBe(false);
    expect(ran.stderr).toMatch(/runs inside .*no cgroup.kill/);
  });

  it('stops a setsid+nohup server the command left and passes the exit status through', async () => {
    const dir = testDir('tether-cli-');
    const pidFile = join(dir, 'pids');
    const script = `nohup setsid sleep 1000 >/dev/null 2>&1 & ${RECORD} > ${pidFile}; sleep 0.2; exit 7`;
    const ran = await tether([
      'run',
      '--grace',
      '2s',
      '--report-file',
      join(dir, 'r.json'),
      '--',
      'sh',
      '-c',
      script,
    ]);
    const [leftover] = pidsFrom(readFileSync(pidFile, 'utf8'));
    expect(ran.code).toBe(7);
    expect(leftover && isAlive(leftover), `the setsid'd sleep ${leftover?.pid} survived tether run`).toBe(
      false,
    );
    expect(ran.stderr).toMatch(/stopped 1 process/);
    const report = JSON.parse(readFileSync(join(dir, 'r.json'), 'utf8'));
    expect(report.version).toBe(1);
    expect(report.stopped.map((p: { pid: number }) => p.pid)).toEqual([leftover?.pid]);
  });

  it('exits 128+N when the command is killed by signal N', async () => {
    const ran = await tether(['run', '--', 'sh', '-c', 'kill -TERM $$']);
    expect(ran.code).toBe(128 + 15);
  });

  it('prints the report as JSON on stderr with --json', async () => {
    const ran = await tether(['run', '--json', '--', 'true']);
    expect(ran.code).toBe(0);
    const report = JSON.parse(ran.stderr.trim());
    expect(report).toMatchObject({ version: 1, complete: true, ok: true, stopped: [] });
    // The default containment proves a clean end with one scan and the kernel's word.
    expect(report.layers).toContain('subreaper');
    expect(['populated-0', 'helper-childless']).toContain(report.proof);
  });

  it('forwards SIGTERM to the command, then sweeps what it started', async () => {
    const dir = testDir('tether-cli-');
    const pidFile = join(dir, 'pids');
    const script = `setsid sleep 1000 & ${RECORD} > ${pidFile}; exec sleep 1001`;
    let tetherPid = 0;
    const running = tether(['run', '--grace', '1s', '--', 'sh', '-c', script], {
      onStart: (p) => (tetherPid = p),
    });
    for (let i = 0; i < 100 && !readFileSafe(pidFile); i++) await new Promise((r) => setTimeout(r, 20));
    const [leftover] = pidsFrom(readFileSync(pidFile, 'utf8'));
    process.kill(tetherPid, 'SIGTERM');
    const ran = await running;
    expect(ran.code).toBe(128 + 15);
    expect(leftover && isAlive(leftover), `sleep ${leftover?.pid} survived a SIGTERM to tether run`).toBe(
      false,
    );
  });

  it.each([
    [['run', '--bogus', '--', 'true'], /unknown option '--bogus'/],
    [['run', '--grace', 'soon', '--', 'true'], /invalid --grace "soon": expected a duration/],
    [['run', '--kill-after', '-3s', '--', 'true'], /invalid --kill-after "-3s"/],
    [['run', '--kill-budget', '3x', '--', 'true'], /invalid --kill-budget "3x"/],
    [
      ['sweep', '--tag', `TETHER_SESSION_${'0'.repeat(32)}`, '--grace', '1s', '-k', '2s'],
      /invalid --grace "1s" with --kill-after "2s"/,
    ],
    [['run'], /missing required argument 'command'/],
    [['sweep', '--tag', 'PATH'], /invalid tag "PATH"/],
    [['frobnicate'], /unknown command 'frobnicate'/],
  ])('refuses %j with one line and status 125', async (args, message) => {
    const ran = await tether(args);
    expect(ran.code, ran.stderr).toBe(125);
    expect(ran.stderr).toMatch(message);
    expect(ran.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('says a command that does not exist was not found, with status 127', async () => {
    const ran = await tether(['run', '--', '/nonexistent/tether-test-command']);
    expect(ran.code).toBe(127);
    expect(ran.stderr).toMatch(/cannot start "\/nonexistent\/tether-test-command": command not found/);
  });
});

describe('tether ps and tether sweep', () => {
  it('lists a tagged process under its tag, then sweeps that tag and spares a =10 decoy', async () => {
    const tag = createTag();
    const member = spawn('sleep', ['1000'], { env: { ...process.env, [tag.name]: '1' }, stdio: 'ignore' });
    const decoy = spawn('sleep', ['1000'], { env: { ...process.env, [tag.name]: '10' }, stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 100));
    const m = identityOf(member.pid ?? 0);
    const d = identityOf(decoy.pid ?? 0);
    if (!m || !d) throw new Error('premise broken: the sleeps did not start');
    started.push(m, d);

    const ps = await tether(['ps', '--json']);
    const listed = JSON.parse(ps.stdout).sessions.find((s: { tag: string }) => s.tag === tag.name);
    expect(listed?.processes.map((p: { pid: number }) => p.pid)).toEqual([m.pid]);

    const swept = await tether(['sweep', '--tag', tag.name, '--json']);
    expect(swept.code).toBe(0);
    expect(JSON.parse(swept.stdout).stopped.map((p: { pid: number }) => p.pid)).toEqual([m.pid]);
    await new Promise((r) => member.once('exit', r).pid === undefined || setTimeout(r, 200));
    expect(isAlive(m), `tagged sleep ${m.pid} survived tether sweep`).toBe(false);
    expect(isAlive(d), `the =10 decoy ${d.pid} was killed by tether sweep`).toBe(true);
  });
});
