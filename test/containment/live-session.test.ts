// The live-session registration (src/containment/live-session.ts): a file is evidence only while
// the supervisor it names (pid + start time) is alive in this boot and PID namespace, does not
// carry the tag, owns the file and holds it open. Real files in a temp directory, real processes;
// a forged file of each shape is no sign.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  holdsOpen,
  liveSupervisors,
  PRUNE_INTERVAL_MS,
  readSessionRegistrations,
  registerSession,
  sessionsDir,
  viewSessions,
} from '../../src/containment/live-session.js';
import { takeSnapshot } from '../../src/proc/snapshot.js';
import { createTag } from '../../src/proc/tag.js';
import { ROOT } from '../support/paths.js';
import { identityOf, type ProcessId } from '../support/proc.js';
import { cleanup, started, tempDir, waitFor } from '../support/zoo.js';

afterEach(() => cleanup());

const signsOf = (dir: string, tag: string) =>
  liveSupervisors(viewSessions(takeSnapshot()), readSessionRegistrations(dir)).get(tag) ?? [];

// A line as registerSession writes it, with the boot id and PID namespace of the file at `own`.
function forge(
  own: string,
  tag: string,
  id: ProcessId,
  fields: { bootId?: string; ns?: string } = {},
): string {
  const dir = own.slice(0, own.lastIndexOf('/'));
  const [, , , , , bootId, ns] = readFileSync(own, 'latin1').trim().split(' ');
  const hex = tag.slice('TETHER_SESSION_'.length);
  const path = join(dir, `${hex}.${id.pid}.${id.startTime}.1`);
  const line = ['tether-session', '1', tag, id.pid, id.startTime, fields.bootId ?? bootId, fields.ns ?? ns];
  writeFileSync(path, `${line.join(' ')}\n`);
  return path;
}

function sleeper(env: NodeJS.ProcessEnv = process.env): ProcessId {
  const child = spawn('sleep', ['600'], { stdio: 'ignore', env });
  const id = identityOf(child.pid ?? 0);
  if (!id) throw new Error('premise broken: the sleeper has no /proc entry');
  started.push(id);
  return id;
}

// An untagged `sleep 600` that holds open the file whose path it is given on its stdin (fd 3): a
// process that names itself in a registration and keeps it, as `registerSession`'s writer does.
function holder(): { id: ProcessId; hold: (path: string) => Promise<void> } {
  const child = spawn('sh', ['-c', 'read p; exec sleep 600 3<"$p"'], { stdio: ['pipe', 'ignore', 'ignore'] });
  const id = identityOf(child.pid ?? 0);
  if (!id) throw new Error('premise broken: the holder has no /proc entry');
  started.push(id);
  return {
    id,
    hold: async (path) => {
      child.stdin?.end(`${path}\n`);
      await waitFor(`pid ${id.pid} to hold ${path}`, () => holdsOpen('/proc', id.pid, path));
    },
  };
}

// The identity of a process this test started and that has exited since.
async function goneIdentity(): Promise<ProcessId> {
  const child = spawn('sleep', ['600'], { stdio: 'ignore' });
  const id = identityOf(child.pid ?? 0);
  if (!id) throw new Error('premise broken: the short-lived process has no /proc entry');
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
  return id;
}

describe('a live-session registration', () => {
  it('is a sign while its supervisor lives, and none once removed', () => {
    const dir = join(tempDir(), 'sessions');
    const tag = createTag().name;
    const registered = registerSession(tag, dir);
    expect(existsSync(registered.path)).toBe(true);
    const signs = signsOf(dir, tag);
    expect(signs.map((s) => [s.kind, s.supervisor])).toEqual([['registration', process.pid]]);
    expect(signs[0]?.reason).toContain(`supervisor pid ${process.pid} (registered in ${registered.path})`);
    registered.remove();
    expect(existsSync(registered.path)).toBe(false);
    expect(signsOf(dir, tag)).toEqual([]);
  });

  it('naming a dead pid, a process that carries the tag, PID 1, another boot or PID namespace, is no sign', async () => {
    const dir = join(tempDir(), 'sessions');
    const own = registerSession(createTag().name, dir); // this process's ids, for the forged lines
    const tags = Array.from({ length: 5 }, () => createTag().name);
    const goneId = await goneIdentity();
    forge(own.path, tags[0] as string, goneId);
    const carrier = sleeper({ ...process.env, [tags[1] as string]: '1' });
    forge(own.path, tags[1] as string, carrier);
    forge(own.path, tags[2] as string, identityOf(1) as ProcessId);
    const other = sleeper();
    forge(own.path, tags[3] as string, other, { bootId: '00000000-0000-0000-0000-000000000000' });
    forge(own.path, tags[4] as string, other, { ns: '1' });
    for (const tag of tags) expect(signsOf(dir, tag), `${tag} is live by a forged file`).toEqual([]);
    // The same untagged sleeper, with this boot and namespace: it does not hold the file (a
    // leftover could name any process of its uid). An untagged process that holds its file is
    // taken for a supervisor.
    const unheld = createTag().name;
    forge(own.path, unheld, other);
    expect(signsOf(dir, unheld), 'a file its named process does not hold is a sign').toEqual([]);
    const honest = createTag().name;
    const h = holder();
    await h.hold(forge(own.path, honest, h.id));
    const signs = signsOf(dir, honest);
    expect(signs.map((s) => s.supervisor)).toEqual([h.id.pid]);
    expect(signs[0]?.started).toEqual({ supervisor: h.id.startTime });
    own.remove();
  });

  it('is held open by its writer until remove(), which closes it; its helper and payload never inherit it', async () => {
    const dir = join(tempDir(), 'sessions');
    const tag = createTag().name;
    const registered = registerSession(tag, dir);
    expect(holdsOpen('/proc', process.pid, registered.path), 'the writer does not hold its file').toBe(true);
    const child = sleeper();
    expect(holdsOpen('/proc', child.pid, registered.path), 'a child inherited the registration').toBe(false);
    registered.remove();
    expect(holdsOpen('/proc', process.pid, registered.path), 'remove() left the file open').toBe(false);
    const links = readdirSync(`/proc/${process.pid}/fd`).map((fd) => {
      try {
        return readlinkSync(`/proc/${process.pid}/fd/${fd}`);
      } catch {
        return '';
      }
    });
    expect(
      links.filter((l) => l.startsWith(registered.path)),
      'remove() left an fd on the file',
    ).toEqual([]);
  });

  it.skipIf(process.getuid?.() !== 0)(
    "of a SIGKILLed supervisor whose pid a new process took, holding the file open, is no sign (a PID namespace's own allocator)",
    () => {
      const dir = join(tempDir(), 'sessions');
      const tag = createTag().name;
      const script = join(tempDir(), 'reuse.mjs');
      const live = join(ROOT, 'dist/containment/live-session.js');
      const snapshot = join(ROOT, 'dist/proc/snapshot.js');
      writeFileSync(
        script,
        `import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { once } from 'node:events';
const live = await import(${JSON.stringify(live)});
const { takeSnapshot } = await import(${JSON.stringify(snapshot)});
const [dir, tag] = process.argv.slice(2);
// The supervisor: registers the session (and holds its file), says where, and waits.
const sup = spawn(process.execPath, ['--input-type=module', '-e',
  'const l = await import(process.argv[1]); console.log(l.registerSession(process.argv[2], process.argv[3]).path); setInterval(() => {}, 1000);',
  ${JSON.stringify(live)}, tag, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
let path = '';
for await (const chunk of sup.stdout) { path += chunk; if (path.endsWith('\\n')) break; }
path = path.trim();
const before = live.liveSupervisors(live.viewSessions(takeSnapshot()), live.readSessionRegistrations(dir)).get(tag) ?? [];
sup.kill('SIGKILL');
await once(sup, 'exit');
// A new process takes the dead supervisor's pid (this namespace's allocator, moved by hand) and
// holds its registration open, with no tag.
let taker;
for (let i = 0; i < 20 && !taker; i++) {
  writeFileSync('/proc/sys/kernel/ns_last_pid', String(sup.pid - 1));
  const c = spawn('sh', ['-c', 'exec sleep 600 3<"$0"', path], { stdio: 'ignore', env: { PATH: process.env.PATH } });
  if (c.pid === sup.pid) taker = c;
  else c.kill('SIGKILL');
}
let held = false;
for (let i = 0; i < 200 && taker && !held; i++) {
  try { held = (await import('node:fs')).readlinkSync('/proc/' + taker.pid + '/fd/3') === path; } catch {}
  if (!held) await new Promise((r) => setTimeout(r, 10));
}
const after = live.liveSupervisors(live.viewSessions(takeSnapshot()), live.readSessionRegistrations(dir)).get(tag) ?? [];
console.log(JSON.stringify({ before: before.map((s) => s.supervisor), pid: sup.pid, reused: taker !== undefined, held, after }));
taker?.kill('SIGKILL');
`,
      );
      const r = spawnSync(
        'unshare',
        ['--pid', '--fork', '--kill-child', '--mount-proc', process.execPath, script, dir, tag],
        {
          encoding: 'utf8',
          timeout: 60_000,
        },
      );
      const out = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? 'null') as {
        before: number[];
        pid: number;
        reused: boolean;
        held: boolean;
        after: unknown[];
      } | null;
      expect(out, `the namespace script failed: ${r.stderr}`).not.toBeNull();
      expect(out?.before, 'premise: the live supervisor is a sign').toEqual([out?.pid]);
      expect(out?.reused, 'premise: a new process took the dead supervisor’s pid').toBe(true);
      expect(out?.held, 'premise: it holds the dead supervisor’s registration open').toBe(true);
      expect(out?.after, 'the dead supervisor’s reused pid is a sign').toEqual([]);
    },
  );

  it('is read only from a regular file of at most 512 bytes; a symlink or a FIFO is skipped', () => {
    const dir = join(tempDir(), 'sessions');
    const own = registerSession(createTag().name, dir);
    const big = createTag().name;
    const path = forge(own.path, big, identityOf(process.pid) as ProcessId);
    writeFileSync(path, `${readFileSync(path, 'latin1').trim()}${' '.repeat(600)}\n`);
    const linked = createTag().name;
    const target = forge(own.path, linked, identityOf(process.pid) as ProcessId);
    const elsewhere = join(tempDir(), 'real');
    writeFileSync(elsewhere, readFileSync(target));
    const name = target.slice(dir.length + 1);
    unlinkSync(target);
    symlinkSync(elsewhere, join(dir, name));
    const fifo = createTag().name;
    const fifoPath = forge(own.path, fifo, identityOf(process.pid) as ProcessId);
    unlinkSync(fifoPath);
    execFileSync('mkfifo', [fifoPath]);
    for (const tag of [big, linked, fifo]) expect(signsOf(dir, tag)).toEqual([]);
    own.remove();
  });

  it('of two calls under one tag in one process are two: the first to end leaves the other', () => {
    const dir = join(tempDir(), 'sessions');
    const tag = createTag().name;
    const first = registerSession(tag, dir);
    const second = registerSession(tag, dir);
    expect(first.path).not.toBe(second.path);
    first.remove();
    expect(signsOf(dir, tag).map((s) => s.supervisor)).toEqual([process.pid]);
    second.remove();
    expect(signsOf(dir, tag)).toEqual([]);
  });

  it("of a gone supervisor is removed at another session's end", async () => {
    const dir = join(tempDir(), 'sessions');
    mkdirSync(dir);
    const own = registerSession(createTag().name, dir);
    const goneId = await goneIdentity();
    const stale = forge(own.path, createTag().name, goneId);
    const live = forge(own.path, createTag().name, sleeper());
    const next = registerSession(createTag().name, dir);
    expect(existsSync(stale), 'premise: the stale file is there').toBe(true);
    next.remove();
    expect(existsSync(stale), 'a gone supervisor’s file was kept').toBe(false);
    expect(existsSync(live), 'a live supervisor’s file was removed').toBe(true);
    expect(existsSync(own.path), 'a live supervisor’s file was removed').toBe(true);
    own.remove();
  });

  it('is looked for stale files once per PRUNE_INTERVAL_MS in a directory by one process', async () => {
    const dir = join(tempDir(), 'sessions');
    mkdirSync(dir);
    const first = registerSession(createTag().name, dir);
    first.remove(); // the first look in this directory
    const goneId = await goneIdentity();
    const other = registerSession(createTag().name, dir);
    const stale = forge(other.path, createTag().name, goneId);
    other.remove(); // within the interval: no second look (a tool command's end each time)
    expect(existsSync(stale), 'looked again within the interval').toBe(true);
    expect(PRUNE_INTERVAL_MS).toBeGreaterThan(0);
    // Another directory is its own: its first end looks.
    const elsewhere = join(tempDir(), 'sessions');
    mkdirSync(elsewhere);
    const own = registerSession(createTag().name, elsewhere);
    const staleThere = forge(own.path, createTag().name, goneId);
    const next = registerSession(createTag().name, elsewhere);
    next.remove();
    expect(existsSync(staleThere), 'a gone supervisor’s file was kept').toBe(false);
    own.remove();
  });

  it('is written only into a private directory of this uid: a symlink or a group-writable one is refused', () => {
    const base = tempDir();
    const real = join(base, 'real');
    mkdirSync(real, { mode: 0o700 });
    const link = join(base, 'link');
    symlinkSync(real, link);
    expect(() => registerSession(createTag().name, link)).toThrow(/not a private directory/);
    const open = join(base, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    expect(() => registerSession(createTag().name, open)).toThrow(/not a private directory.*mode 777/);
    expect(readdirSync(real)).toEqual([]);
    expect(readdirSync(open)).toEqual([]);
  });

  it('lives in TETHER_SESSIONS_DIR, else XDG_RUNTIME_DIR/tether/sessions, else /run/tether/sessions for root', () => {
    expect(sessionsDir({ TETHER_SESSIONS_DIR: '/x/y', XDG_RUNTIME_DIR: '/run/user/7' }, 7)).toBe('/x/y');
    expect(sessionsDir({ TETHER_SESSIONS_DIR: 'relative', XDG_RUNTIME_DIR: '/run/user/7' }, 7)).toBe(
      '/run/user/7/tether/sessions',
    );
    expect(sessionsDir({}, 0)).toBe('/run/tether/sessions');
    expect(sessionsDir({}, 1000)).toMatch(/\/tether-1000\/sessions$/);
  });
});
