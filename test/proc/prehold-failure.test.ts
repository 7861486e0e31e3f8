// The pidfd hold's one failure type: a prehold (native/scan.c `tp_prehold`) whose read fails
// after it has signalled a carrier throws `PreholdFailure`, carrying the candidates read before
// the failure with their pidfds open, so that the caller can still say what it signalled. The
// reads go through a procfs of the test's own (real pids, their stat copied, an environ that
// carries the entry); the second candidate's `stat` is a directory, so its re-read fails with
// EISDIR after the first candidate was held and sent SIGCONT (harmless to a sleeper).
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PreholdFailure, preholdNative } from '../../src/proc/hold.js';
import { readStat } from '../../src/proc/identity.js';
import { nativeProc } from '../../src/proc/native.js';
import type { ProcStat } from '../../src/proc/stat.js';
import { TAG_PREFIX } from '../../src/proc/tag.js';
import { tempDir } from '../support/zoo.js';

const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function sleeper(): ProcStat {
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  children.push(child);
  const stat = child.pid === undefined ? undefined : readStat('/proc', child.pid);
  if (!stat) throw new Error('premise broken: a sleeper did not start');
  return stat;
}

describe('a prehold that fails after it signalled', () => {
  it.skipIf(nativeProc() === null)(
    'throws PreholdFailure with the carrier it signalled, its pidfd open',
    () => {
      const entry = `${TAG_PREFIX}${'0123456789abcdef'.repeat(2)}=1`;
      const root = tempDir();
      const [held, failing] = [sleeper(), sleeper()];
      mkdirSync(join(root, String(held.pid)));
      writeFileSync(join(root, `${held.pid}/stat`), readFileSync(`/proc/${held.pid}/stat`));
      writeFileSync(join(root, `${held.pid}/environ`), `PATH=/bin\0${entry}\0`);
      writeFileSync(join(root, `${held.pid}/cmdline`), 'sleep\x0030\0');
      mkdirSync(join(root, `${failing.pid}/stat`), { recursive: true });

      let thrown: unknown;
      try {
        preholdNative(root, [held, failing], entry, { number: 18, may: [true, true] }); // SIGCONT
      } catch (error) {
        thrown = error;
      }
      expect(thrown, 'the failed stat re-read after a signal did not throw PreholdFailure').toBeInstanceOf(
        PreholdFailure,
      );
      const failure = thrown as PreholdFailure;
      expect((failure.cause as NodeJS.ErrnoException).code).toBe('EISDIR');
      expect(failure.held).toHaveLength(1);
      const [first] = failure.held;
      expect(first?.sent, `pid ${held.pid} was held but not signalled`).toBe(0);
      expect(first?.read.kind === 'ok' && first.read.entries).toEqual([entry]);
      if (first?.hold.kind !== 'held')
        throw new Error(`pid ${held.pid}: its hold is ${first?.hold.kind}, not held`);
      closeSync(first.hold.fd); // open until here: the caller's
    },
  );
});
