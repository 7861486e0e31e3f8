// A row that is no valid record, on a real SQLite file: `get` names it (LEDGER_CORRUPT, its tag
// and field), `list` returns the others and reports it, and `tether recover` / `ls` / `ps` go on
// with the good sessions and name the bad row. The file is never rewritten.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/ledger.js';
import { currentSupervisor } from '../../src/ledger/supervisor.js';
import type { CorruptRow, Supervisor } from '../../src/ledger/types.js';
import { createTag } from '../../src/proc/tag.js';
import { tether } from '../support/cli.js';
import { identityOf, isAlive, type ProcessId } from '../support/proc.js';
import { cleanup, started, tempDir, waitFor } from '../support/zoo.js';

afterEach(() => cleanup());

// A supervisor that was real and is gone: a process that ran and exited (pid + start time).
async function goneSupervisor(): Promise<Supervisor> {
  const child = spawn('sleep', ['0.2']);
  const id = identityOf(child.pid ?? 0);
  if (!id) throw new Error('premise broken: no identity of the short-lived process');
  await new Promise((resolve) => child.on('exit', resolve));
  await waitFor('the short-lived process to be gone', () => !isAlive(id));
  return { ...currentSupervisor(), pid: id.pid, startTime: id.startTime };
}

// Writes a row straight into the file, as another tool (or a bug) would.
function tamper(path: string, sql: string, ...params: unknown[]): void {
  const db = new Database(path);
  db.prepare(sql).run(...params);
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
}

// Each variant: how a row goes wrong, and the field the error must name.
const VARIANTS: { name: string; sql: string; value: unknown; field: RegExp; badTag?: string }[] = [
  {
    name: 'kept is not JSON',
    sql: 'UPDATE sessions SET kept = ? WHERE tag = ?',
    value: '[{',
    field: /its kept is not JSON/,
  },
  {
    name: 'kept is null',
    sql: 'UPDATE sessions SET kept = ? WHERE tag = ?',
    value: 'null',
    field: /its kept is null, not an array/,
  },
  {
    name: 'a kept pid is -1',
    sql: 'UPDATE sessions SET kept = ? WHERE tag = ?',
    value: JSON.stringify([{ pid: -1, startTime: 0, cmdline: 'x', match: 'x', owner: 'o', expiresAt: 1 }]),
    field: /its kept\[0\]\.pid is -1, not an integer/,
  },
  {
    name: 'the supervisor has no pid',
    sql: 'UPDATE sessions SET supervisor = ? WHERE tag = ?',
    value: JSON.stringify({ machineId: '', bootId: '' }),
    field: /its supervisor\.pid is undefined/,
  },
  {
    name: 'the state is unknown',
    sql: 'UPDATE sessions SET state = ? WHERE tag = ?',
    value: 'zombie',
    field: /its state is "zombie"/,
  },
  {
    name: 'the tag is no tag',
    sql: 'UPDATE sessions SET tag = ? WHERE tag = ?',
    value: 'TETHER_SESSION_../../x',
    field: /its tag is "TETHER_SESSION_\.\.\/\.\.\/x", not TETHER_SESSION_/,
    badTag: 'TETHER_SESSION_../../x',
  },
];

describe('a row that is no valid record', () => {
  for (const v of VARIANTS) {
    it(`${v.name}: get rejects with LEDGER_CORRUPT naming tag and field; list returns the others and reports it`, async () => {
      const path = join(tempDir(), 'ledger.db');
      const ledger = await Ledger.open(path);
      const good = createTag().name;
      const bad = createTag().name;
      for (const tag of [good, bad]) await ledger.begin({ tag, command: ['x'], location: { kind: 'local' } });
      await ledger.close();
      tamper(path, v.sql, v.value, bad);
      const badTag = v.badTag ?? bad;
      const bytes = readFileSync(path);

      const reopened = await Ledger.open(path);
      const err = await reopened.get(badTag).then(
        () => null,
        (e) => e,
      );
      expect(err, 'get of the bad row resolved').not.toBeNull();
      expect(err).toMatchObject({ code: 'LEDGER_CORRUPT' });
      expect(err.message).toContain(path);
      expect(err.message).toContain(JSON.stringify(badTag));
      expect(err.message).toMatch(v.field);
      expect((await reopened.get(good))?.tag).toBe(good);

      const corrupt: CorruptRow[] = [];
      const records = await reopened.list({ onCorrupt: (c) => corrupt.push(c) });
      expect(records.map((r) => r.tag)).toEqual([good]);
      expect(corrupt).toHaveLength(1);
      expect(corrupt[0]?.tag).toBe(badTag);
      // Without a callback the bad row is skipped all the same, never returned as a record.
      expect((await reopened.list()).map((r) => r.tag)).toEqual([good]);
      // A write to the bad row is refused, not made over it: as corrupt, or — a tag that is no
      // tag's name — before the store is asked (INVALID_TAG).
      await expect(reopened.cancel(badTag)).rejects.toMatchObject({
        code: v.badTag ? 'INVALID_TAG' : 'LEDGER_CORRUPT',
      });
      await reopened.close();
      expect(readFileSync(path).equals(bytes), 'the file was rewritten').toBe(true);
    });
  }

  it("a supervisor's pidNamespace (a number) is accepted; a non-number is not", async () => {
    const path = join(tempDir(), 'ledger.db');
    const ledger = await Ledger.open(path);
    const tag = createTag().name;
    const supervisor = { ...currentSupervisor(), pidNamespace: 4026531836 };
    await ledger.begin({ tag, command: ['x'], location: { kind: 'local' }, supervisor });
    expect((await ledger.get(tag))?.supervisor).toEqual(supervisor);
    await ledger.close();
    tamper(
      path,
      'UPDATE sessions SET supervisor = ? WHERE tag = ?',
      JSON.stringify({ ...supervisor, pidNamespace: 'x' }),
      tag,
    );
    const reopened = await Ledger.open(path);
    await expect(reopened.get(tag)).rejects.toThrow(/its supervisor\.pidNamespace is "x"/);
    await reopened.close();
  });
});

describe('tether recover, ls and ps over a ledger with a bad row', () => {
  it('recover sweeps the good session, names the bad row, exits 1; ls and ps list the good one and name the bad', async () => {
    const path = join(tempDir(), 'ledger.db');
    const ledger = await Ledger.open(path);
    const good = createTag().name;
    const bad = createTag().name;
    // The good session's leftover: a real process carrying its tag.
    const leftover = spawn('sleep', ['600'], { env: { ...process.env, [good]: '1' }, stdio: 'ignore' });
    const leftoverId = identityOf(leftover.pid ?? 0) as ProcessId;
    started.push(leftoverId);
    const supervisor = await goneSupervisor();
    for (const tag of [good, bad])
      await ledger.begin({ tag, command: ['sleep', '600'], location: { kind: 'local' }, supervisor });
    await ledger.close();
    tamper(path, 'UPDATE sessions SET kept = ? WHERE tag = ?', '[{', bad);
    const bytes = readFileSync(path);

    const ls = await tether(['ls', '--ledger', path]);
    expect(ls.code, ls.stderr).toBe(0);
    const short = (tag: string) => tag.slice('TETHER_SESSION_'.length, 'TETHER_SESSION_'.length + 8); // ls's ID
    expect(ls.stdout).toContain(short(good));
    expect(ls.stdout).not.toContain(short(bad));
    expect(ls.stderr).toContain(`session "${bad}": its kept is not JSON`);
    const lsJson = JSON.parse((await tether(['ls', '--json', '--ledger', path])).stdout);
    expect(lsJson.sessions.map((r: { tag: string }) => r.tag)).toEqual([good]);
    expect(lsJson.corrupt).toEqual([expect.objectContaining({ tag: bad, field: 'kept' })]);

    const ps = await tether(['ps', '--ledger', path]);
    expect(ps.code, ps.stderr).toBe(0);
    expect(ps.stdout).toContain(good);
    expect(ps.stdout).toMatch(new RegExp(`note: .*session "${bad}": its kept is not JSON`));
    expect(readFileSync(path).equals(bytes), 'ls or ps rewrote the file').toBe(true);

    const recovered = await tether(['recover', '--ledger', path, '--grace', '1s', '--kill-after', '1s']);
    expect(recovered.code, recovered.stderr).toBe(1);
    expect(recovered.stderr).not.toMatch(/internal error/);
    expect(recovered.stderr).toMatch(new RegExp(`${good}\\s+recovered`));
    expect(recovered.stderr).toContain(`session "${bad}": its kept is not JSON`);
    expect(isAlive(leftoverId), "the good session's leftover survived recover").toBe(false);
    const after = await Ledger.open(path);
    expect((await after.get(good))?.state).toBe('recovered');
    await expect(after.get(bad)).rejects.toMatchObject({ code: 'LEDGER_CORRUPT' });
    await after.close();
    const db = new Database(path, { readonly: true });
    expect((db.prepare('SELECT kept FROM sessions WHERE tag = ?').get(bad) as { kept: string }).kept).toBe(
      '[{',
    );
    db.close();
  });
});
