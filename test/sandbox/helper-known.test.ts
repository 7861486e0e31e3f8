// A helper an earlier session checked, taken by a later one through the same channel
// (src/sandbox/session-helper.ts, knownHelper): no check exec of its own, its wrapper checking the
// helper at its exec (wrap.sh, `--unchecked`) and running nothing where it is gone or changed;
// the session then checks (and pushes) it and sends the command again. A command that cannot be
// sent twice (a stream's stdin) is run after a check. Never a command on the env tag alone. Ground truth from the host, through
// /proc/<init>/root: the helper file's bytes, and a marker file the command appends to (it ran
// exactly once). A fresh tmpfs on the container's /tmp, in its own mount namespace, per test.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { createTag, sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/channel.js';
import { type Container, privateTmp, sleepersIn, startContainer, taggedOnHost } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const expected = local ? createHash('sha256').update(readFileSync(local)).digest('hex') : '';
const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
// A session's execs when its helper is pushed: check, write, check again, then its command and sweep.
const PUSHED_AND_RUN = [
  'tether-helper-check',
  'tether-write',
  'tether-helper-check',
  'tether-wrap',
  'tether-sweep',
];

// A channel that names each exec by its program (the word after `-c PROGRAM`: tether-wrap,
// tether-sweep, tether-helper-check, tether-write), in order.
function naming(inner: ExecChannel): ExecChannel & { programs: string[] } {
  const programs: string[] = [];
  return {
    describe: inner.describe,
    programs,
    exec(argv) {
      const i = argv.indexOf('-c');
      programs.push(i >= 0 ? String(argv[i + 2]) : argv.join(' '));
      return inner.exec(argv);
    },
  };
}

describe.skipIf(!local)(
  `a helper known from an earlier session${local ? '' : ' (skipped: no prebuilt helper built here)'}`,
  () => {
    let box: Container;
    beforeAll(async () => {
      box = await startContainer(240);
    });
    afterAll(async () => {
      await box?.stop();
    });

    const sha256Of = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
    const onHost = (path: string) => `/proc/${box.init}/root${path}`;
    const helperPath = `/tmp/.tether/helper-${expected}`;

    // One session through `channel` whose command appends a line to MARK: its report, and the
    // programs it exec'd.
    async function once(channel: ExecChannel & { programs: string[] }, mark: string) {
      channel.programs.length = 0;
      const tag = createTag();
      const r = await sandbox.run(channel, ['sh', '-c', `echo ran >>${mark}`], {
        tag,
        sweep: SWEEP,
        helper: true,
      });
      expect(taggedOnHost(tag.name)).toEqual([]);
      return { r, programs: [...channel.programs] };
    }

    function ranUnderHelper(notes: readonly string[], how: 'reused' | 'pushed by this session'): void {
      expect(notes.join('\n')).toContain(`the commands ran under the helper ${helperPath} (${how};`);
    }

    it('a later session through the same channel runs under it with no check exec of its own', async () => {
      privateTmp(box, 'tether-known');
      const channel = naming(box.channel);
      const first = await once(channel, '/tmp/known-1');
      expect(first.programs[0]).toBe('tether-helper-check');
      const second = await once(channel, '/tmp/known-1');
      expect([second.r.exitCode, second.r.ok]).toEqual([0, true]);
      expect(second.programs, 'the second session checked the helper in an exec of its own').toEqual([
        'tether-wrap',
        'tether-sweep',
      ]);
      ranUnderHelper(second.r.report.notes, 'reused');
      expect(second.r.blindSpots).toEqual([]);
      expect(readFileSync(onHost('/tmp/known-1'), 'latin1')).toBe('ran\nran\n');
    });

    it('removed since: its wrapper runs nothing, the session pushes it again and runs the command once', async () => {
      privateTmp(box, 'tether-known');
      const channel = naming(box.channel);
      await once(channel, '/tmp/known-2a');
      rmSync(onHost(helperPath));
      const { r, programs } = await once(channel, '/tmp/known-2');
      expect([r.exitCode, r.ok]).toEqual([0, true]);
      // The first wrapper refused: nothing read, nothing run.
      expect(programs).toEqual(['tether-wrap', ...PUSHED_AND_RUN]);
      ranUnderHelper(r.report.notes, 'pushed by this session');
      expect(r.report.notes.join('\n')).toMatch(
        /the command "sh -c echo ran >>\/tmp\/known-2" was sent twice: .* its first wrapper ran nothing \(it said: the helper \S+ cannot be opened: nothing ran\)/,
      );
      expect(readFileSync(onHost('/tmp/known-2'), 'latin1'), 'the command did not run exactly once').toBe(
        'ran\n',
      );
      expect(sha256Of(onHost(helperPath)), 'the helper was not put back').toBe(expected);
    });

    it('changed since (other bytes under its name): refused at the exec, replaced, the command run once', async () => {
      privateTmp(box, 'tether-known');
      const channel = naming(box.channel);
      await once(channel, '/tmp/known-3a');
      writeFileSync(onHost(helperPath), '#!/bin/sh\necho forged >>/tmp/known-3-forged\n');
      const { r, programs } = await once(channel, '/tmp/known-3');
      expect([r.exitCode, r.ok]).toEqual([0, true]);
      expect(programs.slice(0, 2)).toEqual(['tether-wrap', 'tether-helper-check']);
      ranUnderHelper(r.report.notes, 'pushed by this session');
      expect(readFileSync(onHost('/tmp/known-3'), 'latin1')).toBe('ran\n');
      expect(existsSync(onHost('/tmp/known-3-forged')), 'the changed file was run').toBe(false);
      expect(sha256Of(onHost(helperPath)), 'the helper was not put back').toBe(expected);
    });

    it('a command whose stdin is a stream, which cannot be sent twice: the helper is checked (and pushed) before it runs', async () => {
      privateTmp(box, 'tether-known');
      const channel = naming(box.channel);
      await once(channel, '/tmp/known-4a');
      rmSync(onHost(helperPath));
      const tag = createTag();
      channel.programs.length = 0;
      const r = await sandbox.run(channel, ['sh', '-c', 'cat >>/tmp/known-4'], {
        tag,
        sweep: SWEEP,
        helper: true,
        input: Readable.from(['streamed\n']),
      });
      expect([r.exitCode, r.ok]).toEqual([0, true]);
      expect(channel.programs).toEqual(PUSHED_AND_RUN);
      ranUnderHelper(r.report.notes, 'pushed by this session');
      expect(readFileSync(onHost('/tmp/known-4'), 'latin1')).toBe('streamed\n');
      expect(taggedOnHost(tag.name)).toEqual([]);
    });

    it('an env-cleared double fork of the first command after the helper was removed is below the helper, and gone', async () => {
      privateTmp(box, 'tether-known');
      const channel = naming(box.channel);
      await once(channel, '/tmp/known-5a');
      rmSync(onHost(helperPath));
      const tag = createTag();
      const r = await sandbox.run(
        channel,
        ['sh', '-c', "env -i /bin/sh -c 'setsid sleep 87.5 </dev/null >/dev/null 2>&1 &'; sleep 0.2"],
        { tag, sweep: SWEEP, helper: true },
      );
      expect([r.exitCode, r.ok]).toEqual([0, true]);
      // Its cmdline may be caught before its exec (`setsid sleep 87.5`, or its forked shell's).
      expect(r.report.stopped.some((p) => p.cmdline.includes('sleep 87.5'))).toBe(true);
      ranUnderHelper(r.report.notes, 'pushed by this session');
      expect(sleepersIn(box, 87.5), 'the double fork outlived the session').toEqual([]);
    });
  },
);
