// The session's report says how each command ran (docs/sandbox.md, "An agent session under the
// pushed helper"): under the helper, or fallen back to the shell on the env tag alone, with the
// wrapper's words — also when the command's stderr is streamed to the caller, as the CLI does.
// Before, a session whose command fell back still read "the commands ran under the helper".
import { readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { helperUseOf, WrapperLines } from '../../src/sandbox/helper-use.js';
import {
  HELPER_BLIND_SPOT,
  HELPER_CGROUP_BLIND_SPOT,
  reportUnder,
} from '../../src/sandbox/session-helper.js';
import { END_LINE_BLIND_SPOT } from '../../src/sandbox/sweep-output.js';
import { ENV_TAG_BLIND_SPOT, type SweepReport } from '../../src/sweep/report.js';
import { type Container, privateTmp, startContainer, taggedOnHost } from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
  // A tmpfs of its own on the container's /tmp (its mount namespace): the helper is pushed there.
  privateTmp(box, 'tether-hr');
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
// The container's file as the host sees it.
const onHost = (path: string) => join('/proc', String(box.init), 'root', path);

describe('the session report under the helper', () => {
  it('a command that fell back is named as such, with the wrapper’s words; the one under the helper as such', async () => {
    const tag = createTag();
    const s = sandbox.session(box.channel, { tag, sweep: SWEEP, helper: true });
    let path = '';
    try {
      const first = await s.spawn(['sh', '-c', 'echo one']);
      expect(
        [first.exitCode, first.blindSpots],
        'premise broken: the first command did not run under the helper',
      ).toEqual([0, []]);
      const name = readdirSync(onHost('/tmp/.tether')).find((n) => /^helper-[0-9a-f]{64}$/.test(n));
      expect(name, 'premise broken: no helper in /tmp/.tether').toBeDefined();
      path = `/tmp/.tether/${name}`;
      // Other bytes renamed over the path: the next wrapper refuses them (they do not hash to the
      // name) and proves the end itself. (The first command's helper still runs: its file is busy.)
      writeFileSync(onHost(`${path}.other`), '#!/bin/sh\nexit 99\n', { mode: 0o700 });
      renameSync(onHost(`${path}.other`), onHost(path));
      // Streamed, as `tether sandbox run` streams it: the result holds none of it.
      const streamed = new PassThrough();
      const chunks: Buffer[] = [];
      streamed.on('data', (c: Buffer) => chunks.push(c));
      const second = await s.spawn(['sh', '-c', 'echo two; echo own words >&2'], { stderr: streamed });
      const stderr = Buffer.concat(chunks).toString();
      expect(second.exitCode, `premise broken: the second command failed: ${stderr}`).toBe(0);
      expect(stderr, 'premise broken: the wrapper did not refuse the other bytes').toContain(
        'does not hash to its name',
      );
      expect(second.blindSpots, 'premise broken: the second end line is not the shell’s').toContain(
        END_LINE_BLIND_SPOT,
      );
      const report = await s.end();
      const notes = report.notes.join('\n');
      expect(notes, 'the report still says every command ran under the helper').not.toContain(
        'the commands ran under the helper',
      );
      expect(notes).toContain(`1 of 2 commands ran under the helper ${path} (pushed by this session;`);
      expect(notes).toContain('"sh -c echo one"');
      expect(notes).toContain(
        `the command "sh -c echo two; echo own words >&2" fell back to the shell, on the env tag alone (an env-cleared process it orphaned is not found); the wrapper said: tether-wrap: the helper ${path} does not hash to its name (`,
      );
      // One command ran under the helper: what it orphaned was found below it (one fell back: no
      // narrowing to the cgroups).
      expect(report.blindSpots).toContain(HELPER_BLIND_SPOT);
      expect(taggedOnHost(tag.name)).toEqual([]);
    } finally {
      await s.end().catch(() => {});
      if (path) rmSync(onHost(path), { force: true });
      if (taggedOnHost(tag.name).length) await sandbox.sweep(box.channel, tag, SWEEP);
    }
  });
});

describe('how a command ran, read from its output', () => {
  it('the wrapper’s lines are kept across chunks, only at a line’s start, at most four', () => {
    const w = new WrapperLines();
    const text =
      'a tether-wrap: not at a start\ntether-wr' +
      'ap: the helper /x does not hash to its name (abc): refused, never run; the command runs on the env tag alone\n' +
      'own\ntether-wrap: two\ntether-wrap: three\ntether-wrap: four\ntether-wrap: five\n';
    for (let i = 0; i < text.length; i += 7) w.push(Buffer.from(text.slice(i, i + 7)));
    w.end();
    expect(w.lines).toEqual([
      'tether-wrap: the helper /x does not hash to its name (abc): refused, never run; the command runs on the env tag alone',
      'tether-wrap: two',
      'tether-wrap: three',
      'tether-wrap: four',
    ]);
    const last = new WrapperLines();
    last.push(Buffer.from('tether-wrap: no newline'));
    last.end();
    expect(last.lines).toEqual(['tether-wrap: no newline']);
  });

  it('the start line says whose proof; the wrapper’s line says why it fell back', () => {
    const why = 'tether-wrap: no FIFO for the helper in /t: the command runs on the env tag alone';
    expect(helperUseOf({ announced: true, byHelper: true }, false, [why])).toEqual({ under: 'helper' });
    expect(helperUseOf({ announced: true, byHelper: false }, false, ['tether-wrap: x', why])).toEqual({
      under: 'shell',
      why,
    });
    expect(helperUseOf({ announced: false, byHelper: false }, false, [why])).toEqual({ under: 'unknown' });
    // A script over 100 KB: the shell proves the end; the helper is its subreaper unless the
    // wrapper said otherwise.
    expect(helperUseOf({ announced: true, byHelper: false }, true, [])).toEqual({ under: 'subreaper' });
    expect(helperUseOf({ announced: true, byHelper: false }, true, [why])).toEqual({ under: 'shell', why });
  });

  it('a session none of whose commands ran under the helper keeps the env tag’s blind spot', () => {
    const report: SweepReport = {
      version: 1,
      tag: 'TETHER_SESSION_00000000000000000000000000000000',
      complete: true,
      ok: true,
      layers: ['env-tag', 'sandbox'],
      notes: [],
      cgroup: null,
      signalling: 'start-time-recheck',
      proof: 'two-empty-scans',
      stopped: [],
      survivors: [],
      kept: [],
      unreadable: [],
      blindSpots: [ENV_TAG_BLIND_SPOT],
      warnings: [],
      phases: [],
      timings: { startedAt: new Date(0).toISOString(), durationMs: 0, scans: 2, scanMs: 0 },
    };
    const push = {
      path: '/tmp/.tether/helper-x',
      sha256: 'x',
      machine: 'x86_64',
      pushed: false,
      replaced: false,
    };
    const why = 'tether-wrap: no FIFO for the helper in /tmp/.tether: the command runs on the env tag alone';
    const fell = reportUnder(report, push, [{ command: ['true'], use: { under: 'shell', why } }]);
    expect(fell.blindSpots).toEqual([ENV_TAG_BLIND_SPOT]);
    expect(fell.notes).toEqual([
      'no command ran under the helper /tmp/.tether/helper-x (reused)',
      `the command "true" fell back to the shell, on the env tag alone (an env-cleared process it orphaned is not found); the wrapper said: ${why}`,
    ]);
    const ran = reportUnder(report, push, [{ command: ['true'], use: { under: 'helper' } }]);
    expect(ran.blindSpots).toEqual([HELPER_BLIND_SPOT]);
    const inCgroup = reportUnder(report, push, [
      { command: ['true'], use: { under: 'helper', cgroup: true } },
    ]);
    expect(inCgroup.blindSpots).toEqual([HELPER_CGROUP_BLIND_SPOT]);
    expect(ran.notes).toEqual([
      'the commands ran under the helper /tmp/.tether/helper-x (reused; a subreaper: what they orphaned was found as its descendants)',
    ]);
  });
});
