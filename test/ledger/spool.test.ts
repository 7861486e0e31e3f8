// The SQLite ledger's spool (src/ledger/spool.ts): `tether run` writes its session there without
// loading SQLite; every reader takes the files in once, through the transition table, and a
// reader or supervisor killed halfway loses nothing. Real CLI runs, real files, a real SQLite
// ledger; ground truth from the files themselves and /proc.
import { execFile, execFileSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  watch,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/index.js';
import { MAX_SPOOL_FILE_BYTES, SpoolStore, spoolDirOf } from '../../src/ledger/spool.js';
import type { CorruptRow } from '../../src/ledger/types.js';
import { createTag } from '../../src/proc/tag.js';
import { beginOrphaned, goneSupervisor, recoverCli } from '../recover/support.js';
import { runNode } from '../support/node.js';
import { ROOT } from '../support/paths.js';
import { childrenOf, identityOf, isAlive, type ProcessId } from '../support/proc.js';
import { cleanup, started, tempDir, waitFor } from '../support/zoo.js';

const CLI = join(ROOT, 'bin/tether.cjs');
const execFileP = promisify(execFile);

afterEach(() => cleanup());

const mounts: string[] = [];
afterEach(() => {
  for (const dir of mounts.splice(0)) execFileSync('umount', ['-l', dir]);
});

// A 64 KiB tmpfs, unmounted after the test.
function smallTmpfs(): string {
  const dir = tempDir();
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir]);
  mounts.push(dir);
  return dir;
}

// Fills `dir`'s filesystem with 4 KiB files until ENOSPC, then frees `bytes` of them.
function fillLeaving(dir: string, bytes: number): void {
  const made: string[] = [];
  for (let i = 0; ; i++) {
    const f = join(dir, `fill-${i}`);
    try {
      writeFileSync(f, Buffer.alloc(4096));
      made.push(f);
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
      rmSync(f, { force: true });
      break;
    }
  }
  for (const f of made.slice(-(bytes / 4096))) rmSync(f);
}

async function tether(args: string[], env: NodeJS.ProcessEnv = process.env, node: string[] = []) {
  try {
    const { stdout, stderr } = await execFileP(process.execPath, [...node, CLI, ...args], {
      env,
      timeout: 30_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const spooled = (db: string) => (existsSync(spoolDirOf(db)) ? readdirSync(spoolDirOf(db)).sort() : []);

function listOf(db: string): Promise<{ tag: string; state: string }[]> {
  return tether(['ls', '--json', '--ledger', db]).then((r) => {
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout).sessions;
  });
}

describe('tether run through the spool', () => {
  it('records the session without loading SQLite; the next reader takes it in once', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const loads = join(dir, 'loads');
    // A preload that notes every module the CLI requires by name (better-sqlite3 is CommonJS:
    // an ESM import of it goes through Module._load too).
    const hook = join(dir, 'hook.cjs');
    writeFileSync(
      hook,
      `const M = require('node:module'); const fs = require('node:fs'); const load = M._load;
       M._load = function (request, ...rest) { fs.appendFileSync(${JSON.stringify(loads)}, request + '\\n'); return load.call(this, request, ...rest); };`,
    );
    const r = await tether(['run', '--ledger', db, '--', 'sh', '-c', 'exit 4'], process.env, ['-r', hook]);
    expect(r.code, r.stderr).toBe(4);
    expect(readFileSync(loads, 'utf8')).not.toMatch(/better-sqlite3/);
    expect(statSync(db).size, 'SQLite wrote the ledger file').toBe(0);
    const files = spooled(db);
    expect(files).toHaveLength(1);
    expect(files[0]).toMatch(/^TETHER_SESSION_[0-9a-f]{32}\.json$/);
    const row = JSON.parse(readFileSync(join(spoolDirOf(db), files[0] as string), 'utf8'));
    expect(row.state).toBe('failed');
    expect((statSync(join(spoolDirOf(db), files[0] as string)).mode & 0o777).toString(8)).toBe('600');
    expect((statSync(spoolDirOf(db)).mode & 0o777).toString(8)).toBe('700');

    const sessions = await listOf(db);
    expect(sessions.map((s) => [s.tag, s.state])).toEqual([[row.tag, 'failed']]);
    expect(spooled(db), 'the spool file stayed after it was taken in').toEqual([]);
    expect(await listOf(db)).toHaveLength(1);
  });

  it('a running session is taken in as running, and its end later replaces it', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const gate = join(dir, 'gate');
    const run = runNode([
      CLI,
      'run',
      '--ledger',
      db,
      '--',
      'sh',
      '-c',
      `while [ ! -e ${gate} ]; do sleep 0.05; done`,
    ]);
    await waitFor('the begin in the spool', () => spooled(db).length === 1, 15_000);
    expect((await listOf(db)).map((s) => s.state)).toEqual(['running']);
    expect(spooled(db)).toEqual([]);
    writeFileSync(gate, '');
    expect((await run.done).code).toBe(0);
    expect(spooled(db)).toHaveLength(1); // the end, written after the begin was taken in
    expect((await listOf(db)).map((s) => s.state)).toEqual(['succeeded']);
  });

  it('a supervisor SIGKILLed with its helper mid-run: recover takes in its spooled record and ends its leftover', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const pidfile = join(dir, 'left');
    const leave = `setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > ${pidfile}; exec sleep 600`;
    const run = runNode([CLI, 'run', '--ledger', db, '--', 'sh', '-c', leave]);
    await waitFor(
      'the leftover',
      () => existsSync(pidfile) && readFileSync(pidfile, 'utf8').trim() !== '',
      15_000,
    );
    const leftover = identityOf(Number(readFileSync(pidfile, 'utf8')));
    const supervisor = identityOf(run.child.pid ?? 0);
    if (!leftover || !supervisor) throw new Error('premise broken: the leftover or the supervisor is gone');
    started.push(leftover);
    // The supervisor and its helper, stopped first, then killed: nothing of tether runs after.
    const tree: ProcessId[] = [supervisor, ...childrenOf(supervisor.pid)];
    expect(tree.length, 'premise broken: no helper').toBeGreaterThan(1);
    // The payload (the helper's child) outlives the helper too: it is the test's to clean up.
    for (const helper of tree.slice(1)) started.push(...childrenOf(helper.pid));
    for (const p of tree) process.kill(p.pid, 'SIGSTOP');
    for (const p of tree) process.kill(p.pid, 'SIGKILL');
    await waitFor('the supervisor tree to be gone', () => tree.every((p) => !isAlive(p)), 5000);
    expect(isAlive(leftover), 'premise broken: the leftover died with its supervisor').toBe(true);
    expect(spooled(db)).toHaveLength(1);

    const r = await recoverCli(db);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json.sessions.map((s: { outcome: string }) => s.outcome)).toEqual(['recovered']);
    expect(isAlive(leftover), 'the leftover survived recover').toBe(false);
    expect((await listOf(db)).map((s) => s.state)).toEqual(['recovered']);
    expect(spooled(db)).toEqual([]);
  });

  it('a spool without its file is still the ledger: ls and show list its session, recover ends its leftover', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const aside = join(dir, 'aside');
    mkdirSync(aside);
    expect((await tether(['run', '--ledger', db, '--', 'true'])).code).toBe(0);
    expect(await listOf(db), 'premise broken: the first session not taken in').toHaveLength(1);
    const pidfile = join(dir, 'left');
    const leave = `setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > ${pidfile}; exec sleep 600`;
    const run = runNode([CLI, 'run', '--ledger', db, '--', 'sh', '-c', leave]);
    await waitFor(
      'the leftover',
      () => existsSync(pidfile) && readFileSync(pidfile, 'utf8').trim() !== '',
      15_000,
    );
    const leftover = identityOf(Number(readFileSync(pidfile, 'utf8')));
    const supervisor = identityOf(run.child.pid ?? 0);
    if (!leftover || !supervisor) throw new Error('premise broken: the leftover or the supervisor is gone');
    started.push(leftover);
    const tree: ProcessId[] = [supervisor, ...childrenOf(supervisor.pid)];
    expect(tree.length, 'premise broken: no helper').toBeGreaterThan(1);
    for (const helper of tree.slice(1)) started.push(...childrenOf(helper.pid));
    for (const p of tree) process.kill(p.pid, 'SIGSTOP');
    for (const p of tree) process.kill(p.pid, 'SIGKILL');
    await waitFor('the supervisor tree to be gone', () => tree.every((p) => !isAlive(p)), 5000);
    expect(isAlive(leftover), 'premise broken: the leftover died with its supervisor').toBe(true);
    const files = spooled(db);
    expect(files).toHaveLength(1);
    const tag = (files[0] as string).replace(/\.json$/, '');

    // The file breaks: the advice to move it aside names the spool, to be left where it is.
    writeFileSync(
      db,
      'not a database any more, and long enough to hold a header of a hundred bytes'.repeat(2),
    );
    const broken = await tether(['ls', '--ledger', db]);
    expect(broken.code).toBe(125);
    expect(broken.stderr).toMatch(/LEDGER_CORRUPT|cannot be read/);
    expect(broken.stderr).toContain(`leave its spool ${spoolDirOf(db)} where it is`);
    for (const f of readdirSync(dir).filter((f) => f.startsWith('ledger.db') && !f.endsWith('.spool')))
      renameSync(join(dir, f), join(aside, f));
    expect(existsSync(db)).toBe(false);

    const ls = await tether(['ls', '--ledger', db]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/running/);
    expect((await listOf(db)).map((s) => [s.tag, s.state])).toEqual([[tag, 'running']]);
    const show = await tether(['show', '--ledger', db, tag]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain(`${tag}  running`);

    const r = await recoverCli(db);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json.sessions.map((s: { tag: string; outcome: string }) => [s.tag, s.outcome])).toEqual([
      [tag, 'recovered'],
    ]);
    expect(isAlive(leftover), 'the leftover survived recover').toBe(false);
    expect((await listOf(db)).map((s) => s.state)).toEqual(['recovered']);
  });

  it('recover without a file moved aside: its spool alone is recovered (no file was ever read)', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const pidfile = join(dir, 'left');
    const leave = `setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > ${pidfile}; exec sleep 600`;
    const run = runNode([CLI, 'run', '--ledger', db, '--', 'sh', '-c', leave]);
    await waitFor(
      'the leftover',
      () => existsSync(pidfile) && readFileSync(pidfile, 'utf8').trim() !== '',
      15_000,
    );
    const leftover = identityOf(Number(readFileSync(pidfile, 'utf8')));
    const supervisor = identityOf(run.child.pid ?? 0);
    if (!leftover || !supervisor) throw new Error('premise broken: the leftover or the supervisor is gone');
    started.push(leftover);
    const tree: ProcessId[] = [supervisor, ...childrenOf(supervisor.pid)];
    for (const helper of tree.slice(1)) started.push(...childrenOf(helper.pid));
    for (const p of tree) process.kill(p.pid, 'SIGSTOP');
    for (const p of tree) process.kill(p.pid, 'SIGKILL');
    await waitFor('the supervisor tree to be gone', () => tree.every((p) => !isAlive(p)), 5000);
    expect(isAlive(leftover), 'premise broken: the leftover died with its supervisor').toBe(true);
    rmSync(db); // the empty file tether run made: only the spool is left
    expect(spooled(db)).toHaveLength(1);

    const r = await recoverCli(db);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json.sessions.map((s: { outcome: string }) => s.outcome)).toEqual(['recovered']);
    expect(isAlive(leftover), 'the leftover survived recover').toBe(false);
    expect(spooled(db)).toEqual([]);
  });

  it('no file and an empty spool (or none): ls and recover create nothing', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    mkdirSync(`${db}.spool`);
    const ls = await tether(['ls', '--ledger', db]);
    expect(ls.stdout).toContain(`no ledger at ${db}`);
    const r = await recoverCli(db);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json.sessions).toEqual([]);
    expect(existsSync(db)).toBe(false);
  });

  it('a full disk keeps ls, show and recover --dry-run reading what the file holds (no -shm can be made)', async () => {
    const dir = tempDir();
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=512k', 'tmpfs', dir]);
    mounts.push(dir);
    const db = join(dir, 'ledger.db');
    expect((await tether(['run', '--ledger', db, '--', 'sh', '-c', 'exit 3'])).code).toBe(3);
    const [first] = await listOf(db); // taken in; the last reader's close removes -wal and -shm
    expect(existsSync(`${db}-shm`), 'premise broken: the -shm outlived its readers').toBe(false);
    fillLeaving(dir, 4096); // less than the 32 KiB of a -shm
    const ls = await tether(['ls', '--json', '--ledger', db]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(
      JSON.parse(ls.stdout).sessions.map((s: { tag: string; state: string }) => [s.tag, s.state]),
    ).toEqual([[first?.tag, 'failed']]);
    const show = await tether(['show', '--last', '--ledger', db]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain(`${first?.tag}  failed`);
    const dry = await tether(['recover', '--dry-run', '--json', '--ledger', db]);
    expect(dry.code, dry.stderr).toBe(0);
  });

  it('a ledger reached through a symlink has one spool, beside the real file: every path sees the same records', async () => {
    const dir = tempDir();
    const real = join(dir, 'real.db');
    const link = join(dir, 'link.db');
    writeFileSync(real, '');
    symlinkSync(real, link);
    const r = await tether(['run', '--ledger', link, '--', 'true']);
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(`${link}.spool`), 'a second spool beside the link').toBe(false);
    expect(readdirSync(`${real}.spool`)).toHaveLength(1);
    expect((await listOf(real)).map((s) => s.state)).toEqual(['succeeded']);
    expect((await listOf(link)).map((s) => s.state)).toEqual(['succeeded']);
  });

  it('a required layer that cannot be had after the begin was written: 125, nothing ran, and the record ends failed', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const marker = join(dir, 'ran');
    const r = await tether(['run', '--containment', 'subreaper', '--ledger', db, '--', 'touch', marker], {
      ...process.env,
      TETHER_HELPER: '/bin/true', // a "helper" that exits at once, without a line
    });
    expect(r.code, r.stderr).toBe(125);
    expect(existsSync(marker)).toBe(false);
    const ledger = await Ledger.open(db);
    const [record, ...rest] = await ledger.list();
    await ledger.close();
    expect(rest).toEqual([]);
    expect(record?.state).toBe('failed');
    expect(record?.outcome?.error?.code).toBe('CONTAINMENT_UNAVAILABLE');
  });

  it('stops with 125 before the payload when the ledger file is not one it can record in', async () => {
    const dir = tempDir();
    const marker = join(dir, 'ran');
    const text = join(dir, 'notes.db');
    writeFileSync(text, 'these are my notes, not a database\n');
    const foreign = join(dir, 'foreign.db');
    const f = new Database(foreign);
    f.pragma('application_id = 1234');
    f.exec('CREATE TABLE t (x)');
    f.close();
    const newer = join(dir, 'newer.db');
    const n = new Database(newer);
    n.pragma('journal_mode = DELETE');
    n.pragma('user_version = 99');
    n.close();
    const blocked = join(dir, 'blocked.db');
    writeFileSync(blocked, '');
    writeFileSync(`${blocked}.spool`, 'a file where the spool directory goes');
    for (const [db, why] of [
      [text, /not a SQLite database/],
      [foreign, /another application's SQLite database \(application_id 1234\)/],
      [newer, /schema version is 99/],
      [blocked, /spool .* is not a directory/],
    ] as const) {
      const before = readFileSync(db);
      const r = await tether(['run', '--ledger', db, '--', 'touch', marker]);
      expect(r.code, r.stderr).toBe(125);
      expect(r.stderr).toContain(db);
      expect(r.stderr).toMatch(why);
      expect(existsSync(marker), `the payload ran with the ledger ${db}`).toBe(false);
      expect(readFileSync(db).equals(before), `${db} was written`).toBe(true);
    }
  });
});

describe('taking the spool in', () => {
  it('a record appears under its name only whole: the begin is linked, each later write renamed, never written in place', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const store = SpoolStore.open(db);
    const events: string[] = [];
    const watcher = watch(store.dir, (event, name) => {
      if (name && /^TETHER_SESSION_[0-9a-f]{32}\.json$/.test(name)) events.push(event);
    });
    const writer = new Ledger(store);
    const tag = createTag().name;
    await writer.begin({ tag, command: ['true'], location: { kind: 'local' } });
    await writer.end(tag, { exitCode: 0, signal: null, error: null }, 'succeeded');
    await new Promise((r) => setTimeout(r, 100)); // inotify's events are delivered on the loop
    watcher.close();
    expect(events.length, 'no event at all: the watch saw nothing').toBeGreaterThan(0);
    expect(
      events.filter((e) => e === 'change'),
      'a record name was written after it appeared',
    ).toEqual([]);
  });

  it('two readers racing over 100 spooled sessions take each in exactly once', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const writer = await Ledger.open(db, { spool: true });
    const tags = Array.from({ length: 100 }, () => createTag().name);
    for (const tag of tags) {
      await writer.begin({ tag, command: ['true'], location: { kind: 'local' } });
      await writer.end(tag, { exitCode: 0, signal: null, error: null }, 'succeeded');
    }
    expect(spooled(db)).toHaveLength(100);
    const reader = `import { Ledger } from ${JSON.stringify(join(ROOT, 'dist/ledger/index.js'))};
      const l = await Ledger.open(${JSON.stringify(db)}); const n = (await l.list()).length; await l.close(); console.log(n);`;
    const a = runNode(['--input-type=module', '-e', reader]);
    const b = runNode(['--input-type=module', '-e', reader]);
    const [ra, rb] = await Promise.all([a.done, b.done]);
    expect([ra.code, rb.code], ra.stderr + rb.stderr).toEqual([0, 0]);
    expect(spooled(db)).toEqual([]);
    const ledger = await Ledger.open(db);
    const records = await ledger.list();
    await ledger.close();
    expect(records.map((r) => r.tag).sort()).toEqual([...tags].sort());
    expect(new Set(records.map((r) => r.state))).toEqual(new Set(['succeeded']));
  });

  it("under the write lock every claim is taken over: a dead reader's, a live process's, a forged one; a live writer's write in progress is left", async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const writer = await Ledger.open(db, { spool: true });
    const dead = await goneSupervisor(); // a pid + start time that name nothing now
    const live = identityOf(process.ppid);
    if (!live) throw new Error('premise broken: no parent');
    const spool = spoolDirOf(db);
    const tags = [createTag().name, createTag().name, createTag().name];
    for (const tag of tags) {
      await writer.begin({ tag, command: ['true'], location: { kind: 'local' } });
      await writer.end(tag, { exitCode: 0, signal: null, error: null }, 'succeeded');
    }
    const [a = '', b = '', c = ''] = tags;
    renameSync(join(spool, `${a}.json`), join(spool, `${a}.json.claim-${dead.pid}-${dead.startTime}-0`));
    renameSync(join(spool, `${b}.json`), join(spool, `${b}.json.claim-${live.pid}-${live.startTime}-0`));
    renameSync(join(spool, `${c}.json`), join(spool, `${c}.json.claim-0-0-0`));
    const inProgress = `${createTag().name}.json.tmp-${live.pid}-${live.startTime}-0`;
    writeFileSync(join(spool, inProgress), '{"half": ');

    const ledger = await Ledger.open(db);
    for (const tag of tags) expect((await ledger.get(tag))?.state, tag).toBe('succeeded');
    expect(spooled(db)).toEqual([inProgress]);
    await ledger.close();
  });

  it('a reader that failed halfway (the ledger locked) leaves nothing stranded: its next read takes the file in', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const gate = join(dir, 'gate');
    const ledger = await Ledger.open(db, { busyTimeoutMs: 100 });
    const writer = await Ledger.open(db, { spool: true });
    const tag = createTag().name;
    await writer.begin({ tag, command: ['true'], location: { kind: 'local' } });
    const locker = runNode([
      '-e',
      `const D = require(${JSON.stringify(join(ROOT, 'node_modules/better-sqlite3'))});
       const db = new D(${JSON.stringify(db)}); db.exec('BEGIN EXCLUSIVE'); console.log('HOLDING');
       const t = setInterval(() => { if (require('node:fs').existsSync(${JSON.stringify(gate)})) { db.exec('COMMIT'); process.exit(0); } }, 20);
       setTimeout(() => process.exit(3), 20000);`,
    ]);
    await waitFor('the lock to be held', () => /HOLDING/.test(locker.stdout), 15_000);
    await expect(ledger.list()).rejects.toMatchObject({ code: 'LEDGER_LOCKED' });
    writeFileSync(gate, '');
    expect((await locker.done).code).toBe(0);
    expect((await ledger.get(tag))?.state).toBe('running');
    expect(spooled(db)).toEqual([]);
    await ledger.close();
  });

  it('recover waits for a reader holding a claim, and never records recovered over a spooled end', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const writer = await Ledger.open(db, { spool: true });
    const tag = createTag().name;
    const gate = join(dir, 'gate');
    const gone = await goneSupervisor();
    await writer.begin({ tag, command: ['true'], location: { kind: 'local' }, supervisor: gone });
    const reader = await Ledger.open(db);
    expect((await reader.get(tag))?.state).toBe('running'); // the begin taken in
    await reader.close();
    await writer.end(tag, { exitCode: 0, signal: null, error: null }, 'succeeded');
    // A reader mid-ingest: the write lock held, the end claimed and not yet applied.
    const spool = spoolDirOf(db);
    const holder = runNode([
      '-e',
      `const fs = require('node:fs'); const D = require(${JSON.stringify(join(ROOT, 'node_modules/better-sqlite3'))});
       const db = new D(${JSON.stringify(db)}); db.exec('BEGIN IMMEDIATE');
       const start = fs.readFileSync('/proc/self/stat', 'latin1').split(') ')[1].split(' ')[19];
       fs.renameSync(${JSON.stringify(join(spool, `${tag}.json`))}, ${JSON.stringify(join(spool, `${tag}.json.claim-`))} + process.pid + '-' + start + '-0');
       console.log('CLAIMED');
       setInterval(() => { if (fs.existsSync(${JSON.stringify(gate)})) { db.exec('ROLLBACK'); process.exit(0); } }, 20);
       setTimeout(() => process.exit(3), 20000);`,
    ]);
    await waitFor('the claim under the lock', () => /CLAIMED/.test(holder.stdout), 15_000);
    const recovering = recoverCli(db);
    await new Promise((r) => setTimeout(r, 500)); // recover is waiting for the lock by now
    writeFileSync(gate, '');
    expect((await holder.done).code, holder.stderr).toBe(0);
    const r = await recovering;
    expect(r.code, r.stderr).toBe(0);
    expect(r.json.sessions.filter((s: { tag: string }) => s.tag === tag)).toEqual([]);
    const after = await Ledger.open(db);
    expect((await after.get(tag))?.state).toBe('succeeded');
    await after.close();
  });

  it('keeps the transition table: an operator cancel beats a spooled failure, a spooled ambiguous end beats the cancel', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const writer = await Ledger.open(db, { spool: true });
    const ledger = await Ledger.open(db);
    const report = (n: number) =>
      ({ tag: 'x', ok: n === 1, complete: true, stopped: [], survivors: [], n }) as never;
    const a = createTag().name;
    const b = createTag().name;
    for (const tag of [a, b]) await writer.begin({ tag, command: ['true'], location: { kind: 'local' } });
    expect((await ledger.get(a))?.state).toBe('running'); // taken in
    await ledger.cancel(a);
    await ledger.cancel(b);
    await writer.end(a, { exitCode: 1, signal: null, error: null }, 'failed', report(1));
    await writer.end(b, { exitCode: null, signal: null, error: null }, 'ambiguous', report(2));
    const spooledEnd = readFileSync(join(spoolDirOf(db), `${b}.json`));
    const ra = await ledger.get(a);
    const rb = await ledger.get(b);
    expect([ra?.state, ra?.reports.length]).toEqual(['cancelled', 1]); // refused end, report kept
    expect([rb?.state, rb?.reports.length]).toEqual(['ambiguous', 1]);
    expect(await ledger.canRetry(b)).toBe(false);
    // The same end taken in again (a copy a dead reader had claimed) changes nothing.
    const before = await ledger.get(b);
    writeFileSync(join(spoolDirOf(db), `${b}.json`), spooledEnd);
    const again = await ledger.get(b);
    expect(again).toEqual(before);
    expect(spooled(db)).toEqual([]);
    await ledger.close();
  });

  it('a spooled file that is no record is set aside byte for byte and named on every list; the rest are taken in', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const writer = await Ledger.open(db, { spool: true });
    const good = createTag().name;
    await writer.begin({ tag: good, command: ['true'], location: { kind: 'local' } });
    const bad = createTag().name;
    writeFileSync(join(spoolDirOf(db), `${bad}.json`), '{"tag": "half a rec');
    const ledger = await Ledger.open(db);
    for (let i = 0; i < 2; i++) {
      const corrupt: CorruptRow[] = [];
      const records = await ledger.list({ onCorrupt: (row) => corrupt.push(row) });
      expect(records.map((r) => r.tag)).toEqual([good]);
      expect(corrupt.map((c) => c.tag)).toEqual([bad]);
    }
    const aside = spooled(db);
    expect(aside).toHaveLength(1);
    expect(aside[0]).toMatch(new RegExp(`^${bad}\\.json\\.corrupt-`));
    expect(readFileSync(join(spoolDirOf(db), aside[0] as string), 'utf8')).toBe('{"tag": "half a rec');
    const ls = await tether(['ls', '--ledger', db]);
    expect(ls.stderr).toContain(bad);
    await ledger.close();
  });

  it('a FIFO, a directory, a symlink, a socket and an oversized file in the spool are set aside without blocking, following or reading', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    SpoolStore.open(db);
    const spool = spoolDirOf(db);
    const [fifo, directory, link] = [createTag().name, createTag().name, createTag().name];
    execFileSync('mkfifo', [join(spool, `${fifo}.json`)]);
    mkdirSync(join(spool, `${directory}.json`));
    const target = join(dir, 'elsewhere');
    writeFileSync(target, 'not spooled by tether');
    symlinkSync(target, join(spool, `${link}.json`));
    // A socket (open(2): ENXIO) and a sparse file past MAX_SPOOL_FILE_BYTES (never read).
    const [socket, huge] = [createTag().name, createTag().name];
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(join(spool, `${socket}.json`), resolve));
    const fd = openSync(join(spool, `${huge}.json`), 'w');
    ftruncateSync(fd, MAX_SPOOL_FILE_BYTES + 1);
    closeSync(fd);
    const good = createTag().name;
    await new Ledger(SpoolStore.open(db)).begin({
      tag: good,
      command: ['true'],
      location: { kind: 'local' },
    });
    const ledger = await Ledger.open(db);
    const corrupt: CorruptRow[] = [];
    expect((await ledger.list({ onCorrupt: (row) => corrupt.push(row) })).map((r) => r.tag)).toEqual([good]);
    server.close();
    expect(corrupt.map((c) => c.tag).sort()).toEqual([fifo, directory, link, socket, huge].sort());
    expect(spooled(db).every((f) => f.includes('.corrupt-'))).toBe(true);
    expect(readFileSync(target, 'utf8')).toBe('not spooled by tether');
    await ledger.close();
  });

  it('a spool directory that is a symbolic link is never followed: LEDGER_UNAVAILABLE, and what it points to is left', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const elsewhere = join(dir, 'elsewhere');
    mkdirSync(elsewhere);
    const other = await Ledger.open(join(dir, 'other.db'), { spool: true });
    const tag = createTag().name;
    await other.begin({ tag, command: ['true'], location: { kind: 'local' } });
    renameSync(join(spoolDirOf(join(dir, 'other.db')), `${tag}.json`), join(elsewhere, `${tag}.json`));
    symlinkSync(elsewhere, spoolDirOf(db));
    const ledger = await Ledger.open(db);
    await expect(ledger.list()).rejects.toMatchObject({
      code: 'LEDGER_UNAVAILABLE',
      message: expect.stringContaining('is not a directory (a symbolic link is never followed)'),
    });
    expect(readdirSync(elsewhere)).toEqual([`${tag}.json`]);
    await ledger.close();
  });

  it('a spooled record whose tag the ledger holds as another session is set aside, not merged', async () => {
    const dir = tempDir();
    const db = join(dir, 'ledger.db');
    const ledger = await Ledger.open(db);
    const tag = createTag().name;
    await beginOrphaned(ledger, tag, { command: ['first'] });
    const writer = await Ledger.open(db, { spool: true });
    await writer.begin({ tag, command: ['second'], location: { kind: 'local' } });
    await writer.end(tag, { exitCode: 0, signal: null, error: null }, 'succeeded');
    const corrupt: CorruptRow[] = [];
    const records = await ledger.list({ onCorrupt: (row) => corrupt.push(row) });
    expect(records.map((r) => [r.command, r.state])).toEqual([[['first'], 'running']]);
    expect(corrupt.map((c) => c.problem).join()).toMatch(/already in the ledger as another session/);
    expect(spooled(db)[0]).toMatch(/\.conflict-/);
    await ledger.close();
  });

  it('a nearly full filesystem: a begin that does not fit stops the run (125) and leaves no partial record', async () => {
    const dir = smallTmpfs();
    const db = join(dir, 'ledger.db');
    SpoolStore.open(db); // the spool directory exists; then the filesystem fills up
    fillLeaving(dir, 8192);
    const marker = join(tempDir(), 'ran');
    const long = 'x'.repeat(30_000); // the begin (its argv) is larger than what is left
    const r = await tether(['run', '--ledger', db, '--', 'sh', '-c', `touch ${marker}`, long]);
    expect(r.code, r.stderr).toBe(125);
    expect(r.stderr).toContain(`spool ${spoolDirOf(db)} cannot be written`);
    expect(r.stderr).toMatch(/ENOSPC/);
    expect(existsSync(marker), 'the payload ran with a full spool').toBe(false);
    expect(spooled(db), 'a partial record was left').toEqual([]);
  });

  // `tether run --ledger DB [extra]` on a small tmpfs whose end does not fit: the begin fits; the
  // payload leaves 100 processes (the end's report names each: well over 8 KiB) and fills the
  // filesystem to 8 KiB free, so the end's write is short, then ENOSPC.
  async function endThatDoesNotFit(extra: string[]) {
    const dir = smallTmpfs();
    const db = join(dir, 'ledger.db');
    const fill = `i=0; while dd if=/dev/zero of=${dir}/f$i bs=4096 count=1 2>/dev/null; do i=$((i+1)); done; rm -f ${dir}/f$i ${dir}/f0 ${dir}/f1`;
    const leave = 'for i in $(seq 100); do setsid sleep 60 </dev/null >/dev/null 2>&1 & done';
    const r = await tether(['run', '--ledger', db, ...extra, '--', 'sh', '-c', `${leave}; ${fill}; exit 0`]);
    return { db, r };
  }

  it('an end that does not fit is a LEDGER_WRITE_FAILED warning, and the begin stays whole for recover', async () => {
    const { db, r } = await endThatDoesNotFit(['--json']);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stderr.trim().split('\n').at(-1) ?? ''); // --json: the report on stderr
    expect(report.stopped.length).toBe(100);
    expect(report.warnings.map((w: { code: string }) => w.code)).toContain('LEDGER_WRITE_FAILED');
    const files = spooled(db);
    expect(files).toHaveLength(1);
    const row = JSON.parse(readFileSync(join(spoolDirOf(db), files[0] as string), 'utf8'));
    expect(row.state).toBe('running');
  });

  it('an end that does not fit is said, and tether run never says the session was recorded', async () => {
    const { r } = await endThatDoesNotFit([]); // the table instead of --json
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr, 'premise broken: the end was written').toMatch(/was not recorded/);
    expect(r.stderr).not.toMatch(/recorded in /);
  });
});
