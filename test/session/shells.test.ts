import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Identity, spawn } from '../../src/index.js';
import { isAlive } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { missing } from '../support/tools.js';

// The payload is a real shell of each family an agent may run: each starts a setsid'd and a
// nohup'd leftover in its own way, records them (pid and start time, read while they run), and
// returns. tether must stop both.
const SHELLS: [name: string, argv: string[]][] = [
  ['dash', ['dash', '-c']],
  ['bash', ['bash', '-c']],
  ['bash --posix', ['bash', '--posix', '-c']],
  ['busybox sh', ['busybox', 'sh', '-c']],
  ['mksh', ['mksh', '-c']],
];

const recorded: Identity[] = [];
afterEach(() => {
  for (const id of recorded.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

describe('leftovers started by real shells', () => {
  for (const [name, argv] of SHELLS) {
    const [shell, ...flags] = argv as [string, ...string[]];
    // CI installs every shell (.ci/run); elsewhere a missing one is skipped, and says so
    // (globalSetup probed the shells before the suite: test/support/tools.ts).
    const skip = missing(shell);
    it.skipIf(skip !== '')(
      `are stopped when ${name} returns${skip ? ` (skipped: ${skip})` : ''}`,
      async () => {
        const pids = join(testDir('tether-shell-'), 'pids');
        const record = `echo "$! $(cut -d' ' -f22 /proc/$!/stat)" >> ${pids}`;
        const script = [
          `setsid sleep 1000 </dev/null >/dev/null 2>&1 & ${record}`,
          `nohup sleep 1001 </dev/null >/dev/null 2>&1 & ${record}`,
          '(sleep 1002 </dev/null >/dev/null 2>&1 &) ; sleep 0.1',
          'exit 0',
        ].join('\n');
        const result = await spawn(shell, [...flags, script], {
          graceMs: 1000,
          killAfterMs: 1000,
          stdio: 'ignore',
        });
        const ids = readFileSync(pids, 'utf8')
          .trim()
          .split('\n')
          .map((line) => {
            const [pid, startTime] = line.split(' ').map(Number);
            return { pid: pid as number, startTime: startTime as number };
          });
        recorded.push(...ids);
        expect(ids, `premise broken: ${name} recorded ${ids.length} leftovers`).toHaveLength(2);
        expect(result.exitCode).toBe(0);
        for (const id of ids) {
          expect(
            isAlive(id),
            `${name}: leftover ${id.pid} (start ${id.startTime}) survived; report: ${JSON.stringify(result.report.stopped)}`,
          ).toBe(false);
        }
        const stopped = result.report.stopped.map((p) => p.cmdline);
        expect(stopped).toEqual(expect.arrayContaining(['sleep 1000', 'sleep 1001', 'sleep 1002']));
        expect(result.report.ok).toBe(true);
      },
    );
  }
});
