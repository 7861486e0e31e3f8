// A ledger that refuses a recorded sandbox session's begin stops it before anything reaches the
// container, as a ledger that cannot be opened stops `tether run` with 125 before its command:
// no command started, no sweep run for nothing, an error naming the ledger. The channel is a
// script that logs every exec before it enters the container: the log is the ground truth.
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { Ledger } from '../../src/ledger/index.js';
import { suiteResource } from '../support/suite-resource.js';
import { testDir } from '../support/temp.js';
import { tetherToEnd } from '../support/tether-child.js';
import { startContainer, taggedOnHost } from './container.js';

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };

const box = suiteResource(() => startContainer(120));
let dir: string;
beforeAll(() => {
  dir = testDir('tether-refused-begin-');
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// A --via that appends each exec's argv to `log`, then enters the container: what reached it.
function countingVia(name: string): { via: string; log: string; execs: () => string[] } {
  const via = join(dir, `${name}-via`);
  const log = join(dir, `${name}.log`);
  writeFileSync(via, `#!/bin/sh\necho "exec $1 $2" >> '${log}'\nexec ${box.prefix.join(' ')} "$@"\n`);
  chmodSync(via, 0o755);
  const execs = () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean) : []);
  return { via, log, execs };
}

// A ledger whose `tag` is already taken: its begin of a session of that tag is refused (INVALID_TAG).
async function ledgerWithTag(name: string, tag: string): Promise<Ledger> {
  const ledger = await Ledger.open(join(dir, `${name}.db`));
  await ledger.begin({ tag, location: { kind: 'local' }, command: ['earlier'] });
  return ledger;
}

const LEFTOVER = ['sh', '-c', 'setsid sleep 39 </dev/null >/dev/null 2>&1 & echo ran'];

describe('a recorded sandbox session whose begin the ledger refuses', () => {
  it('sandbox.run rejects with the ledger named; nothing reached the container, not even a sweep', async () => {
    const { via, execs } = countingVia('run');
    const channel = sandbox.commandChannel([via]);
    const tag = createTag();
    const taken = await ledgerWithTag('run', tag.name);
    // And a ledger that can no longer be written at all: a store's own error, without a code.
    const closed = await Ledger.open(join(dir, 'closed.db'));
    await closed.close();
    try {
      const error = await sandbox
        .run(channel, LEFTOVER, { tag, ledger: taken, sweep: SWEEP })
        .catch((e: Error) => e);
      expect(execs(), 'the session reached the container after its begin was refused').toEqual([]);
      expect((error as { code?: string }).code, String(error)).toBe('INVALID_TAG');
      expect((error as Error).message).toContain(`in the ledger ${taken.location}`);
      expect((error as Error).message).toContain('nothing was started');

      const tag2 = createTag();
      const started = performance.now();
      const error2 = await sandbox
        .run(channel, LEFTOVER, { tag: tag2, ledger: closed, sweep: SWEEP, reject: false })
        .catch((e: Error) => e);
      const ms = performance.now() - started;
      expect((error2 as { code?: string }).code, String(error2)).toBe('LEDGER_UNAVAILABLE');
      expect((error2 as Error).message).toMatch(
        new RegExp(`cannot record the session ${tag2.name} in the ledger .*closed\\.db: .*not open`),
      );
      expect(execs(), 'the session reached the container after its begin was refused').toEqual([]);
      expect(ms, 'a refused begin should cost no sweep').toBeLessThan(5_000);
      expect(taggedOnHost(tag.name)).toEqual([]);
      expect(taggedOnHost(tag2.name)).toEqual([]);
    } finally {
      await taken.close();
    }
  });

  it('sandbox.session: the command fails with the refusal, end() rejects with it without a sweep', async () => {
    const { via, execs } = countingVia('session');
    const tag = createTag();
    const ledger = await ledgerWithTag('session', tag.name);
    try {
      const s = sandbox.session(sandbox.commandChannel([via]), { tag, ledger, sweep: SWEEP });
      const r = await s.spawn(LEFTOVER);
      expect([r.failed, r.exitCode, r.error?.code]).toEqual([true, null, 'INVALID_TAG']);
      expect(r.error?.message).toContain(`in the ledger ${ledger.location}`);
      const ended = await s.end().catch((e: Error) => e);
      expect(execs(), 'the session reached the container after its begin was refused').toEqual([]);
      expect((ended as { code?: string }).code, String(ended)).toBe('INVALID_TAG');
      // The row is the earlier session's, untouched.
      expect((await ledger.get(tag.name))?.command).toEqual(['earlier']);
    } finally {
      await ledger.close();
    }
  });

  it('tether sandbox run --ledger: 125 naming the ledger, no exec through --via', async () => {
    const { via, execs } = countingVia('cli');
    const tag = createTag();
    const ledger = await ledgerWithTag('cli', tag.name);
    await ledger.close();
    const r = await tetherToEnd(
      ['sandbox', 'run', '--via', via, '--tag', tag.name, '--ledger', ledger.location, '--', ...LEFTOVER],
      { stdout: 'ignore', killAfterMs: 60_000 },
    );
    expect(r.status, r.stderr).toBe(125);
    expect(execs(), 'tether reached the container after the begin was refused').toEqual([]);
    expect(r.stderr).toContain(`cannot record the session ${tag.name} in the ledger ${ledger.location}`);
    expect(r.stderr).toContain('the command was not started');
    expect(taggedOnHost(tag.name)).toEqual([]);
  });
});
