// A helper an earlier session checked, taken by a later one through the same channel
// (src/sandbox/session-helper.ts, knownHelper): no check exec of its own, its wrappers checking the
// helper at their exec (wrap.sh), falling back where it is gone or changed — never run twice. Ground truth from the host, through
// /proc/<init>/root: the helper file's bytes, and a marker file the command appends to (it ran
// exactly once). A fresh tmpfs on the container's /tmp, in its own mount namespace, per test.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { createTag, sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/channel.js';
import { type Container, privateTmp, startContainer, taggedOnHost } from './container.js';

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
const expected = local ? createHash('sha256').update(readFileSync(local)).digest('hex') : '';
const SWEEP = { graceMs: 1000, killAfterMs: 1000 };

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

    it('removed since: its wrapper falls back and says so, the command runs once; the next command is checked and pushed', async () => {
      privateTmp(box, 'tether-known');
      const channel = naming(box.channel);
      await once(channel, '/tmp/known-2a');
      rmSync(onHost(helperPath));
      // One session, two commands: the first finds the helper gone, the second runs after a check.
      const tag = createTag();
      const session = sandbox.session(channel, { tag, sweep: SWEEP, helper: true });
      channel.programs.length = 0;
      const first = await session.spawn(['sh', '-c', 'echo ran >>/tmp/known-2']);
      expect(channel.programs, 'the fallen-back command was run again').toEqual(['tether-wrap']);
      const second = await session.spawn(['sh', '-c', 'echo ran >>/tmp/known-2b']);
      const report = await session.end();
      expect([first.exitCode, second.exitCode]).toEqual([0, 0]);
      expect(channel.programs).toEqual([
        'tether-wrap', // fell back: the env tag alone
        'tether-helper-check',
        'tether-write',
        'tether-helper-check',
        'tether-wrap',
        'tether-sweep',
      ]);
      const notes = report.notes.join('\n');
      expect(notes).toContain('1 of 2 commands ran under the helper');
      expect(notes).toContain('fell back to the shell, on the env tag alone');
      expect(notes).toContain('cannot be opened');
      expect(readFileSync(onHost('/tmp/known-2'), 'latin1'), 'the command did not run exactly once').toBe(
        'ran\n',
      );
      expect(readFileSync(onHost('/tmp/known-2b'), 'latin1')).toBe('ran\n');
      expect(sha256Of(onHost(helperPath)), 'the helper was not put back').toBe(expected);
      expect(taggedOnHost(tag.name)).toEqual([]);
    });

    it('changed since (other bytes under its name): never run, the command runs once on the env tag alone; the next session replaces it', async () => {
      privateTmp(box, 'tether-known');
      const channel = naming(box.channel);
      await once(channel, '/tmp/known-3a');
      writeFileSync(onHost(helperPath), '#!/bin/sh\necho forged >>/tmp/known-3-forged\n');
      const second = await once(channel, '/tmp/known-3');
      expect([second.r.exitCode, second.r.ok]).toEqual([0, true]);
      expect(second.programs).toEqual(['tether-wrap', 'tether-sweep']);
      const notes = second.r.report.notes.join('\n');
      expect(notes).toContain('fell back to the shell, on the env tag alone');
      expect(notes).toContain('does not hash to its name');
      expect(readFileSync(onHost('/tmp/known-3'), 'latin1')).toBe('ran\n');
      expect(existsSync(onHost('/tmp/known-3-forged')), 'the changed file was run').toBe(false);
      const third = await once(channel, '/tmp/known-3c');
      expect(third.programs.slice(0, 2)).toEqual(['tether-helper-check', 'tether-write']);
      ranUnderHelper(third.r.report.notes, 'pushed by this session');
      expect(sha256Of(onHost(helperPath)), 'the helper was not put back').toBe(expected);
    });
  },
);
