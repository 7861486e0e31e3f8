// A fan-out whose branches are real sessions, each with a leftover that called setsid():
// stopping the fan-out aborts every session, whose sweep ends its leftover — checked in /proc.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type FanOutError,
  type FanOutEvent,
  fanOut,
  isAmbiguousEffect,
  type Result,
  spawn,
} from '../../src/index.js';
import { FIXTURES } from '../support/paths.js';
import { identityOf, isAlive, type ProcessId } from '../support/proc.js';
import { describeProcess, killIfAlive, readPidfile, tempDir, waitFor } from '../support/zoo.js';

describe('fanOut over sessions', () => {
  it('stop() ends every branch session and its setsid leftover, within the grace', async () => {
    const dir = tempDir();
    const pidfiles = [0, 1, 2].map((i) => join(dir, `branch-${i}.pids`));
    const leftovers: ProcessId[] = [];
    const events: FanOutEvent[] = [];
    try {
      const handle = fanOut<Result>(
        pidfiles.map((pidfile) => async (signal) => {
          const result = await spawn('sh', [join(FIXTURES, 'setsid.sh'), pidfile], { signal, graceMs: 500 });
          if (result.isCanceled) throw signal.reason;
          return result;
        }),
        { policy: 'best-effort', graceMs: 15_000, onEvent: (e) => events.push(e) },
      );
      for (const pidfile of pidfiles) {
        await waitFor(
          `${pidfile} READY`,
          () => readPidfile(pidfile).length > 0 && /READY/.test(readFileSync(pidfile, 'latin1')),
        );
        const line = readPidfile(pidfile).find((p) => p.label === 'setsid');
        const id = line && identityOf(line.pid);
        if (!id) throw new Error(`premise broken: the setsid leftover of ${pidfile} is not running`);
        leftovers.push(id);
      }
      expect(leftovers.every(isAlive)).toBe(true);

      handle.stop('budget refused');
      let error: FanOutError<Result> | undefined;
      try {
        await handle;
      } catch (e) {
        error = e as FanOutError<Result>;
      }
      expect(error?.code).toBe('CANCELLED');
      expect(error?.cause).toBe('budget refused');
      expect(isAmbiguousEffect(error)).toBe(false);
      expect(events.filter((e) => e.type === 'branch_abandoned')).toEqual([]);
      expect(error?.outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
      const alive = leftovers.filter(isAlive);
      expect(alive.map((id) => `survived the cancelled fan-out: ${describeProcess(id)}`)).toEqual([]);
    } finally {
      for (const id of leftovers) killIfAlive(id);
    }
  });
});
