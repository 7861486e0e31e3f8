// The spool writer's file operations (src/ledger/spool.ts, sqlite-file.ts) made by native/spool.c
// (src/proc/native-files.ts) and by Node's fs give the same files, the same answers and the same
// errors: each case runs on both paths, on real files, a real SQLite file, a FIFO and a full tmpfs.
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { SpoolStore, spoolDirOf } from '../../src/ledger/spool.js';
import { addonPlaces, checkLedgerFile, findAddon } from '../../src/ledger/sqlite-file.js';
import { bootId, currentSupervisor, machineId, pidNamespace } from '../../src/ledger/supervisor.js';
import type { SessionRecord } from '../../src/ledger/types.js';
import { nativeProc, useNativeProc } from '../../src/proc/native.js';
import { nativeFiles } from '../../src/proc/native-files.js';
import { createTag } from '../../src/proc/tag.js';
import { ROOT } from '../support/paths.js';
import { tempDir } from '../support/zoo.js';

const mounts: string[] = [];
afterAll(() => {
  for (const m of mounts) execFileSync('umount', [m]);
});

/** Runs `f` on the JS path, then on the native one (in a fresh directory each); both results. */
function bothPaths<T>(f: (dir: string) => T): { js: T; native: T } {
  const was = useNativeProc(false);
  try {
    expect(nativeFiles(), 'premise broken: the JS path still has native files').toBeNull();
    const js = f(tempDir());
    useNativeProc(true);
    expect(nativeFiles(), 'premise broken: the native library is not built').not.toBeNull();
    return { js, native: f(tempDir()) };
  } finally {
    useNativeProc(was);
  }
}

function outcome(f: () => unknown): { ok: unknown } | { code: string; message: string } {
  try {
    return { ok: f() };
  } catch (err) {
    const e = err as { code: string; message: string };
    return { code: e.code, message: e.message };
  }
}

function record(tag: string, state: SessionRecord['state'] = 'running'): SessionRecord {
  return {
    tag,
    revision: 1,
    createdAt: 1_700_000_000_000,
    updatedAt: 1_700_000_000_000,
    supervisor: { machineId: '', bootId: '', pid: 4242, startTime: 7 },
    location: { kind: 'local' },
    command: ['sleep', 'ünïcode ✓'],
    state,
    outcome: null,
    reports: [],
    leaseUntil: null,
    kept: [],
  };
}

// What a directory holds: names (the tag's made generic), modes, contents.
function contents(dir: string, tag: string): { name: string; mode: string; text: string }[] {
  return readdirSync(dir)
    .sort()
    .map((name) => ({
      name: name.replace(tag, 'TAG'),
      mode: (statSync(join(dir, name)).mode & 0o777).toString(8),
      text: readFileSync(join(dir, name), 'utf8').replaceAll(tag, 'TAG'),
    }));
}

describe('the spool writer, native and JS', () => {
  it('is built here: the native path is the one a run takes', () => {
    expect(nativeProc()).not.toBeNull();
  });

  it('writes the same begin and end files, 0600 in a 0700 directory, and refuses a tag spooled already', () => {
    const tag = createTag().name;
    const { js, native } = bothPaths((dir) => {
      const db = join(dir, 'ledger.db');
      const store = new SpoolStore(db);
      const first = store.insertSync(record(tag));
      const again = new SpoolStore(db).insertSync(record(tag));
      const begun = contents(spoolDirOf(db), tag);
      void store.compareAndSet(tag, 1, record(tag, 'succeeded')); // written before it returns
      return {
        first,
        again,
        begun,
        ended: contents(spoolDirOf(db), tag),
        spoolMode: (statSync(spoolDirOf(db)).mode & 0o777).toString(8),
        file: existsSync(db),
      };
    });
    expect(native).toEqual(js);
    expect(native.first).toBe(true);
    expect(native.again).toBe(false);
    expect(native.begun).toHaveLength(1); // no write in progress left
    expect(native.begun[0]?.name).toBe('TAG.json');
    expect(native.begun[0]?.mode).toBe('600');
    expect(JSON.parse(native.begun[0]?.text ?? '').state).toBe('running');
    expect(JSON.parse(native.ended[0]?.text ?? '').state).toBe('succeeded');
    expect(native.ended).toHaveLength(1);
    expect(native.spoolMode).toBe('700');
  });

  it('reads the same verdict from a SQLite file, a text file, a FIFO, a directory and a missing file', () => {
    const { js, native } = bothPaths((dir) => {
      const sqlite = join(dir, 'ok.db');
      new Database(sqlite).exec('CREATE TABLE t (x)');
      const text = join(dir, 'notes.db');
      writeFileSync(text, 'not a database, but long enough to hold a whole header '.repeat(3));
      const fifo = join(dir, 'fifo.db');
      execFileSync('mkfifo', [fifo]);
      const sub = join(dir, 'sub.db');
      mkdirSync(sub);
      const cases = { sqlite, text, fifo, sub, missing: join(dir, 'new', 'ledger.db') };
      return Object.fromEntries(
        Object.entries(cases).map(([k, p]) => [k, outcome(() => checkLedgerFile(p))]),
      );
    });
    const generic = (o: typeof js) => JSON.parse(JSON.stringify(o).replaceAll(/\/tmp\/[^'" )]+?\//g, 'DIR/'));
    expect(generic(native)).toEqual(generic(js));
    expect(native.sqlite).toEqual({ ok: undefined });
    expect(native.missing).toEqual({ ok: undefined }); // created, as SQLite would
    expect(native.text).toMatchObject({ code: 'LEDGER_CORRUPT' });
    expect(native.fifo).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
    expect(native.sub).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
  });

  it('finds the same addon root, built or not, from the same directories', () => {
    const places = addonPlaces();
    const fake = tempDir();
    mkdirSync(join(fake, 'a', 'node_modules', 'better-sqlite3'), { recursive: true });
    writeFileSync(join(fake, 'a', 'node_modules', 'better-sqlite3', 'package.json'), '{}');
    mkdirSync(join(fake, 'a', 'b', 'c'), { recursive: true });
    const built = tempDir();
    mkdirSync(join(built, 'node_modules', 'better-sqlite3', 'lib', 'binding', 'x'), { recursive: true });
    writeFileSync(join(built, 'node_modules', 'better-sqlite3', 'package.json'), '{}');
    const last = places.at(-1) as string;
    mkdirSync(join(built, 'node_modules', 'better-sqlite3', last, '..'), { recursive: true });
    writeFileSync(join(built, 'node_modules', 'better-sqlite3', last), '');
    const starts = [join(ROOT, 'dist', 'ledger'), join(fake, 'a', 'b', 'c'), join(built, 'deeper'), '/'];
    const native = nativeFiles();
    expect(native, 'premise broken: the native library is not built').not.toBeNull();
    const js = starts.map((s) => findAddon(s, places));
    expect(starts.map((s) => native?.findAddon(s, 'better-sqlite3', places))).toEqual(js);
    expect(js[0]).toEqual({ root: join(ROOT, 'node_modules', 'better-sqlite3'), built: true });
    expect(js[1]).toEqual({ root: join(fake, 'a', 'node_modules', 'better-sqlite3'), built: false });
    expect(js[2]).toEqual({ root: join(built, 'node_modules', 'better-sqlite3'), built: true });
    expect(js[3]).toEqual({ built: false });
  });

  it("reads the supervisor's host ids as the JS path does", () => {
    const native = nativeFiles()?.host();
    const js = { machineId: machineId(), bootId: bootId(), pidNamespace: pidNamespace() };
    expect(native).toEqual(js);
    // Ground truth, read here.
    expect(native?.bootId).toBe(readFileSync('/proc/sys/kernel/random/boot_id', 'latin1').trim());
    expect(native?.bootId).toMatch(/^[0-9a-f-]{36}$/);
    expect(native?.pidNamespace).toBe(statSync('/proc/self/ns/pid').ino);
    const { js: a, native: b } = bothPaths(() => currentSupervisor());
    expect(b).toEqual(a);
  });

  it('on a full filesystem fails the same way and leaves nothing under a spool name', () => {
    const tag = createTag().name;
    const { js, native } = bothPaths((dir) => {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir]);
      mounts.push(dir);
      const db = join(dir, 'ledger.db');
      const store = SpoolStore.open(db);
      for (let i = 0; ; i++) {
        try {
          writeFileSync(join(dir, `fill-${i}`), Buffer.alloc(4096));
        } catch {
          break;
        }
      }
      const big = record(tag);
      big.command = ['x'.repeat(64 * 1024)];
      const r = outcome(() => store.insertSync(big));
      return { r, left: readdirSync(spoolDirOf(db)) };
    });
    const generic = (o: typeof js) => JSON.parse(JSON.stringify(o).replaceAll(/\/tmp\/[^'" )]+/g, 'PATH'));
    expect(generic(native)).toEqual(generic(js));
    expect(native.r).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
    expect((native.r as { message: string }).message).toMatch(/ENOSPC: no space left on device, write/);
    expect(native.left).toEqual([]);
  });

  it('refuses the same spool paths: a file, a symlink to a directory', () => {
    const { js, native } = bothPaths((dir) => {
      const a = join(dir, 'a.db');
      writeFileSync(a, '');
      writeFileSync(`${a}.spool`, 'a file');
      const b = join(dir, 'b.db');
      writeFileSync(b, '');
      mkdirSync(join(dir, 'elsewhere'));
      execFileSync('ln', ['-s', join(dir, 'elsewhere'), `${b}.spool`]);
      return [a, b].map((db) => outcome(() => SpoolStore.open(db)));
    });
    const generic = (o: typeof js) => JSON.parse(JSON.stringify(o).replaceAll(/\/tmp\/[^'" )]+?\//g, 'DIR/'));
    expect(generic(native)).toEqual(generic(js));
    for (const r of native) expect(r).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
  });
  // A directory `dir`/x{200}/… deep enough that `dir`/…/<name of `total` bytes in all> fits PATH_MAX.
  function deepPath(dir: string, total: number): string {
    let p = dir;
    while (p.length < total - 250) {
      p = join(p, 'x'.repeat(200));
      mkdirSync(p);
    }
    return join(p, 'l'.repeat(total - p.length - 1));
  }
  const deep = (o: unknown) =>
    JSON.parse(
      JSON.stringify(o)
        .replaceAll(/\/tmp\/[^/'" )]+/g, 'DIR')
        .replaceAll(/x{200}/g, 'X')
        .replaceAll(/tmp-\d+-\d+-\d+/g, 'tmp-N'),
    );

  it("words a failed call in Node's (libuv's) words: a write past PATH_MAX, a rename over a directory", async () => {
    const tag = createTag().name;
    const js: unknown[] = [];
    const native: unknown[] = [];
    for (const [on, into] of [
      [false, js],
      [true, native],
    ] as const) {
      const was = useNativeProc(on);
      try {
        // A ledger path of 4040 bytes: its spool's write-in-progress name is past PATH_MAX.
        const long = deepPath(tempDir(), 4040);
        writeFileSync(long, '');
        into.push(outcome(() => new SpoolStore(long).insertSync(record(tag))));
        // The record's name taken by a directory: the rename of the end over it fails.
        const db = join(tempDir(), 'l.db');
        writeFileSync(db, '');
        const store = new SpoolStore(db);
        store.insertSync(record(tag));
        unlinkSync(join(store.dir, `${tag}.json`));
        mkdirSync(join(store.dir, `${tag}.json`));
        try {
          await store.compareAndSet(tag, 1, record(tag, 'succeeded'));
          into.push({ ok: true });
        } catch (err) {
          into.push({ code: (err as { code: string }).code, message: (err as Error).message });
        }
      } finally {
        useNativeProc(was);
      }
    }
    expect(deep(native)).toEqual(deep(js));
    expect((native[0] as { message: string }).message).toMatch(/ENAMETOOLONG: name too long, open/);
    expect((native[1] as { message: string }).message).toMatch(
      /EISDIR: illegal operation on a directory, rename/,
    );
  });

  it('refuses a spool past PATH_MAX as LEDGER_UNAVAILABLE (not an internal error), on both paths', () => {
    const { js, native } = bothPaths((dir) => {
      const long = deepPath(dir, 4093); // the file fits PATH_MAX, `<file>.spool` does not
      writeFileSync(long, '');
      return outcome(() => SpoolStore.open(long));
    });
    expect(deep(native)).toEqual(deep(js));
    expect(native).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
    expect((native as { message: string }).message).toMatch(
      /cannot be inspected \(ENAMETOOLONG: name too long, lstat/,
    );
  });

  it('finds the addon from a directory past PATH_MAX as the JS search does: further up', () => {
    const places = addonPlaces();
    const starts = [
      join(ROOT, 'dist', 'ledger', 'a/'.repeat(2100)), // 4,200 bytes: every path below it is too long
      join(ROOT, 'dist', 'ledger', 'a/'.repeat(2020)), // fits, but not with node_modules/… after it
    ];
    const js = starts.map((s) => findAddon(s, places));
    expect(starts.map((s) => outcome(() => nativeFiles()?.findAddon(s, 'better-sqlite3', places)))).toEqual(
      js.map((ok) => ({ ok })),
    );
    expect(js[0]).toEqual({ root: join(ROOT, 'node_modules', 'better-sqlite3'), built: true });
  });

  it('gives a ledger path holding a NUL the JS verdict (a C string would end there, at another file)', () => {
    const { js, native } = bothPaths((dir) => {
      writeFileSync(join(dir, 'real'), '');
      const db = join(dir, 'real\0.db');
      return {
        check: outcome(() => checkLedgerFile(db)),
        spool: outcome(() => new SpoolStore(db).insertSync(record(createTag().name))),
      };
    });
    const generic = (o: typeof js) => JSON.parse(JSON.stringify(o).replaceAll(/\/tmp\/[^/'" )]+/g, 'DIR'));
    expect(generic(native)).toEqual(generic(js));
    expect(native.check).toMatchObject({ code: 'LEDGER_UNAVAILABLE' });
  });
});
