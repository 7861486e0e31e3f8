// The helper's status lines, read by the one parser: every line native/helper.c can print (its
// `say` formats, read from the source, so that a new line without a case fails here) and the
// malformed ones a reader must not take for a status. A pure parser: tested on text.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  CONTROL,
  findAnswer,
  type HelperStatus,
  parseStatusLine,
} from '../../src/containment/helper-protocol.js';
import { ROOT } from '../support/paths.js';

const source = readFileSync(join(ROOT, 'native/helper.c'), 'latin1');

/** The format of every `say(...)` call in helper.c, without its `\n`. */
function sayFormats(): string[] {
  return [...source.matchAll(/\bsay\("([^"]*)\\n"/g)].map((m) => m[1] as string);
}

/** What a `%s` of a format stands for: the words helper.c passes there. */
function wordsFor(format: string): string[] {
  if (format.startsWith('warn %s'))
    return [...source.matchAll(/warn_once\("([a-z-]+)"/g)].map((m) => m[1] as string);
  // report_exit's end of the line: nothing, or wrap mode's ` childless`.
  if (format.startsWith('exit ')) return ['', ' childless'];
  if (format.startsWith('exec-failed %s')) {
    const line = source.split('\n').find((l) => l.includes('say("exec-failed')) ?? '';
    return [...line.matchAll(/"([a-z]+)"/g)].map((m) => m[1] as string);
  }
  return [];
}

/** Each line a format can print, with sample numbers. */
function linesOf(format: string): string[] {
  const numbers = (f: string) => f.replace(/%llu/g, '4242').replace(/%d/g, '17');
  if (!format.includes('%s')) return [numbers(format)];
  return wordsFor(format).map((w) => numbers(format.replace('%s', w)));
}

describe('the helper status parser', () => {
  const formats = sayFormats();

  it('reads helper.c: it has every status line the protocol table lists', () => {
    expect(formats.length, 'premise broken: no say(...) found in native/helper.c').toBeGreaterThan(10);
    const words = new Set(formats.map((f) => f.split(' ')[0]));
    for (const w of ['helper', 'init', 'started', 'exec-failed', 'exit', 'error', 'warn'])
      expect(words, `helper.c prints no "${w}" line`).toContain(w);
  });

  it('gives every line helper.c can print a case of its own, never malformed', () => {
    const lines = formats.flatMap(linesOf);
    expect(lines, 'premise broken: a %s format with no word found').not.toContain('');
    for (const format of formats.filter((f) => f.includes('%s')))
      expect(linesOf(format).length, `premise broken: no words found for "${format}"`).toBeGreaterThan(0);
    for (const line of lines)
      expect(parseStatusLine(line).kind, `"${line}" was read as malformed`).not.toBe('malformed');
  });

  it('reads each status into its typed form', () => {
    const cases: [string, HelperStatus][] = [
      ['helper 812 99120', { kind: 'helper', identity: { pid: 812, startTime: 99120 } }],
      ['init 813 99121', { kind: 'init', identity: { pid: 813, startTime: 99121 } }],
      ['started 814 0', { kind: 'started', identity: { pid: 814, startTime: 0 } }],
      ['exec-failed exec 2', { kind: 'exec-failed', stage: 'exec', errno: 2 }],
      ['exec-failed cgroup 13', { kind: 'exec-failed', stage: 'cgroup', errno: 13 }],
      ['exec-failed namespace 1', { kind: 'exec-failed', stage: 'namespace', errno: 1 }],
      ['exit code 0', { kind: 'exit-code', code: 0 }],
      ['exit code 255', { kind: 'exit-code', code: 255 }],
      ['exit signal 9', { kind: 'exit-signal', signal: 9 }],
      ['exit signal 64', { kind: 'exit-signal', signal: 64 }],
      ['exit lost', { kind: 'exit-lost' }],
      ['error unshare 1', { kind: 'error', what: 'unshare', errno: 1 }],
      ['error stat 24', { kind: 'error', what: 'stat', errno: 24 }],
      ['warn poll 22', { kind: 'warn', what: 'poll', errno: 22 }],
      ['warn cgroup-kill 13', { kind: 'warn', what: 'cgroup-kill', errno: 13 }],
      ['warn signal 1 4711', { kind: 'warn', what: 'signal', errno: 1, pid: 4711 }],
    ];
    for (const [line, status] of cases) expect(parseStatusLine(line), line).toEqual(status);
  });

  it('calls malformed whatever is not one of them, and keeps the line', () => {
    const bad = [
      '',
      'hello',
      'started',
      'started 814',
      'started 814 99 1',
      'started -814 99',
      'started 0 99',
      'started 0814 99',
      'started 8x 99',
      'started 814 1e3',
      'started  814 99',
      'STARTED 814 99',
      'exec-failed fork 2',
      'exec-failed exec',
      'exec-failed exec -2',
      'exit',
      'exit code',
      'exit code 256',
      'exit code -1',
      'exit signal 0',
      'exit signal 65',
      'exit lost now',
      'exit crashed 3',
      'error',
      'error unshare',
      'error unshare EPERM',
      'error Unshare 1',
      'warn poll',
      'warn poll 22 0',
      'warn poll 22 33 44',
      'warn 22 poll',
      'started 814 99\r',
      'started 99999999999999999999 1',
      '#!/bin/sh: no such file',
    ];
    for (const line of bad)
      expect(parseStatusLine(line), JSON.stringify(line)).toEqual({ kind: 'malformed', line });
  });
});

describe('the answers to children?', () => {
  it('finds the answer to its own query only, once its line is complete', () => {
    expect(findAnswer('3 n\n', 3)).toBe('none');
    expect(findAnswer('3 c\n', 3)).toBe('child');
    expect(findAnswer('3 u\n', 3)).toBe('unknown');
    // A late answer to an earlier query (it timed out) is not this one's.
    expect(findAnswer('2 n\n3 c\n', 3)).toBe('child');
    expect(findAnswer('2 n\n', 3)).toBeUndefined();
    expect(findAnswer('13 n\n', 3)).toBeUndefined();
    expect(findAnswer('3 n', 3), 'an answer without its newline is not complete').toBeUndefined();
    expect(findAnswer('3 x\n3 n n\n', 3)).toBeUndefined();
  });

  it('takes a late answer to an earlier query of the same asks (from `k` to `last`), and none outside them', () => {
    expect(findAnswer('4 n\n', 4, 5), "the first ask's late answer").toBe('none');
    expect(findAnswer('5 c\n', 4, 5)).toBe('child');
    expect(findAnswer('3 n\n6 n\n', 4, 5), 'older and newer answers are not these asks').toBeUndefined();
    expect(findAnswer('04 n\n', 4, 5), 'a number the helper never prints').toBeUndefined();
  });

  it('names a kept process by pid and start time', () => {
    expect(CONTROL.keep({ pid: 4242, startTime: 987654 })).toBe('keep 4242 987654\n');
    // helper.c reads the line it is sent.
    expect(source).toContain('sscanf(line, "keep %d %llu", &pid, &start)');
  });
});
