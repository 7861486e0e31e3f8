// A sweep by the env tag alone says what it cannot see: `tether run
// --containment env-tag` whose payload left an env-cleared double fork finds nothing, and its
// report names the blind spot (`blindSpots`) and never prints "nothing left running" — while
// the leftover, ground truth, runs on. With the helper beside the env tag the same leftover is
// stopped and the env tag's blind spot is not named. The test ends the leftover it started.
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { SweepReport } from '../../src/sweep/report.js';
import { readFileSafe, tether, waitFor } from '../support/cli.js';
import { isAlive } from '../support/proc.js';
import { killIfAlive, tempDir } from '../support/zoo.js';

const started: { pid: number; startTime: number }[] = [];
afterEach(() => {
  for (const id of started.splice(0)) killIfAlive(id);
});

// The payload: an `env -i` shell that starts a sleep, records it ("pid START") and exits, so that
// the sleep has neither the tag nor a live parent in the session.
const payload = (file: string) =>
  `env -i /bin/sh -c 'sleep 300 >/dev/null 2>&1 & echo "$! $(cut -d" " -f22 /proc/$!/stat)" > ${file}'`;

function leftover(file: string): { pid: number; startTime: number } {
  const [pid, startTime] = readFileSafe(file).trim().split(' ').map(Number);
  if (!pid || !startTime) throw new Error(`premise broken: no leftover recorded in ${file}`);
  const id = { pid, startTime };
  started.push(id);
  return id;
}

describe('a sweep by the env tag alone names what it cannot see', () => {
  it('env-tag: the env-cleared double fork is not found, the report says so, and it runs on', async () => {
    const file = join(tempDir(), 'leftover');
    // Beside it a plain leftover the env tag does find, so that the run has a report to print.
    const script = `sleep 301 >/dev/null 2>&1 & ${payload(file)}`;
    const envTag = ['run', '--no-ledger', '--containment', 'env-tag'];
    const r = await tether([...envTag, '--', 'sh', '-c', script]);
    expect(r.code, r.stderr).toBe(0);
    const id = leftover(file);
    expect(isAlive(id), 'premise: the env tag alone cannot see it').toBe(true);
    expect(r.stderr).toMatch(/sleep 301/); // stopped: the table is printed
    expect(r.stderr).not.toContain('nothing left running');
    expect(r.stderr).toContain('tether: not seen: env-cleared processes are invisible to the env tag');
    // A run with nothing to report prints nothing; its JSON still names the blind spot.
    expect((await tether([...envTag, '--', 'true'])).stderr).toBe('');
    const json = await tether([...envTag, '--json', '--', 'true']);
    const report = JSON.parse(json.stderr.trim().split('\n').at(-1) ?? '{}') as SweepReport;
    expect(report.layers).toEqual(['env-tag']);
    expect(report.blindSpots?.[0]).toMatch(/^env-cleared processes are invisible to the env tag/);
  });

  it('with the helper: the same leftover is stopped, and the env tag’s blind spot is not named', async () => {
    const file = join(tempDir(), 'leftover');
    const r = await tether([
      'run',
      '--no-ledger',
      '--containment',
      'subreaper',
      '--',
      'sh',
      '-c',
      payload(file),
    ]);
    expect(r.code, r.stderr).toBe(0);
    const id = leftover(file);
    expect(await waitFor(() => !isAlive(id)), 'the helper did not stop the env-cleared leftover').toBe(true);
    // (As root the run names the privileged payload's blind spot instead: test/sweep/blind-spots.test.ts.)
    expect(r.stderr).not.toContain('not seen: env-cleared');
  });
});
