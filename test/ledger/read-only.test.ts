// A SQLite ledger that cannot be written where it is — on a read-only filesystem (a read-only
// bind mount in a private mount namespace: a real EROFS, which root does not bypass) or with
// modes its user cannot write — is still listed and shown: `tether ls` and `tether show` read a
// private copy (src/ledger/sqlite-snapshot.ts), say so, and leave the file and its spool byte for
// byte as they were (no -wal, no -shm, nothing taken in from the spool).

import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BIN, tether } from '../support/cli.js';
import { tempDir } from '../support/zoo.js';

const root = process.getuid?.() === 0;
const skipRo = root ? '' : 'needs root (a bind mount in a private mount namespace)';

// Every file under `dir` (the ledger, its spool's sessions) with a hash of its bytes.
function contents(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = join(e.parentPath, e.name);
    out[p.slice(dir.length)] = createHash('sha256').update(readFileSync(p)).digest('hex');
  }
  return out;
}

// A ledger with one session in the file and one still in its spool; their short ids.
async function ledgerWithSpool(dir: string): Promise<{ db: string; ids: string[] }> {
  const db = join(dir, 'ledger.db');
  const marker = `ro-${process.pid}-${Date.now()}`;
  const first = await tether(['run', '--ledger', db, '--', 'sh', '-c', 'exit 0', `${marker}-a`]);
  expect(first.code, first.stderr).toBe(0);
  const taken = await tether(['ls', '--ledger', db, '--json']); // takes the first in
  expect(taken.code, taken.stderr).toBe(0);
  const [a] = (JSON.parse(taken.stdout) as { sessions: { tag: string }[] }).sessions.map((r) => r.tag);
  const second = await tether(['run', '--ledger', db, '--', 'sh', '-c', 'exit 0', `${marker}-b`]);
  expect(second.code, second.stderr).toBe(0);
  const spooled = readdirSync(`${db}.spool`);
  expect(spooled.length, 'premise: one session waits in the spool').toBe(1);
  const ids = [a as string, (spooled[0] as string).replace(/\.json$/, '')];
  return { db, ids };
}

// `tether ARGS` run as `user` (or root) inside a private mount namespace after `setup`.
function run(args: string[], opts: { readOnlyMount?: string; user?: string } = {}) {
  const cmd = `${opts.readOnlyMount ? `mount --bind -o ro '${opts.readOnlyMount}' '${opts.readOnlyMount}' && ` : ''}exec "$@"`;
  const node = [process.execPath, BIN, ...args];
  const argv = opts.user ? ['runuser', '-u', opts.user, '--', ...node] : node;
  const r = spawnSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', cmd, 'sh', ...argv], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe.skipIf(skipRo !== '')(`a read-only SQLite ledger ${skipRo}`, () => {
  it('on a read-only filesystem (EROFS): ls and show read it, its spool included, and write nothing', async () => {
    const dir = tempDir();
    const { db, ids } = await ledgerWithSpool(dir);
    const before = contents(dir);
    const ls = run(['ls', '--ledger', db, '--json'], { readOnlyMount: dir });
    expect(ls.code, ls.stderr).toBe(0);
    const listed = (JSON.parse(ls.stdout) as { sessions: { tag: string; state: string }[] }).sessions;
    expect(listed.map((s) => [s.tag, s.state])).toEqual(ids.map((t) => [t, 'succeeded']));
    expect(ls.stderr).toMatch(/is read-only \(EROFS.*read from a private copy, nothing written there/);
    const show = run(['show', '--ledger', db, ids[1] as string], { readOnlyMount: dir });
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain(ids[1]);
    expect(show.stdout).toContain('succeeded');
    // Nothing changed where the ledger is: no -wal or -shm made, the spool not taken in.
    expect(contents(dir)).toEqual(before);
    // Writable again, it is read (and the spool taken in) as usual.
    const after = await tether(['ls', '--ledger', db, '--json']);
    expect(after.code, after.stderr).toBe(0);
    expect(after.stderr).not.toMatch(/read-only/);
    expect(readdirSync(`${db}.spool`)).toEqual([]);
  }, 60_000);

  it('with modes its user cannot write (EACCES): ls and show read it and write nothing', async () => {
    const dir = tempDir();
    const { db, ids } = await ledgerWithSpool(dir);
    // Made the user nobody's, then read-only to it: the file 0400, the spool and directory 0500.
    const nobody = Number(execFileSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).trim());
    for (const p of [
      dir,
      db,
      `${db}.spool`,
      ...readdirSync(`${db}.spool`).map((n) => join(`${db}.spool`, n)),
    ])
      chownSync(p, nobody, nobody);
    for (const n of readdirSync(`${db}.spool`)) chmodSync(join(`${db}.spool`, n), 0o400);
    chmodSync(db, 0o400);
    chmodSync(`${db}.spool`, 0o500);
    chmodSync(dir, 0o500);
    const before = contents(dir);
    try {
      const ls = run(['ls', '--ledger', db, '--json'], { user: 'nobody' });
      expect(ls.code, ls.stderr).toBe(0);
      const listed = (JSON.parse(ls.stdout) as { sessions: { tag: string }[] }).sessions;
      expect(listed.map((s) => s.tag)).toEqual(ids);
      expect(ls.stderr).toMatch(/is read-only \(EACCES: the file is not writable by this user\)/);
      const show = run(['show', '--ledger', db, '--last'], { user: 'nobody' });
      expect(show.code, show.stderr).toBe(0);
      expect(show.stdout).toContain(ids[1]);
      expect(contents(dir)).toEqual(before);
    } finally {
      chmodSync(dir, 0o700);
    }
  }, 60_000);
});
