// What `tether sandbox run` (and `sandbox exec`) tells a reader of its end alone — found by a new
// user's trial: under --json the top-level `blindSpots` and `notes` were empty while the report
// held the sweep's blind spots and notes (the helper's absence, and why, among them); a session
// that fell back to the env tag alone said so only in a note; a stop by --silence did not say how
// long the bound was. Ground truth: each command's leftover, by its unique cmdline in the
// container's PID namespace, alive or gone on the host.
import { execFileSync } from 'node:child_process';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { ENV_TAG_BLIND_SPOT } from '../../src/sweep/report.js';
import { tether } from '../support/cli.js';
import {
  aliveOnHost,
  type Container,
  doubleForked,
  privateTmp,
  startContainer,
  taggedOnHost,
} from './container.js';

const SWEEP = { graceMs: 500, killAfterMs: 500 };
// Unique sleep lengths: this file's leftovers, told apart from any other run's.
const BASE = 7_300 + (process.pid % 300);
let box: Container;
let via: string;
const tags: string[] = [];
beforeAll(async () => {
  box = await startContainer(240);
  via = box.prefix.join(' ');
});
// Whatever a failed test left carrying its tag.
afterEach(async () => {
  for (const tag of tags.splice(0))
    if (taggedOnHost(tag).length) await sandbox.sweep(box.channel, tag, SWEEP);
});
afterAll(async () => {
  await box?.stop();
});

function newTag(): string {
  const { name } = createTag();
  tags.push(name);
  return name;
}

// A /tmp of the container's own, then remounted with `option` (ro, noexec): the helper cannot be
// pushed there, and no session before left one.
function tmpWith(name: string, option?: 'ro' | 'noexec'): void {
  privateTmp(box, name);
  if (option)
    execFileSync('nsenter', ['-t', String(box.init), '-m', 'mount', '-o', `remount,${option}`, '/tmp'], {
      timeout: 10_000,
    });
}

// The one JSON line --json writes on stderr: its last line.
function endOf(stderr: string): Record<string, unknown> & {
  blindSpots: string[];
  notes: string[];
  report: { blindSpots: string[]; notes: string[] };
} {
  return JSON.parse(stderr.trim().split('\n').at(-1) as string);
}

const FELL_BACK = (why: string) =>
  new RegExp(
    `^tether: warning: no helper in .*: the file system at /tmp is mounted ${why}; the session runs on the env tag alone$`,
    'gm',
  );

describe('sandbox run --json: the top level says everything the report says', () => {
  it('under the helper: the sweep’s blind spots and notes are at the top level too, each once', async () => {
    tmpWith('tether-rf-helper');
    const tag = newTag();
    const s = BASE;
    const run = tether([
      'sandbox',
      'run',
      '--json',
      '--tag',
      tag,
      '--via',
      via,
      '--',
      'sh',
      '-c',
      `env -i sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'; sleep 1`,
    ]);
    const seen = await doubleForked(box, s);
    const r = await run.finally(() => {
      if (aliveOnHost(seen)) process.kill(seen.pid, 'SIGKILL');
    });
    expect(r.code, r.stderr).toBe(0);
    const end = endOf(r.stderr);
    // Premise: the helper ran the command, and its report has blind spots and notes to tell.
    expect(end.report.notes.join('\n')).toMatch(/the commands ran under the helper/);
    expect(end.report.blindSpots.length).toBeGreaterThan(0);
    for (const spot of end.report.blindSpots) expect(end.blindSpots).toContain(spot);
    for (const note of end.report.notes) expect(end.notes).toContain(note);
    expect(new Set(end.blindSpots).size).toBe(end.blindSpots.length);
    expect(new Set(end.notes).size).toBe(end.notes.length);
    // Ground truth: the env-cleared double fork was the helper's descendant, and is gone.
    expect(aliveOnHost(seen)).toBe(false);
  });

  it('on the env tag alone (a read-only /tmp): why, and what it cannot see, at the top level; no text line', async () => {
    tmpWith('tether-rf-json', 'ro');
    const tag = newTag();
    const s = BASE + 1;
    const r = await tether([
      'sandbox',
      'run',
      '--json',
      '--tag',
      tag,
      '--via',
      via,
      '--',
      'sh',
      '-c',
      `setsid sleep ${s} </dev/null >/dev/null 2>&1 &`,
    ]);
    expect(r.code, r.stderr).toBe(0);
    const end = endOf(r.stderr);
    expect(end.notes.join('\n')).toMatch(
      /^no helper in .*: the file system at \/tmp is mounted read-only; the session runs on the env tag alone$/m,
    );
    expect(end.blindSpots).toContain(ENV_TAG_BLIND_SPOT);
    // --json's end is its one line: no `tether: warning:` beside it.
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    // Ground truth: the leftover kept the tag, and the env tag's sweep stopped it.
    expect(taggedOnHost(tag)).toEqual([]);
  });
});

describe('a session that fell back to the env tag alone warns, naming why', () => {
  it('sandbox run, nothing to list (a read-only /tmp): one warning line, then what is not seen', async () => {
    tmpWith('tether-rf-ro', 'ro');
    const tag = newTag();
    const r = await tether(['sandbox', 'run', '--tag', tag, '--via', via, '--', 'true']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr.match(FELL_BACK('read-only'))).toHaveLength(1);
    expect(r.stderr).not.toMatch(/^tether: (note: )?no helper in /m);
    expect(r.stderr).toMatch(/^tether: not seen: env-cleared processes are invisible to the env tag/m);
  });

  it('sandbox run, a leftover stopped (a noexec /tmp): the warning once, beside the report', async () => {
    tmpWith('tether-rf-noexec', 'noexec');
    const tag = newTag();
    const s = BASE + 2;
    const run = tether([
      'sandbox',
      'run',
      '--tag',
      tag,
      '--via',
      via,
      '--',
      'sh',
      '-c',
      `setsid sleep ${s} </dev/null >/dev/null 2>&1 & sleep 1`,
    ]);
    const seen = await doubleForked(box, s);
    const r = await run;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr.match(FELL_BACK('noexec'))).toHaveLength(1);
    expect(r.stderr).not.toMatch(/^tether: note: no helper in /m);
    expect(r.stderr).toMatch(new RegExp(`^tether: stopped 1 process of the session:$[^]*sleep ${s}$`, 'm'));
    // Ground truth: the tagged leftover is gone.
    expect(aliveOnHost(seen)).toBe(false);
  });

  it('sandbox exec --sweep (a read-only /tmp): the same warning', async () => {
    tmpWith('tether-rf-sweep', 'ro');
    const tag = newTag();
    const r = await tether(['sandbox', 'exec', '--sweep', '--tag', tag, '--via', via, '--', 'true']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr.match(FELL_BACK('read-only'))).toHaveLength(1);
  });
});

describe('a stop by --silence says how long the bound was', () => {
  it('sandbox run --silence 1s: 124, "no output for 1 s: --silence 1s", the session swept', async () => {
    tmpWith('tether-rf-silence');
    const tag = newTag();
    const s = BASE + 3;
    const r = await tether([
      'sandbox',
      'run',
      '--silence',
      '1s',
      '--tag',
      tag,
      '--via',
      via,
      '--',
      'sleep',
      String(s),
    ]);
    expect(r.code, r.stderr).toBe(124);
    expect(r.stderr).toMatch(
      /^tether: the exec client was silent for the --silence bound: the command was stopped \(no output for 1 s: --silence 1s\)$/m,
    );
    expect(taggedOnHost(tag)).toEqual([]);
  });

  it('sandbox exec --silence 1500ms: "no output for 1.5 s: --silence 1500ms", its call swept', async () => {
    const tag = newTag();
    const s = BASE + 4;
    const r = await tether([
      'sandbox',
      'exec',
      '--silence',
      '1500ms',
      '--tag',
      tag,
      '--via',
      via,
      '--',
      'sleep',
      String(s),
    ]);
    expect(r.stderr).toMatch(
      /^tether: the exec client was silent for the --silence bound: the call was stopped \(no output for 1\.5 s: --silence 1500ms\)$/m,
    );
    expect(taggedOnHost(tag)).toEqual([]);
  });
});
