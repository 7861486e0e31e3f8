// `tether show` names a session as git names a commit: a whole tag, a unique prefix of its hex
// digits, or --last; none or several matching is status 1 with the candidates. `tether ls` shows
// the short ids `show` takes. Records are written with chosen tags through the real ledger.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { outcomeText } from '../../src/cli/ledger-commands.js';
import { shortIds } from '../../src/cli/session-ref.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { ROOT } from '../support/paths.js';
import { tempDir } from '../support/zoo.js';

const CLI = join(ROOT, 'bin/tether.cjs');
const execFileP = promisify(execFile);

async function tether(args: string[]) {
  try {
    const { stdout, stderr } = await execFileP(process.execPath, [CLI, ...args], { timeout: 30_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const tagOf = (hex: string) => `TETHER_SESSION_${hex.padEnd(32, '0')}`;

async function ledgerWith(hexes: string[]): Promise<string> {
  const path = join(tempDir(), 'ledger.db');
  const ledger = await Ledger.open(path);
  let t = 1_000;
  for (const hex of hexes) {
    const clocked = new Ledger(ledger.store, () => (t += 1_000));
    await clocked.begin({ tag: tagOf(hex), command: ['echo', hex], location: { kind: 'local' } });
  }
  await ledger.close();
  return path;
}

describe('tether show by prefix or --last, tether ls by short id', () => {
  it('a unique prefix, with or without the tag prefix, picks its session; --last the newest', async () => {
    const path = await ledgerWith(['abcd1234', 'abce9999', '7777']);
    for (const ref of [
      'abcd',
      'abcd12',
      'TETHER_SESSION_abcd',
      tagOf('abcd1234'),
      `${tagOf('abcd1234')}=1`,
    ]) {
      const r = await tether(['show', ref, '--json', '--ledger', path]);
      expect(r.code, `${ref}: ${r.stderr}`).toBe(0);
      expect(JSON.parse(r.stdout).tag).toBe(tagOf('abcd1234'));
    }
    const last = await tether(['show', '--last', '--json', '--ledger', path]);
    expect(last.code, last.stderr).toBe(0);
    expect(JSON.parse(last.stdout).command).toEqual(['echo', '7777']);
  });

  it('an ambiguous or unknown prefix is status 1 and names the candidates; bad input is refused first', async () => {
    const path = await ledgerWith(['abcd1234', 'abce9999']);
    const short = await tether(['show', 'abc', '--ledger', path]);
    expect(short.code).toBe(125); // under 4 digits: INVALID_TAG before the ledger is read
    expect(short.stderr).toMatch(/at least 4/);
    expect((await tether(['show', 'abcd', '--ledger', path])).code).toBe(0); // abce… differs at digit 4
    const both = await ledgerWith(['abcd1234', 'abcd5678']);
    const r = await tether(['show', 'abcd', '--ledger', both]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('names 2 sessions');
    expect(r.stderr).toContain(tagOf('abcd1234'));
    expect(r.stderr).toContain(tagOf('abcd5678'));
    const none = await tether(['show', 'ffff', '--ledger', both]);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain('no session ffff');
    const whole = await tether(['show', tagOf('ffff'), '--ledger', both]);
    expect(whole.code).toBe(1);
    const empty = await tether(['show', '--last', '--ledger', join(tempDir(), 'none.db')]);
    expect(empty.code).toBe(1);
    expect((await tether(['show', 'ABCD', '--ledger', both])).code).toBe(125);
    expect((await tether(['show', 'abcd', '--last', '--ledger', both])).code).toBe(125);
    expect((await tether(['show', '--ledger', both])).code).toBe(125);
  });

  it('ls shows ids of 8 digits, longer where two tags share them, and show takes each', async () => {
    const path = await ledgerWith(['0123456789', '0123456788', 'fedcba98']);
    const ls = await tether(['ls', '--ledger', path]);
    expect(ls.code, ls.stderr).toBe(0);
    const ids = ls.stdout
      .trim()
      .split('\n')
      .slice(1)
      .map((l) => l.split(/\s+/)[0]);
    expect(ids).toEqual(['0123456789', '0123456788', 'fedcba98']); // the first two share 9 digits
    for (const [i, id] of ids.entries()) {
      const r = await tether(['show', id ?? '', '--json', '--ledger', path]);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout).tag).toBe(tagOf(['0123456789', '0123456788', 'fedcba98'][i] ?? ''));
    }
    expect(shortIds([tagOf('aa'), tagOf('aa')]).get(tagOf('aa'))).toBe('aa000000'); // one tag, listed twice
  });
});

describe('tether show: the outcome line', () => {
  it('says only what was recorded: a timed-out run is its signal and TIMED_OUT, an exit its status', async () => {
    const path = join(tempDir(), 'ledger.db');
    const timedOut = await tether(['run', '--timeout', '200ms', '--ledger', path, '--', 'sleep', '30']);
    expect(timedOut.code, timedOut.stderr).toBe(124);
    const show = await tether(['show', '--last', '--ledger', path]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/^ {2}outcome: {4}signal SIGTERM TIMED_OUT: /m);
    expect(show.stdout, 'an absent exit status printed as "exit -"').not.toContain('exit -');
    const exited = await tether(['run', '--ledger', path, '--', 'sh', '-c', 'exit 3']);
    expect(exited.code, exited.stderr).toBe(3);
    const last = await tether(['show', '--last', '--ledger', path]);
    expect(last.stdout).toMatch(/^ {2}outcome: {4}exit 3 COMMAND_FAILED: /m);
  });

  it('an outcome with neither an exit status nor a signal is "exit status unknown"', () => {
    expect(outcomeText({ exitCode: null, signal: null, error: null })).toBe('exit status unknown');
    expect(outcomeText({ exitCode: 0, signal: null, error: null })).toBe('exit 0');
  });
});
