// The SQLite store's failures, on real files: corrupt, another application's, newer schema,
// locked by another process, read-only, full. The file is never reset or rewritten.
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/ledger.js';
import { openSqliteStore, SQLITE_SCHEMA_VERSION } from '../../src/ledger/sqlite.js';
import { createTag } from '../../src/proc/tag.js';
import { ROOT } from '../support/paths.js';
import { tempDir } from '../support/zoo.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanups.splice(0).reverse()) f();
});

function begin(l: Ledger, command: string[] = ['x']) {
  return l.begin({ tag: createTag().name, command, location: { kind: 'local' } });
}

// A small tmpfs mounted for one test (we run as root: mode bits do not stop root, a mount does).
function smallTmpfs(size: string): string {
  const dir = tempDir();
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir]);
  cleanups.push(() => execFileSync('umount', ['-l', dir]));
  return dir;
}

describe('SQLite store errors', () => {
  it('a file that is not a database is refused with LEDGER_CORRUPT and left byte for byte', async () => {
    const path = join(tempDir(), 'ledger.db');
    const bytes = Buffer.from('not a database, but someone cared about it\n'.repeat(200));
    writeFileSync(path, bytes);
    const err = await Ledger.open(path).catch((e) => e);
    expect(err).toMatchObject({ code: 'LEDGER_CORRUPT' });
    expect(err.message).toContain(path);
    expect(err.message).toMatch(/never reset/);
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it("another application's SQLite database is refused and not migrated into", async () => {
    const path = join(tempDir(), 'other.db');
    const db = new Database(path);
    db.exec('CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES (1)');
    db.close();
    const bytes = readFileSync(path);
    await expect(Ledger.open(path)).rejects.toMatchObject({ code: 'LEDGER_CORRUPT' });
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it('a file from a newer schema is refused naming its version, never downgraded', async () => {
    const path = join(tempDir(), 'ledger.db');
    const l = await Ledger.open(path);
    await begin(l);
    await l.close();
    const db = new Database(path);
    db.pragma(`user_version = ${SQLITE_SCHEMA_VERSION + 7}`);
    db.pragma('wal_checkpoint(TRUNCATE)');
    db.close();
    const bytes = readFileSync(path);
    const err = await Ledger.open(path).catch((e) => e);
    expect(err).toMatchObject({ code: 'LEDGER_CORRUPT' });
    expect(err.message).toContain(`schema version is ${SQLITE_SCHEMA_VERSION + 7}`);
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it('a schema-1 file is migrated forward and keeps its records', async () => {
    const path = join(tempDir(), 'ledger.db');
    const old = new Ledger(await openSqliteStore(path, { schemaVersion: 1 }));
    const r = await begin(old, ['old', 'record']);
    await old.close();
    const store = await openSqliteStore(path);
    expect(store.schemaVersion).toBe(SQLITE_SCHEMA_VERSION);
    expect(await store.get(r.tag)).toEqual(r);
    await store.close();
  });

  it('a writer held past the busy timeout by another process gets LEDGER_LOCKED; the write then succeeds', async () => {
    const path = join(tempDir(), 'ledger.db');
    const l = new Ledger(await openSqliteStore(path, { busyTimeoutMs: 300 }));
    cleanups.push(() => void l.close());
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const D = require('better-sqlite3'); const db = new D(${JSON.stringify(path)});
         db.exec('BEGIN EXCLUSIVE'); db.prepare("UPDATE sessions SET state = state").run();
         console.log('HOLDING'); process.stdin.on('data', () => { db.exec('COMMIT'); process.exit(0); });`,
      ],
      { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    cleanups.push(() => holder.kill('SIGKILL'));
    await new Promise<void>((resolve, reject) => {
      holder.stdout?.on('data', (d) => String(d).includes('HOLDING') && resolve());
      holder.on('exit', (code) => reject(new Error(`premise broken: the lock holder exited with ${code}`)));
    });
    const err = await begin(l).catch((e) => e);
    expect(err).toMatchObject({ code: 'LEDGER_LOCKED' });
    expect(err.message).toContain(path);
    holder.stdin?.write('release\n');
    await new Promise((resolve) => holder.on('exit', resolve));
    expect((await begin(l)).state).toBe('running');
  });

  it('a read-only filesystem gives LEDGER_UNAVAILABLE on write; what is there stays readable', async () => {
    const dir = smallTmpfs('4m');
    const path = join(dir, 'ledger.db');
    const l = await Ledger.open(path);
    const r = await begin(l);
    await l.close();
    execFileSync('mount', ['-o', 'remount,ro', dir]);
    const bytes = readFileSync(path);
    let opened: Ledger | undefined;
    try {
      opened = await Ledger.open(path);
    } catch (err) {
      // Opening a WAL database needs its -shm file: on a read-only mount the open itself may fail.
      expect(err).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
      expect((err as Error).message).toContain(path);
    }
    if (opened) {
      cleanups.push(() => void opened?.close());
      expect((await opened.get(r.tag))?.tag).toBe(r.tag);
      const err = await begin(opened).catch((e) => e);
      expect(err).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
      expect(err.message).toContain(path);
    }
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });

  it('a full disk gives LEDGER_UNAVAILABLE; the records already there stay readable', async () => {
    const dir = smallTmpfs('256k');
    const path = join(dir, 'ledger.db');
    const l = await Ledger.open(path);
    cleanups.push(() => void l.close());
    const written: string[] = [];
    let err: unknown;
    for (let i = 0; i < 1000 && err === undefined; i++) {
      try {
        written.push((await begin(l, ['fill', 'x'.repeat(2000), String(i)])).tag);
      } catch (e) {
        err = e;
      }
    }
    expect(err, 'premise broken: 1000 records fit in 256 KiB').toBeDefined();
    expect(err).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
    expect((err as Error).message).toContain(path);
    expect((err as Error).message).toMatch(/full/);
    expect(written.length).toBeGreaterThan(5);
    expect((await l.list()).map((r) => r.tag)).toEqual(written);
    await l.close();
    const again = await Ledger.open(path);
    cleanups.push(() => void again.close());
    expect((await again.list()).map((r) => r.tag)).toEqual(written);
  });
});

describe('SQLite store paths', () => {
  // Node's recursive mkdirSync loops for ever on a path under /proc (ENOENT, EEXIST, again):
  // the store creates its directories itself, one level at a time.
  it('a directory that cannot be made is LEDGER_UNAVAILABLE naming the errno: under /proc, under a file', async () => {
    await expect(openSqliteStore('/proc/tether-no-such/ledger.db')).rejects.toMatchObject({
      code: 'LEDGER_UNAVAILABLE',
      message: expect.stringContaining("ENOENT: no such file or directory, mkdir '/proc/tether-no-such'"),
    });
    const file = join(tempDir(), 'plain');
    writeFileSync(file, 'x');
    await expect(openSqliteStore(join(file, 'sub/ledger.db'))).rejects.toMatchObject({
      code: 'LEDGER_UNAVAILABLE',
      message: expect.stringContaining(`ENOTDIR: ${file} is not a directory`),
    });
  });

  it('Ledger.open of a named file whose directory is missing refuses it and makes nothing; the default location’s is made', async () => {
    const missing = join(tempDir(), 'no-such-dir');
    for (const spool of [false, true]) {
      // The spool checks its file at the first begin.
      const err = await Ledger.open(join(missing, 'x.db'), { spool })
        .then(async (l) => {
          if (spool) await begin(l).finally(() => l.close());
          else await l.close();
        })
        .catch((e) => e);
      expect(err, `spool ${spool}`).toMatchObject({
        code: 'LEDGER_UNAVAILABLE',
        message: expect.stringContaining(`its directory ${missing} does not exist`),
      });
      expect(existsSync(missing), `spool ${spool}: ${missing} was created`).toBe(false);
    }
    const state = tempDir();
    const ledger = await Ledger.open(undefined, { env: { XDG_STATE_HOME: state } });
    await ledger.close();
    expect(statSync(join(state, 'tether')).mode & 0o777).toBe(0o700);
  });

  it('makes the missing directories with mode 0700', async () => {
    const dir = join(tempDir(), 'a/b');
    const store = await openSqliteStore(join(dir, 'ledger.db'));
    await store.close();
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, '..')).mode & 0o777).toBe(0o700);
  });
});

describe('Postgres store without a server or a driver', () => {
  it('an unreachable server is LEDGER_UNAVAILABLE and the password appears nowhere', async () => {
    const err = await Ledger.open('postgres://alice:s3cret-pw@127.0.0.1:1/ledger').catch((e) => e);
    expect(err).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
    expect(err.message).toContain('postgres://alice:***@127.0.0.1:1/ledger');
    expect(JSON.stringify({ m: err.message, s: err.stack, c: String(err.cause) })).not.toContain('s3cret-pw');
  });

  it('a postgres URL without pg installed says to npm install pg', async () => {
    // dist/ copied where no node_modules is above it: `import('pg')` cannot resolve there.
    const dir = tempDir();
    mkdirSync(join(dir, 'dist'));
    cpSync(join(ROOT, 'dist'), join(dir, 'dist'), { recursive: true });
    writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
    const out = execFileSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { openPostgresStore } from ${JSON.stringify(join(dir, 'dist/ledger/postgres.js'))};
         openPostgresStore('postgresql://bob:hunter2@db.example/ledger').catch((e) => console.log(JSON.stringify({ code: e.code, message: e.message })));`,
      ],
      { cwd: dir, encoding: 'utf8' },
    );
    const got = JSON.parse(out) as { code: string; message: string };
    expect(got.code).toBe('LEDGER_UNAVAILABLE');
    expect(got.message).toContain('npm install pg');
    expect(got.message).toContain('postgresql://bob:***@db.example/ledger');
    expect(got.message).not.toContain('hunter2');
  });
});

describe('SQLite ledger paths', () => {
  it('a new ledger file is created 0600 when its directory exists; an existing file keeps its mode', async () => {
    const dir = tempDir();
    const path = join(dir, 'ledger.db');
    const l = await Ledger.open(path);
    await begin(l, ['secret-command', '--token', 'x']);
    await l.close();
    expect((statSync(path).mode & 0o777).toString(8)).toBe('600');
    for (const side of ['-wal', '-shm'])
      if (existsSync(path + side)) expect((statSync(path + side).mode & 0o077).toString(8)).toBe('0');
    const existing = join(dir, 'existing.db');
    writeFileSync(existing, '');
    chmodSync(existing, 0o640);
    await (await Ledger.open(existing)).close();
    expect((statSync(existing).mode & 0o777).toString(8)).toBe('640');
  });

  it('a symlink to /dev/null, a FIFO, a directory and a dangling symlink are refused before SQLite touches them', async () => {
    const dir = tempDir();
    const journalBefore = existsSync('/dev/null-journal');
    const cases: [string, () => void, RegExp][] = [
      [
        'null.db',
        () => symlinkSync('/dev/null', join(dir, 'null.db')),
        /is a character device, not a regular file/,
      ],
      ['fifo.db', () => execFileSync('mkfifo', [join(dir, 'fifo.db')]), /is a FIFO/],
      ['dir.db', () => mkdirSync(join(dir, 'dir.db')), /is a directory, not a regular file/],
      [
        'dangling.db',
        () => symlinkSync('/nonexistent/x.db', join(dir, 'dangling.db')),
        /symbolic link to \/nonexistent\/x\.db, which does not exist/,
      ],
    ];
    for (const [name, make, why] of cases) {
      make();
      const path = join(dir, name);
      const err = await Ledger.open(path).catch((e) => e);
      expect(err, name).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
      expect(err.message).toContain(path);
      expect(err.message).toMatch(why);
    }
    expect(readdirSync(dir).sort()).toEqual(['dangling.db', 'dir.db', 'fifo.db', 'null.db']);
    expect(readdirSync(join(dir, 'dir.db'))).toEqual([]);
    if (!journalBefore) expect(existsSync('/dev/null-journal'), 'SQLite made /dev/null-journal').toBe(false);
    // A symlink to a regular file is a ledger like any other.
    const real = join(dir, 'real.db');
    await (await Ledger.open(real)).close();
    symlinkSync(real, join(dir, 'link.db'));
    const viaLink = await Ledger.open(join(dir, 'link.db'));
    await begin(viaLink);
    expect(await viaLink.list()).toHaveLength(1);
    await viaLink.close();
  });
});
