// Every exit status of `tether run` (docs/cli.md#exit-status), each from a real invocation; where
// the payload leaves a process behind, ground truth says it is gone (pid + start time).
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RECORD, recordedIds, tether } from '../support/cli.js';
import { ROOT } from '../support/paths.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { testDir } from '../support/temp.js';

const dir = testDir('tether-exit-');
const notExecutable = join(dir, 'not-executable');
writeFileSync(notExecutable, '#!/bin/sh\nexit 0\n');
chmodSync(notExecutable, 0o644);

// Leftovers the payloads recorded; SIGKILLed after each test if one is still alive.
const started: ProcessId[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

// A leftover in a session of its own, its output away from tether's pipes, recorded on stdout.
const LEFTOVER = `setsid sleep 1000 >/dev/null 2>&1 & ${RECORD}`;
// A payload that leaves LEFTOVER and then runs until a signal ends it.
const LINGER = `${LEFTOVER}; while :; do sleep 0.05; done`;

interface Row {
  name: string;
  args: string[];
  status: number;
  /** The payload records leftovers on stdout: each must be gone after tether. */
  leftovers?: boolean;
  stderr?: RegExp;
}

const ROWS: Row[] = [
  { name: 'the payload exits 0', args: ['run', '--', 'true'], status: 0 },
  { name: "the payload's own status", args: ['run', '--', 'sh', '-c', 'exit 7'], status: 7 },
  {
    name: 'a payload that ends before its --timeout keeps its own status',
    args: ['run', '--timeout', '20s', '--', 'sh', '-c', 'exit 3'],
    status: 3,
  },
  {
    name: '124: --timeout fired (TERM), the leftovers are gone',
    args: ['run', '--timeout', '300ms', '-k', '2s', '--', 'sh', '-c', LINGER],
    status: 124,
    leftovers: true,
  },
  {
    name: '124: a bare number of seconds, the payload ends itself on TERM with 0',
    args: ['run', '--timeout', '0.3', '--', 'sh', '-c', `trap 'exit 0' TERM; ${LINGER}`],
    status: 124,
    leftovers: true,
  },
  {
    name: '124: a --timeout under 1 ms (0.0001, as GNU timeout takes it) fires, it is not "none"',
    args: ['run', '--timeout', '0.0001', '--', 'sleep', '5'],
    status: 124,
  },
  {
    name: '124: --timeout 0.4ms rounds up to 1 ms, not down to "none"',
    args: ['run', '--timeout', '0.4ms', '--', 'sleep', '5'],
    status: 124,
  },
  {
    name: "124: --timeout .5, timeout(1)'s form of half a second",
    args: ['run', '--timeout', '.5', '--', 'sleep', '5'],
    status: 124,
  },
  {
    name: '--timeout inf is no timeout: the payload keeps its own status',
    args: ['run', '--timeout', 'inf', '--', 'sh', '-c', 'exit 3'],
    status: 3,
  },
  {
    name: "--timeout 1d and 1. are timeout(1)'s forms: taken, the payload keeps its own status",
    args: ['run', '--timeout', '1d', '-k', '1.', '--', 'sh', '-c', 'exit 3'],
    status: 3,
  },
  {
    name: '125: -k inf (a sweep always ends), naming it',
    args: ['run', '-k', 'inf', '--', 'true'],
    status: 125,
    stderr: /invalid --kill-after "inf": expected a finite duration/,
  },
  {
    name: "--preserve-status: the payload's own status after a timeout",
    args: [
      'run',
      '--timeout',
      '300ms',
      '--preserve-status',
      '-s',
      'INT',
      '--',
      'sh',
      '-c',
      `trap 'exit 5' INT; ${LINGER}`,
    ],
    status: 5,
    leftovers: true,
  },
  {
    name: '137: a TERM-ignoring payload, SIGKILLed -k after the timeout (GNU timeout: a forced kill)',
    args: ['run', '--timeout', '300ms', '-k', '300ms', '--', 'sh', '-c', `trap '' TERM; ${LINGER}`],
    status: 128 + 9,
    leftovers: true,
  },
  {
    name: '137: the same with --preserve-status',
    args: [
      'run',
      '--timeout',
      '300ms',
      '--kill-after',
      '300ms',
      '--preserve-status',
      '--',
      'sh',
      '-c',
      `trap '' TERM; ${LINGER}`,
    ],
    status: 128 + 9,
    leftovers: true,
  },
  {
    name: '137: --signal KILL',
    args: ['run', '--timeout', '300ms', '--signal', '9', '--', 'sh', '-c', LINGER],
    status: 128 + 9,
    leftovers: true,
  },
  {
    name: '128+N: the payload was killed by signal N',
    args: ['run', '--', 'sh', '-c', 'kill -USR1 $$'],
    status: 128 + 10,
  },
  {
    name: '125: invalid usage (an unknown option)',
    args: ['run', '--bogus', '--', 'true'],
    status: 125,
    stderr: /unknown option '--bogus'/,
  },
  {
    name: '125: invalid usage (no command)',
    args: ['run'],
    status: 125,
    stderr: /missing required argument 'command'/,
  },
  {
    name: '125: a bad --signal, naming it and the accepted forms',
    args: ['run', '--timeout', '1s', '--signal', 'NOPE', '--', 'true'],
    status: 125,
    stderr: /invalid --signal "NOPE": expected a signal name with or without SIG .* or a number from 1 to 64/,
  },
  {
    name: '125: signal 0 is no signal',
    args: ['run', '--signal', '0', '--', 'true'],
    status: 125,
    stderr: /invalid --signal "0"/,
  },
  {
    name: '125: a bad --timeout',
    args: ['run', '--timeout', 'later', '--', 'true'],
    status: 125,
    stderr: /invalid --timeout "later": expected a duration/,
  },
  {
    name: '125: --grace and -k at odds',
    args: ['run', '--grace', '1s', '-k', '2s', '--', 'true'],
    status: 125,
    stderr: /invalid --grace "1s" with --kill-after "2s"/,
  },
  {
    name: '125: an --events file that cannot be opened, before the payload runs',
    args: ['run', '--events', join(dir, 'no/such/dir/events'), '--', 'sh', '-c', 'echo ran'],
    status: 125,
    stderr: /invalid --events .*ENOENT/,
  },
  {
    name: "125: the payload's status is unknown (its helper was killed)",
    args: ['run', '-k', '300ms', '--', 'sh', '-c', 'kill -9 $PPID; exit 3'],
    status: 125,
    stderr: /exit status of "sh" is unknown/,
  },
  {
    name: '125: tether sweep with a bad tag',
    args: ['sweep', '--tag', 'PATH'],
    status: 125,
    stderr: /invalid tag "PATH"/,
  },
  {
    name: '126: found, cannot be executed',
    args: ['run', '--', notExecutable],
    status: 126,
    stderr: /cannot start .*EACCES/,
  },
  {
    name: '127: not found',
    args: ['run', '--', '/nonexistent/tether-exit-status'],
    status: 127,
    stderr: /command not found/,
  },
];

describe('the exit status of tether run', () => {
  it.each(ROWS)('$name', async (row) => {
    const ran = await tether(row.args);
    const leftovers = row.leftovers ? recordedIds(ran.stdout) : [];
    started.push(...leftovers);
    expect(ran.code, ran.stderr).toBe(row.status);
    if (row.stderr) expect(ran.stderr).toMatch(row.stderr);
    if (row.status === 125 && row.args.includes('--events')) expect(ran.stdout).not.toMatch(/ran/);
    for (const id of leftovers)
      expect(isAlive(id), `leftover ${id.pid} outlived tether ${row.args.join(' ')}`).toBe(false);
  });

  it('124 comes after the sweep: the events say timeout, exited, swept, then end 124', async () => {
    const events = join(dir, 'timeout.jsonl');
    const ran = await tether(['run', '--timeout', '300ms', '--events', events, '--', 'sh', '-c', LINGER]);
    const [leftover] = recordedIds(ran.stdout);
    if (leftover) started.push(leftover);
    expect(ran.code, ran.stderr).toBe(124);
    const lines = readFileSync(events, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const types = lines.map((e) => e.type);
    expect(types.filter((t) => t !== 'delegate_background' && t !== 'warning')).toEqual([
      'started',
      'timeout',
      'exited',
      'swept',
      'end',
    ]);
    expect(lines.at(-1)).toMatchObject({ type: 'end', status: 124, timedOut: true });
    const swept = lines.find((e) => e.type === 'swept');
    expect(swept.report.stopped.map((p: { pid: number }) => p.pid)).toContain(leftover?.pid);
    expect(leftover && isAlive(leftover)).toBe(false);
  });
});

describe("docs/cli.md's statuses for invalid usage", () => {
  const doc = readFileSync(join(ROOT, 'docs/cli.md'), 'utf8');

  it('the status tether launcher gives for invalid usage is the one cli.md states', async () => {
    const stated = /Exit status 0 when written; (\d+) for invalid usage/.exec(doc)?.[1];
    if (stated === undefined)
      throw new Error("premise broken: cli.md no longer states the launcher's status");
    const out = join(dir, 'launch-usage');
    const ran = await tether(['launcher', '--out', out, '-s', 'NOPE', '--', 'true']);
    expect(ran.code, ran.stderr).toBe(Number(stated));
    expect(existsSync(out)).toBe(false);
  });

  it('an invalid option is status 125 on every command, as its Errors section says', async () => {
    expect(doc).toMatch(
      /exit status 125 \(tether's\s+own failure, as timeout\(1\)'s; before this release it was 2\) on every command/,
    );
    const commands = [
      'run',
      'launcher',
      'ps',
      'sweep',
      'recover',
      'ls',
      'show',
      'guard',
      'sandbox exec',
      'sandbox sweep',
      'script',
    ];
    for (const command of commands) {
      const ran = await tether([...command.split(' '), '--no-such-option']);
      expect(ran.code, `tether ${command} --no-such-option: ${ran.stderr}`).toBe(125);
    }
  }, 60_000);
});
