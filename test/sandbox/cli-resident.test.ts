// `tether sandbox run --resident` (docs/sandbox.md, "One server across processes"): each tether
// process is new, and the resident helper's server one of them started is recorded on this
// machine, so that the next process pings it and makes its call, not a server of its own. Real
// container, the built CLI; ground truth is the host's /proc (the leftovers gone) and the server's
// identity in the container's /proc.
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import { dropRecord, readRecord } from '../../src/sandbox/resident-record.js';
import { ROOT } from '../support/paths.js';
import { testDir } from '../support/temp.js';
import { missing } from '../support/tools.js';
import { type Container, privateTmp, sleepersIn, startContainer } from './container.js';

const TETHER = join(ROOT, 'bin/tether.cjs');
const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

let secs = 1900 + Math.floor(Math.random() * 200) * 10;
const uniqueSecs = () => (secs += 1);

function tether(
  args: string[],
  stdin: 'ignore' | 'pipe' = 'ignore',
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [TETHER, ...args], { stdio: [stdin, 'pipe', 'pipe'] });
    if (stdin === 'pipe') child.stdin?.end('piped\n');
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d) => (stdout += d));
    child.stderr?.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

// The --json end line's notes (stderr's last JSON line).
function notesOf(stderr: string): string[] {
  const line = stderr
    .trim()
    .split('\n')
    .reverse()
    .find((l) => l.startsWith('{'));
  return (JSON.parse(line ?? '{}') as { notes?: string[] }).notes ?? [];
}

const serverPid = (notes: string[]) =>
  notes.join('\n').match(/one call of the resident helper \(the server pid (\d+) in the target/)?.[1];

describe.skipIf(!serves)(`tether sandbox run --resident${serves ? '' : ` (skipped: ${why})`}`, () => {
  let box: Container;
  let via: string;
  beforeAll(async () => {
    box = await startContainer(240);
    privateTmp(box, `tether-cli-resident-${process.pid}`);
    via = box.prefix.join(' ');
  });
  afterAll(async () => {
    // The container ends its servers; the record of the last one goes with it (never another's:
    // its name holds this container's init pid).
    if (box) dropRecord(box.prefix, ['sh']);
    await box?.stop();
  });

  it('a second tether process takes the server the first one started, and each ends its env -i double fork', async () => {
    const pids: (string | undefined)[] = [];
    for (let i = 0; i < 2; i++) {
      const s = uniqueSecs();
      const r = await tether([
        'sandbox',
        'run',
        '--resident',
        '--json',
        '--via',
        via,
        '--',
        'sh',
        '-c',
        `env -i sh -c 'sleep ${s} </dev/null >/dev/null 2>&1 &'; echo hi`,
      ]);
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toBe('hi\n');
      expect(sleepersIn(box, s), 'the double fork is gone when tether exits').toEqual([]);
      pids.push(serverPid(notesOf(r.stderr)));
    }
    expect(pids[0], 'the first ran in one call').toMatch(/^\d+$/);
    expect(pids[1], 'the second took the same server').toBe(pids[0]);
    // A library process through the same argv keeps its server to itself: it neither replaces
    // nor removes the CLI's record (a fresh user's trial saw both).
    const recorded = () => readRecord(box.prefix, ['sh'])?.pid;
    expect(recorded()).toBe(Number(pids[0]));
    const channel = sandbox.commandChannel(box.prefix);
    const own = await sandbox.run(channel, ['true'], { resident: true });
    expect(own.report.notes.join('\n')).toMatch(/one call of the resident helper/);
    expect(recorded()).toBe(Number(pids[0]));
    expect(await sandbox.stopResident(channel)).toBe(true);
    expect(recorded()).toBe(Number(pids[0]));
  });

  it('a piped stdin goes in the call too, hashed as it is sent', async () => {
    const s = uniqueSecs();
    const r = await tether(
      [
        'sandbox',
        'run',
        '--resident',
        '--json',
        '--via',
        via,
        '--',
        'sh',
        '-c',
        `cat; env -i sh -c 'sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 0.2`,
      ],
      'pipe',
    );
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe('piped\n');
    expect(serverPid(notesOf(r.stderr))).toMatch(/^\d+$/);
    expect(sleepersIn(box, s)).toEqual([]);
  });

  it('a recorded server that is gone is replaced, not called: the next process starts another', async () => {
    const first = await tether(['sandbox', 'run', '--resident', '--json', '--via', via, '--', 'true']);
    const pid = serverPid(notesOf(first.stderr));
    expect(pid).toMatch(/^\d+$/);
    // Killed (TERM: it removes its socket) with its record left: the next process pings it, gets
    // no answer, and starts another.
    execFileSync(box.prefix[0] as string, [...box.prefix.slice(1), 'kill', '-TERM', String(pid)]);
    const next = await tether([
      'sandbox',
      'run',
      '--resident',
      '--json',
      '--via',
      via,
      '--',
      'echo',
      'again',
    ]);
    expect(next.status, next.stderr).toBe(0);
    expect(next.stdout).toBe('again\n');
    const again = serverPid(notesOf(next.stderr));
    expect(again).toMatch(/^\d+$/);
    expect(again).not.toBe(pid);
  });

  it('tether sandbox stop-resident ends the recorded server: exit 0, gone from the container, its record removed; then 1', async () => {
    const run = await tether(['sandbox', 'run', '--resident', '--json', '--via', via, '--', 'true']);
    const pid = serverPid(notesOf(run.stderr));
    expect(pid).toMatch(/^\d+$/);
    const inBox = `/proc/${box.init}/root/proc/${pid}/comm`;
    expect(readFileSync(inBox, 'utf8').trim()).toBe('tether-serve');
    const stop = await tether(['sandbox', 'stop-resident', '--via', via]);
    expect(stop.status, stop.stderr).toBe(0);
    expect(stop.stderr).toMatch(/stopped/);
    for (let i = 0; i < 100 && existsSync(inBox); i++) await new Promise((r) => setTimeout(r, 20));
    expect(existsSync(inBox), 'the server is gone').toBe(false);
    expect(readRecord(box.prefix, ['sh'])).toBeUndefined();
    const again = await tether(['sandbox', 'stop-resident', '--via', via]);
    expect(again.status).toBe(1);
    expect(again.stderr).toMatch(/nothing to stop/);
  });

  it('tether sandbox stop-resident --json: one object on stdout, { stopped, outcome, channel, shell, message }, the same exits; its errors as JSON there too', async () => {
    const run = await tether(['sandbox', 'run', '--resident', '--json', '--via', via, '--', 'true']);
    const pid = serverPid(notesOf(run.stderr));
    expect(pid).toMatch(/^\d+$/);
    const inBox = `/proc/${box.init}/root/proc/${pid}/comm`;
    const stop = await tether(['sandbox', 'stop-resident', '--json', '--via', via]);
    expect(stop.status, stop.stderr).toBe(0);
    expect(JSON.parse(stop.stdout)).toEqual({
      stopped: true,
      outcome: 'stopped',
      channel: via,
      shell: ['sh'],
      message: `the resident helper's server in ${via} (--shell sh) stopped`,
    });
    expect(stop.stderr).toBe('');
    for (let i = 0; i < 100 && existsSync(inBox); i++) await new Promise((r) => setTimeout(r, 20));
    expect(existsSync(inBox), 'the server is gone').toBe(false);
    const again = await tether(['sandbox', 'stop-resident', '--json', '--via', via]);
    expect(again.status).toBe(1);
    expect(JSON.parse(again.stdout)).toMatchObject({ stopped: false, outcome: 'none', channel: via });
    expect(JSON.parse(again.stdout).message).toMatch(/nothing to stop/);
    const bad = await tether(['sandbox', 'stop-resident', '--json', '--via', '']);
    expect(bad.status).not.toBe(0);
    expect(JSON.parse(bad.stdout)).toMatchObject({ code: 'INVALID_OPTION' });
  });

  it('tether sandbox stop-resident tells its outcomes apart: a server gone is silent (1, record removed), a channel down is unreached (122, record kept), then stopped', async () => {
    // A server this test started through tether, KILLed by the test: the record names it still.
    const run = await tether(['sandbox', 'run', '--resident', '--json', '--via', via, '--', 'true']);
    const pid = serverPid(notesOf(run.stderr));
    expect(pid).toMatch(/^\d+$/);
    const [cmd0, ...rest] = box.prefix;
    execFileSync(String(cmd0), [...rest, 'kill', '-KILL', String(pid)]); // the test's own
    const silent = await tether(['sandbox', 'stop-resident', '--json', '--via', via]);
    expect(silent.status).toBe(1);
    expect(JSON.parse(silent.stdout)).toMatchObject({ stopped: false, outcome: 'silent' });
    expect(readRecord(box.prefix, ['sh'])).toBeUndefined();
    // A channel of its own (a script around the real one): the record is keyed by its argv.
    const script = join(testDir('tether-cli-resident-'), 'via');
    const works = `#!/bin/sh\nexec ${via} "$@"\n`;
    writeFileSync(script, works);
    chmodSync(script, 0o755);
    const up = await tether(['sandbox', 'exec', '--resident', '--via', script, '--', 'true']);
    expect(up.status, up.stderr).toBe(0);
    expect(readRecord([script], ['sh'])).toBeDefined();
    writeFileSync(script, '#!/bin/sh\necho "channel down" >&2\nexit 1\n');
    const down = await tether(['sandbox', 'stop-resident', '--json', '--via', script]);
    expect(down.status).toBe(122);
    expect(JSON.parse(down.stdout)).toMatchObject({ stopped: false, outcome: 'unreached' });
    expect(readRecord([script], ['sh']), 'the record kept').toBeDefined();
    writeFileSync(script, works);
    const stopped = await tether(['sandbox', 'stop-resident', '--via', script]);
    expect(stopped.status, stopped.stderr).toBe(0);
    expect(stopped.stderr).toMatch(/stopped/);
    expect(readRecord([script], ['sh'])).toBeUndefined();
  });
});
