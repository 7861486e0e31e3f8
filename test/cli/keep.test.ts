// `tether run --keep GLOB=TTL`: end to end through the CLI, ground truth from /proc.
import { readFileSync } from 'node:fs';
import { hostname, userInfo } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Identity, SweepReport } from '../../src/index.js';
import { tether } from '../support/cli.js';
import { isAlive } from '../support/proc.js';
import { testDir } from '../support/temp.js';

// What this file started (the kept processes are ours to end); killed after each test.
const started: Identity[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

// Each leftover recorded as "LABEL PID START" while it runs (START: field 22 of its stat).
const record = (label: string) => `echo "${label} $! $(cut -d' ' -f22 /proc/$!/stat)"`;

function idOf(stdout: string, label: string): Identity {
  const m = new RegExp(`^${label} (\\d+) (\\d+)$`, 'm').exec(stdout);
  if (!m) throw new Error(`premise broken: the payload recorded no ${label} (${JSON.stringify(stdout)})`);
  const id = { pid: Number(m[1]), startTime: Number(m[2]) };
  started.push(id);
  return id;
}

describe('tether run --keep', () => {
  it('leaves the matching server running, stops the rest, and reports it as kept', async () => {
    const marker = Math.random().toString(16).slice(2);
    const dir = testDir('tether-keep-');
    const reportFile = join(dir, 'report.json');
    const script = [
      `setsid sh -c 'sleep 1000; : keepme-${marker}' </dev/null >/dev/null 2>&1 &`,
      record('server'),
      'setsid sleep 1000 </dev/null >/dev/null 2>&1 &',
      record('other'),
      'sleep 0.1', // the server's sleep started
    ].join('\n');
    const ran = await tether([
      'run',
      '--grace',
      '300ms',
      '--keep',
      `*keepme-${marker}*=90m`,
      '--report-file',
      reportFile,
      '--',
      'sh',
      '-c',
      script,
    ]);
    const server = idOf(ran.stdout, 'server');
    const other = idOf(ran.stdout, 'other');
    expect(ran.code).toBe(0);
    expect(isAlive(other)).toBe(false);
    expect(isAlive(server)).toBe(true);

    const report = JSON.parse(readFileSync(reportFile, 'utf8')) as SweepReport;
    expect(report.ok).toBe(true);
    const kept = report.kept.find((k) => k.pid === server.pid && k.startTime === server.startTime);
    expect(kept).toMatchObject({
      match: `*keepme-${marker}*`,
      owner: `${userInfo().username}@${hostname()}`,
    });
    expect(kept?.expiresAt).toBeGreaterThan(Date.now() + 80 * 60_000);
    expect(kept?.expiresAt).toBeLessThanOrEqual(Date.now() + 90 * 60_000);
    // Its sleep, matching nothing, is kept with it.
    const worker = report.kept.find((k) => k.keptWith === server.pid);
    expect(worker?.cmdline).toBe('sleep 1000');
    if (worker) started.push({ pid: worker.pid, startTime: worker.startTime });
    expect(report.stopped.map((p) => p.pid)).toEqual([other.pid]);
    // The table names what was kept, by whom, until when.
    expect(ran.stderr).toMatch(/kept 2 processes running as declared/);
    expect(ran.stderr).toContain(`${server.pid}  *keepme-${marker}*`);
    expect(ran.stderr).toContain(new Date(kept?.expiresAt ?? 0).toISOString());
  });

  it('takes --keep-owner', async () => {
    const marker = Math.random().toString(16).slice(2);
    const script = [
      `setsid sh -c 'sleep 1000; : keepme-${marker}' </dev/null >/dev/null 2>&1 &`,
      record('server'),
    ];
    const ran = await tether([
      'run',
      '--json',
      '--keep',
      `*keepme-${marker}*=10s`,
      '--keep-owner',
      'ci-job-42',
      '--',
      'sh',
      '-c',
      script.join('\n'),
    ]);
    const server = idOf(ran.stdout, 'server');
    const report = JSON.parse(ran.stderr.trim()) as SweepReport;
    const kept = report.kept.find((k) => k.pid === server.pid);
    expect(kept?.owner).toBe('ci-job-42');
    for (const k of report.kept) started.push({ pid: k.pid, startTime: k.startTime });
  });

  it.each([
    ['redis-server', /invalid --keep "redis-server": expected --keep GLOB=TTL/],
    ['redis-server*=', /invalid --keep "redis-server\*=": expected --keep GLOB=TTL/],
    ['redis-server*=soon', /"soon" is not a TTL \(expected --keep GLOB=TTL/],
    ['redis-server*=0s', /a TTL of 0/],
    ['*=1h', /invalid keep\[0\]\.match: "\*"/],
    ['redis[=1h', /invalid keep\[0\]\.match/],
  ])('refuses --keep %j before the command runs (exit 125)', async (value, message) => {
    const dir = testDir('tether-keep-');
    const ran = await tether(['run', '--keep', value, '--', 'sh', '-c', `touch ${join(dir, 'ran')}`]);
    expect(ran.code).toBe(125);
    expect(ran.stderr).toMatch(message);
    expect(() => readFileSync(join(dir, 'ran'))).toThrow();
  });

  it.each([[['--keep', 'redis-server *=1h', '--keep-owner', '']], [['--keep-owner', ' ']]])(
    "refuses an empty --keep-owner by its flag's name before the command runs (%j)",
    async (flags) => {
      const dir = testDir('tether-keep-');
      const ran = await tether(['run', ...flags, '--', 'sh', '-c', `touch ${join(dir, 'ran')}`]);
      expect(ran.code).toBe(125);
      expect(ran.stderr).toMatch(/invalid --keep-owner "\s*": expected a name/);
      expect(ran.stderr).not.toMatch(/keep\[0\]/);
      expect(() => readFileSync(join(dir, 'ran'))).toThrow();
    },
  );
});
