// A usage error of `tether sandbox exec|run|sweep --json` (an unknown option, a bad value, a
// missing --via) is one JSON object, as the command's other errors under --json are
// (`{ code, message, … }`: stderr, stdout for `sandbox sweep`), the status unchanged (125) —
// found by a new user's trial: it was a plain text line; so is a --ledger that cannot be opened
// or refuses the begin. Ground truth that nothing ran: the --via client, a script that leaves a
// mark when it is run, never left one.
import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createTag } from '../../src/index.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { tether } from '../support/cli.js';
import { testDir } from '../support/temp.js';

const dir = testDir('tether-json-usage-');
const mark = join(dir, 'ran');
const via = join(dir, 'client');
writeFileSync(via, `#!/bin/sh\n: > ${mark}\nexec "$@"\n`);
chmodSync(via, 0o755);
const TAG = 'TETHER_SESSION_0123456789abcdef0123456789abcdef';

// The one JSON object a stream holds, or a failed expectation naming what it held.
function onlyJson(text: string): { code: string; message: string } {
  const lines = text.trim().split('\n');
  expect(lines, text).toHaveLength(1);
  return JSON.parse(lines[0] as string);
}

describe('usage errors under --json are one JSON object, status 125', () => {
  it.each([
    {
      name: 'sandbox run: an unknown option',
      args: ['sandbox', 'run', '--json', '--timout', '5s', '--via', via, '--', 'true'],
      code: 'INVALID_OPTION',
      message: /^unknown option '--timout'/,
    },
    {
      name: 'sandbox run: an unknown option, --json after it',
      args: ['sandbox', 'run', '--timout', '5s', '--json', '--via', via, '--', 'true'],
      code: 'INVALID_OPTION',
      message: /^unknown option '--timout'/,
    },
    {
      name: 'sandbox exec: a bad duration',
      args: ['sandbox', 'exec', '--json', '--silence', '5x', '--via', via, '--', 'true'],
      code: 'INVALID_OPTION',
      message: /^invalid --silence "5x": expected a duration/,
    },
    {
      name: 'sandbox run: no --via',
      args: ['sandbox', 'run', '--json', '--', 'true'],
      code: 'INVALID_OPTION',
      message: /^required option '--via <prefix>' not specified$/,
    },
    {
      name: 'sandbox run: a bad tag',
      args: ['sandbox', 'run', '--json', '--tag', 'foo', '--via', via, '--', 'true'],
      code: 'INVALID_TAG',
      message: /^invalid tag "foo"/,
    },
  ])('$name: on stderr', async ({ args, code, message }) => {
    const r = await tether(args);
    expect(r.code, r.stderr).toBe(125);
    expect(r.stdout).toBe('');
    const error = onlyJson(r.stderr);
    expect(error.code).toBe(code);
    expect(error.message).toMatch(message);
    expect(existsSync(mark), 'the --via client ran').toBe(false);
  });

  it('sandbox sweep --json: on stdout, where its report and its other errors go', async () => {
    const r = await tether(['sandbox', 'sweep', '--json', '--via', via, '--tag', 'foo']);
    expect(r.code, r.stderr).toBe(125);
    expect(r.stderr).toBe('');
    expect(onlyJson(r.stdout)).toMatchObject({
      code: 'INVALID_TAG',
      message: expect.stringMatching(/^invalid tag "foo"/),
    });
    const unknown = await tether(['sandbox', 'sweep', '--json', '--via', via, '--tag', TAG, '--bogus']);
    expect(unknown.code, unknown.stderr).toBe(125);
    expect(onlyJson(unknown.stdout)).toMatchObject({
      code: 'INVALID_OPTION',
      message: expect.stringMatching(/^unknown option '--bogus'/),
    });
    expect(existsSync(mark), 'the --via client ran').toBe(false);
  });

  it('without --json before --, the one text line, as before (a --json of the command is its own)', async () => {
    const r = await tether(['sandbox', 'run', '--timout', '5s', '--via', via, '--', 'jq', '--json']);
    expect(r.code).toBe(125);
    expect(r.stderr).toMatch(/^tether: unknown option '--timout'\n/);
    const bad = await tether(['sandbox', 'exec', '--silence', '5x', '--via', via, '--', 'true']);
    expect(bad.code).toBe(125);
    expect(bad.stderr).toMatch(/^tether: invalid --silence "5x"/);
    expect(existsSync(mark), 'the --via client ran').toBe(false);
  });
});

describe('a --ledger that refuses, under --json: one JSON object naming the ledger and the tag, status 125', () => {
  it('one that cannot be opened (no such directory)', async () => {
    const where = join(dir, 'missing', 'ledger.db');
    const r = await tether(['sandbox', 'run', '--json', '--ledger', where, '--via', via, '--', 'true']);
    expect(r.code, r.stderr).toBe(125);
    const error = onlyJson(r.stderr) as { code: string; message: string; tag?: string };
    expect(error.code).toBe('LEDGER_UNAVAILABLE');
    expect(error.message).toMatch(
      new RegExp(`^cannot record the session in the ledger ${where}: .*the command was not started`),
    );
    expect(error.tag).toMatch(/^TETHER_SESSION_[0-9a-f]{32}$/);
    expect(existsSync(mark), 'the --via client ran').toBe(false);
  });

  it('one that refuses the begin (its tag already recorded)', async () => {
    const tag = createTag().name;
    const ledger = await Ledger.open(join(dir, 'taken.db'));
    await ledger.begin({ tag, location: { kind: 'local' }, command: ['earlier'] });
    await ledger.close();
    const r = await tether([
      'sandbox',
      'run',
      '--json',
      '--tag',
      tag,
      '--ledger',
      ledger.location,
      '--via',
      via,
      '--',
      'true',
    ]);
    expect(r.code, r.stderr).toBe(125);
    expect(onlyJson(r.stderr)).toMatchObject({
      code: 'INVALID_TAG',
      message: expect.stringMatching(
        new RegExp(`^cannot record the session ${tag} in the ledger .*the command was not started`),
      ),
      tag,
    });
    expect(existsSync(mark), 'the --via client ran').toBe(false);
  });
});
