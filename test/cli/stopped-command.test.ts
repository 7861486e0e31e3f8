// A stopped command gets its stop signal (docs/cli.md#tether-run): after the first stop signal —
// the timeout's, or an ending signal forwarded — tether sends SIGCONT to the command and to what
// the stop signal reached in its process group, as timeout(1) does. Before, a command stopped by
// SIGSTOP never saw its SIGTERM (pending while it was stopped) and -k ended it: 137 after the
// whole grace, where timeout(1) gives 124 (a timeout) or 143 (a SIGTERM to it) at once.
// Ground truth: the shell's pid + start time, recorded by the shell itself before it stops.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readFileSafe, recordedIds, tether, waitFor } from '../support/cli.js';
import { isAlive, type ProcessId, readStat } from '../support/proc.js';
import { testDir } from '../support/temp.js';

const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

// A shell that records itself as "pid PID START" (its own stat, read while it runs), then stops
// itself; `resumed` only if it ever ran on after a SIGCONT without its stop signal.
function stoppingShell(marker: string): string {
  return `: ${marker}; echo "pid $$ $(cut -d' ' -f22 /proc/$$/stat)"; kill -STOP $$; echo resumed`;
}

// The --events lines of a run, parsed.
function eventsOf(path: string): { type: string; signal?: string }[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim().startsWith('{'))
    .map((l) => JSON.parse(l));
}

describe('a command that stopped itself (SIGSTOP)', () => {
  it('--timeout: gets its SIGTERM with a SIGCONT and ends with 124, not SIGKILLed after -k (137)', async () => {
    const marker = `tether-stopped-${randomBytes(4).toString('hex')}`;
    const events = join(testDir('tether-stopped-'), 'events');
    const ran = await tether([
      'run',
      '--no-ledger',
      '--events',
      events,
      '--timeout',
      '1',
      '-k',
      '5s',
      '--',
      'sh',
      '-c',
      stoppingShell(marker),
    ]);
    const [shell] = recordedIds(ran.stdout);
    if (!shell) throw new Error(`premise broken: the shell recorded no pid (${ran.stdout})`);
    started.push(shell);
    // 124: the timeout's SIGTERM ended it; a SIGKILL after -k would give 137.
    expect(ran.code, ran.stderr).toBe(124);
    const log = eventsOf(events);
    expect(
      log.find((e) => e.type === 'timeout'),
      JSON.stringify(log),
    ).toMatchObject({ signal: 'SIGTERM' });
    expect(
      log.filter((e) => e.type === 'kill'),
      `the command was SIGKILLed: ${JSON.stringify(log)}`,
    ).toEqual([]);
    expect(ran.stdout, 'the shell ran on without its SIGTERM').not.toContain('resumed');
    expect(isAlive(shell), `the shell (pid ${shell.pid}, start ${shell.startTime}) survived`).toBe(false);
  });

  it('SIGTERM to tether while the command is stopped: forwarded with a SIGCONT, 143 not 137', async () => {
    const marker = `tether-stopped-${randomBytes(4).toString('hex')}`;
    const dir = testDir('tether-stopped-');
    const events = join(dir, 'events');
    const out = join(dir, 'out');
    let pid = 0;
    const script = `exec > ${out}; ${stoppingShell(marker)}`; // its stdout to a file, read while it runs
    const running = tether(['run', '--no-ledger', '--events', events, '-k', '5s', '--', 'sh', '-c', script], {
      onStart: (p) => (pid = p),
    });
    if (!(await waitFor(() => /^pid \d+ \d+$/m.test(readFileSafe(out)))))
      throw new Error(`premise broken: the shell never recorded itself (${readFileSafe(out)})`);
    const [shell] = recordedIds(readFileSafe(out));
    if (!shell) throw new Error('premise broken: no shell recorded');
    started.push(shell);
    const stopped = () => {
      const stat = readStat(shell.pid);
      return stat?.startTime === shell.startTime && stat.state === 'T';
    };
    if (!(await waitFor(stopped))) throw new Error(`premise broken: the shell ${shell.pid} never stopped`);
    if (pid === 0) throw new Error('premise broken: no tether pid');
    process.kill(pid, 'SIGTERM'); // tether itself, this test's own child
    const ran = await running;
    // 143: the forwarded SIGTERM ended it (128 + 15); a SIGKILL after -k would give 137.
    expect(ran.code, ran.stderr).toBe(143);
    const log = eventsOf(events);
    expect(
      log.filter((e) => e.type === 'kill'),
      `the command was SIGKILLed: ${JSON.stringify(log)}`,
    ).toEqual([]);
    expect(readFileSafe(out), 'the shell ran on without its SIGTERM').not.toContain('resumed');
    expect(isAlive(shell), `the shell (pid ${shell.pid}, start ${shell.startTime}) survived`).toBe(false);
  });
});
