// A sweep's first round signals each childless carrier as it holds it (src/sweep/run.ts
// `earlySignal`, native/scan.c `tp_prehold`): the signal is still sent once per phase, said once
// in the report, and a carrier with children still waits until they are held.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, sweep } from '../../src/index.js';
import { ticksNow } from '../../src/proc/identity.js';
import { nativeProc } from '../../src/proc/native.js';
import { BUILD } from '../support/paths.js';
import { isAlive, type ProcessId } from '../support/proc.js';
import { readPidfile, tempDir, waitFor } from '../support/zoo.js';

const started: ProcessId[] = [];

afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

describe('signals sent as the carriers are held', () => {
  it('a TERM-ignoring carrier gets one TERM and one KILL, each said once, and is gone', async () => {
    expect(nativeProc(), 'premise broken: the native scan loop is not built').not.toBeNull();
    const tag = createTag();
    const dir = tempDir();
    const pidfile = join(dir, 'pids');
    const log = join(dir, 'log');
    const notBefore = ticksNow();
    const count = 8;
    for (let i = 0; i < count; i++) {
      spawn(join(BUILD, 'zoo-term-logger'), [pidfile, log], {
        env: { PATH: process.env.PATH, [tag.name]: '1' },
        stdio: 'ignore',
        detached: true,
      }).unref();
    }
    await waitFor('the loggers to record themselves', () => readPidfile(pidfile).length === count);
    const ids = readPidfile(pidfile).map(({ pid, startTime }) => ({ pid, startTime: startTime ?? -1 }));
    started.push(...ids);
    expect(ids.every(isAlive), 'premise broken: a logger is not running').toBe(true);

    const report = await sweep({ tag, notBefore, graceMs: 300, killAfterMs: 2000 });

    const terms = readFileSync(log, 'latin1').trim().split('\n');
    for (const id of ids) {
      const got = terms.filter((line) => line === `${id.pid} term`).length;
      expect(got, `logger ${id.pid} received ${got} TERMs`).toBe(1);
      expect(isAlive(id), `logger ${id.pid} survived the sweep`).toBe(false);
      const record = report.stopped.find((r) => r.pid === id.pid);
      expect(record, `logger ${id.pid} is not in the report`).toMatchObject({
        startTime: id.startTime,
        foundBy: 'carrier',
        signals: ['SIGTERM', 'SIGKILL'],
        endedBy: 'SIGKILL',
      });
      expect(record?.cmdline).toContain('zoo-term-logger');
    }
    expect(report.survivors).toEqual([]);
  });
});
