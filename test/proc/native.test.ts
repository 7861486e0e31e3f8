// The native scan loop (native/scan.c through src/proc/native.ts) and the JS path read the same
// real processes to the same results: the snapshot's stat fields, environ entries (a tagged
// process, an untagged one, decoys, an environ bomb past the byte budget, a zombie leader whose
// environ is read through a live thread), the report details, a batch of cmdlines (a zombie's,
// a gone pid's, one past the cap), a process table larger than the first buffer, and a whole
// scan.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag } from '../../src/index.js';
import {
  CMDLINE_CAP_BYTES,
  CMDLINE_TRUNCATED_MARK,
  readCmdline,
  readCmdlines,
  readDetails,
  readUid,
} from '../../src/proc/details.js';
import { type EnvironRead, readEnviron, readEnvirons } from '../../src/proc/environ.js';
import { type Identity, identityOf, readStat } from '../../src/proc/identity.js';
import { nativeProc, useNativeProc } from '../../src/proc/native.js';
import { ancestorsOf, takeSnapshot } from '../../src/proc/snapshot.js';
import type { ProcStat } from '../../src/proc/stat.js';
import { type ScanContext, scanSession } from '../../src/sweep/scan.js';
import { createSignaller, type Evidence, type Hold, releaseHold } from '../../src/sweep/signal.js';
import { BUILD } from '../support/paths.js';
import { readPidfile, startSleeper, startTagDecoys, tempDir, waitFor } from '../support/zoo.js';

const MIB = 1024 * 1024;
const tag = createTag();
const children: ChildProcess[] = [];
const ours: Identity[] = [];

// Ground truth, read here and not through src/: state and start time of a pid.
function statFields(pid: number): string[] | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

function track(child: ChildProcess): Identity {
  children.push(child);
  const id = child.pid === undefined ? undefined : identityOf(child.pid);
  if (!id) throw new Error('premise broken: a fixture did not start');
  ours.push(id);
  return id;
}

// The order of a walk is not something the two paths share: the JS walk lists /proc in
// readdirSync's order, names sorted as strings ("10" before "9"), the native one in the kernel's,
// by number. Their results are compared order-free: pid lists and stats sorted by pid.
const byNumber = (a: number, b: number) => a - b;
const sortPids = (pids: readonly number[] | undefined) => (pids ? [...pids].sort(byNumber) : pids);
const sortStats = <T extends { pid: number }>(stats: T[]) => [...stats].sort((a, b) => a.pid - b.pid);
/** A children map as sorted `[ppid, sorted children]` entries. */
const childEntries = (children: Iterable<readonly [number, readonly number[]]>) =>
  [...children].map(([ppid, kids]) => [ppid, sortPids(kids)] as const).sort((a, b) => a[0] - b[0]);

/** Runs `f` on the JS path, then on the native one; returns both results. */
function both<T>(f: () => T): { js: T; native: T } {
  const was = useNativeProc(false);
  try {
    const js = f();
    useNativeProc(true);
    return { js, native: f() };
  } finally {
    useNativeProc(was);
  }
}

let bomb: Identity;
let leader: Identity;
let tagged1: Identity;
let untagged: Identity;
let shell: Identity;
let shellChild: Identity;
let otherUid: Identity;

beforeAll(async () => {
  const base = { PATH: process.env.PATH };
  const tagged = { ...base, [tag.name]: '1' };
  for (const label of ['tagged 1', 'tagged 2'])
    ours.push((await startSleeper(label, tagged, tag.entry)).identity);
  tagged1 = ours[0] as Identity;
  untagged = (await startSleeper('untagged', { ...base, TETHER_TEST_PLAIN: '1' }, 'TETHER_TEST_PLAIN=1'))
    .identity;
  ours.push(untagged);
  for (const d of await startTagDecoys(tag.name)) {
    ours.push(d.identity);
    if (d.child) children.push(d.child);
  }
  // A tagged shell with a child: found as carrier, the child by parent too.
  shell = track(spawn('sh', ['-c', 'sleep 1000 & wait'], { env: tagged, stdio: 'ignore' }));
  // An environ bomb of 8 MiB (past the 6 MiB budget) that writes its own entry at byte 100.
  const pidfile = join(tempDir(), 'pids');
  bomb = track(
    spawn(join(BUILD, 'zoo-environ-bomb'), ['8', pidfile, '-', 'fg', '100'], {
      env: tagged,
      stdio: 'ignore',
    }),
  );
  await waitFor('the bomb to move its environ', () => {
    const f = statFields(bomb.pid);
    return f !== undefined && Number(f[48]) - Number(f[47]) === 8 * MIB;
  });
  // A zombie leader with a live thread: its environ is read through task/<tid>/environ.
  leader = track(spawn(join(BUILD, 'zoo-thread-leader'), [], { env: tagged, stdio: 'ignore' }));
  await waitFor('the leader thread to exit', () => statFields(leader.pid)?.[0] === 'Z');
  await waitFor(
    'the shell to fork its sleep',
    () => (takeSnapshot().children.get(shell.pid)?.length ?? 0) > 0,
  );
  expect(readPidfile(pidfile).length, 'premise broken: the bomb recorded itself').toBe(1);
  // A tagged process whose real uid (65534) is not its effective uid (65533): the report's uid
  // is the real one, status' first `Uid:` field.
  otherUid = track(
    spawn('setpriv', ['--ruid', '65534', '--euid', '65533', '--clear-groups', 'sleep', '1000'], {
      env: tagged,
      stdio: 'ignore',
    }),
  );
  await waitFor(
    'setpriv to exec its sleep',
    () => readFileSync(`/proc/${otherUid.pid}/comm`, 'latin1') === 'sleep\n',
  );
  const child = takeSnapshot().children.get(shell.pid)?.[0];
  const childId = child === undefined ? undefined : identityOf(child);
  if (!childId) throw new Error('premise broken: the shell has no child');
  shellChild = childId;
  ours.push(shellChild);
});

afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const id of ours) {
    const f = statFields(id.pid);
    if (f && f[0] !== 'Z' && Number(f[19]) === id.startTime) process.kill(id.pid, 'SIGKILL');
  }
});

describe('the native scan loop', () => {
  it('is built and loads on this machine (the build has a compiler)', () => {
    const was = useNativeProc(true);
    try {
      expect(nativeProc()).not.toBeNull();
    } finally {
      useNativeProc(was);
    }
  });

  it('reads the same stat fields and parent links as the JS path', () => {
    const { js, native } = both(() => {
      const s = takeSnapshot();
      const mine = (pid: number) => ours.some((id) => id.pid === pid);
      return {
        stats: sortStats([...s.processes.values()].filter((p) => mine(p.pid))),
        children: childEntries([...s.children].filter(([pid]) => mine(pid))),
        one: ours.map((id) => readStat('/proc', id.pid)),
        gone: readStat('/proc', 0x3fffffff),
      };
    });
    expect(native.stats.length).toBe(ours.length);
    expect(native).toEqual(js);
    expect(native.gone).toBeUndefined();
  });

  it('reads the same environ entries, budgets and fallbacks as the JS path', () => {
    const pids = ours.map((id) => id.pid);
    const exited = pids.map((pid) => statFields(pid)?.[0] === 'Z');
    const { js, native } = both(() => ({
      batch: readEnvirons('/proc', pids, exited),
      each: pids.map((pid, i) => readEnviron('/proc', pid, exited[i] === true)),
      gone: readEnviron('/proc', 0x3fffffff, false),
    }));
    expect(native).toEqual(js);
    const at = (id: Identity) => native.batch[pids.indexOf(id.pid)];
    expect(at(bomb)).toMatchObject({ kind: 'ok', entries: [tag.entry], oversized: true });
    expect(at(leader)).toMatchObject({ kind: 'ok', entries: [tag.entry], oversized: false });
    // The two sleeps, the shell and its child, the bomb, the leader, the other uid's sleep.
    expect(native.batch.filter((r) => r.kind === 'ok' && r.entries.includes(tag.entry)).length).toBe(7);
    expect(native.gone).toEqual({ kind: 'gone' });
  });

  it('reads the same uid and cmdline as readUid and readCmdline', () => {
    const js = ours.map((id) => ({ uid: readUid('/proc', id.pid), cmdline: readCmdline('/proc', id.pid) }));
    const native = ours.map((id) => readDetails('/proc', id.pid));
    expect(native).toEqual(js);
    expect(native[0]?.cmdline).toBe('sleep 1000');
    expect(native[0]?.uid).toBe(process.getuid?.());
    // The bomb's cmdline is cut at the 4 KiB cap.
    expect(native[ours.indexOf(bomb)]?.cmdline?.endsWith('\u2026')).toBe(true);
  });

  it('reads a batch of cmdlines as readCmdline reads each: normal, zombie, gone, past the cap', async () => {
    // A zombie: the shell's `sleep 0` exits under a parent that execs `sleep 1000` and never waits.
    const parent = track(spawn('sh', ['-c', 'sleep 0 & exec sleep 1000'], { stdio: 'ignore' }));
    let zombie = 0;
    await waitFor('the unreaped child to be a zombie', () => {
      const kids = takeSnapshot().children.get(parent.pid) ?? [];
      zombie = kids.find((pid) => statFields(pid)?.[0] === 'Z') ?? 0;
      return zombie > 0 && readFileSync(`/proc/${parent.pid}/comm`, 'latin1') === 'sleep\n';
    });
    const gone = 0x3fffffff;
    // The bomb 40 times over: 40 reads of the cap and its extra byte outgrow the 64 KiB text
    // buffer, so the batch is read in more than one call.
    const pids = [
      tagged1.pid,
      zombie,
      gone,
      bomb.pid,
      ...ours.map((id) => id.pid),
      ...Array(40).fill(bomb.pid),
    ];
    const { js, native } = both(() => readCmdlines('/proc', pids));
    expect(native).toEqual(js);
    expect(native).toEqual(pids.map((pid) => readCmdline('/proc', pid)));
    expect(native.slice(0, 3)).toEqual(['sleep 1000', '', undefined]);
    const cut = native[3];
    expect(cut?.startsWith('environ-bomb xxx'), `the bomb's cmdline "${cut?.slice(0, 40)}"`).toBe(true);
    expect(cut?.length).toBe(CMDLINE_CAP_BYTES + 1);
    expect(cut?.endsWith(CMDLINE_TRUNCATED_MARK)).toBe(true);
    expect(statFields(zombie)?.[0], 'premise broken: the zombie was reaped').toBe('Z');
    // Ground truth, read here: the sleep's own argv.
    expect(readFileSync(`/proc/${tagged1.pid}/cmdline`, 'latin1')).toBe('sleep\x001000\x00');
  });

  it('reads a stat whose comm holds ") " and a newline whole, in a walk and alone', async () => {
    // The native stat read stops at a read that ends in a newline (native/scan.c `read_stat`):
    // a comm that holds one, followed by what looks like fields, must not cut the line short.
    const dir = tempDir();
    const name = 'x) S\n1 2 3';
    symlinkSync('/usr/bin/sleep', join(dir, name));
    const odd = track(spawn(join(dir, name), ['1000'], { stdio: 'ignore' }));
    // Asleep: a state read while it still runs its start (R) differs between the reads compared.
    await waitFor('the sleep to sleep', () => statFields(odd.pid)?.[0] === 'S');
    const truth = statFields(odd.pid);
    expect(readFileSync(`/proc/${odd.pid}/comm`, 'latin1'), 'premise broken: the comm').toBe(`${name}\n`);
    const { js, native } = both(() => ({
      walked: takeSnapshot().processes.get(odd.pid),
      alone: readStat('/proc', odd.pid),
    }));
    expect(native).toEqual(js);
    expect(native.alone).toEqual(native.walked);
    expect(native.alone?.comm).toBe(name);
    expect(native.alone?.ppid).toBe(process.pid);
    expect(native.alone?.startTime).toBe(Number(truth?.[19]));
    expect(native.alone?.startTime).toBe(odd.startTime);
  });

  it('walks a process table larger than its first buffer once, to the same stats', () => {
    // A fake procfs of 1,500 processes with 180-byte names: 256-byte records, 375 KiB of them,
    // more than the native path's first 256 KiB buffer.
    const root = tempDir();
    const line = readFileSync(`/proc/${process.pid}/stat`, 'latin1');
    const rest = line.slice(line.lastIndexOf(')'));
    const comm = (pid: number) => `${pid}-${'n'.repeat(174)}`;
    for (let pid = 10_000; pid < 11_500; pid++) {
      mkdirSync(join(root, String(pid)));
      writeFileSync(join(root, String(pid), 'stat'), `${pid} (${comm(pid)}${rest}`);
    }
    const byPid = (a: ProcStat, b: ProcStat) => a.pid - b.pid;
    const { js, native } = both(() => [...takeSnapshot(root).processes.values()].sort(byPid));
    expect(native.length).toBe(1500);
    expect(native).toEqual(js);
    expect(native.map((s) => s.comm)).toEqual(Array.from({ length: 1500 }, (_, i) => comm(10_000 + i)));
    // Taken again: the grown buffer holds it.
    expect(both(() => takeSnapshot(root).processes.size)).toEqual({ js: 1500, native: 1500 });
  });

  it('gives a whole scan the same members and unreadable processes', () => {
    const { js, native } = both(() => {
      const r = scanSession({
        procRoot: '/proc',
        entry: tag.entry,
        excluded: new Set(ancestorsOf('/proc', process.pid)),
        known: new Map(),
        uid: process.getuid?.() ?? -1,
        roots: [],
      });
      return {
        members: r.members
          .map((m) => ({ identity: m.identity, stat: m.stat, foundBy: m.foundBy, via: m.via }))
          .sort((a, b) => a.identity.pid - b.identity.pid),
        unreadable: r.unreadable
          .filter((u) => ours.some((id) => id.pid === u.stat.pid))
          .map((u) => ({ pid: u.stat.pid, reason: u.reason }))
          .sort((a, b) => a.pid - b.pid),
      };
    });
    expect(native).toEqual(js);
    // The two sleeps, the shell and its child, the bomb (its entry within budget), the leader,
    // the other uid's sleep.
    expect(native.members.map((m) => m.foundBy).sort()).toEqual([
      'carrier',
      'carrier',
      'carrier',
      'carrier',
      'carrier',
      'carrier',
      'descendant',
    ]);
  });

  // Identities to hold on evidence: a carrier, a descendant, a wrong parent, a gone pid, a
  // zombie thread leader, an environ bomb, a different real and effective uid…
  const holdCases = (): [string, Identity, Evidence][] => {
    // A process that has exited and was reaped: its identity names nothing any more.
    const exited = spawnSync('sh', ['-c', 'echo $$ $(cut -d" " -f22 /proc/$$/stat)'], { encoding: 'latin1' });
    const [exitedPid, exitedStart] = exited.stdout.trim().split(' ').map(Number);
    const carrier = (leaderExited = false): Evidence => ({ kind: 'carrier', entry: tag.entry, leaderExited });
    return [
      ['carrier', tagged1, carrier()],
      ['untagged as carrier', untagged, carrier()],
      ['descendant', shellChild, { kind: 'parent', ppid: shell.pid }],
      ['descendant of another parent', shellChild, { kind: 'parent', ppid: tagged1.pid }],
      ['cgroup find (identity alone)', shell, { kind: 'identity' }],
      ['zombie thread leader', leader, carrier(true)],
      ['environ bomb', bomb, carrier()],
      ['another real uid', otherUid, carrier()],
      ['a new start time at the pid', { pid: tagged1.pid, startTime: tagged1.startTime + 1 }, carrier()],
      ['an exited pid', { pid: exitedPid as number, startTime: exitedStart as number }, { kind: 'identity' }],
    ];
  };

  it('holds a found process in one call with the same outcome and details as the JS sequence', () => {
    const signaller = createSignaller();
    expect(signaller.mechanism, 'premise broken: no pidfd on this machine').toBe('pidfd');
    const cases = holdCases();
    cases.splice(2, 0, [
      'carrier of another session',
      tagged1,
      { kind: 'carrier', entry: createTag().entry, leaderExited: false },
    ]);
    const { js, native } = both(() =>
      cases.map(([label, id, evidence]) => {
        const h = signaller.hold('/proc', id, evidence);
        const outcome = { label, held: h.fd >= 0, why: h.why, details: h.details };
        releaseHold(h);
        return outcome;
      }),
    );
    expect(native).toEqual(js);
    const byLabel = Object.fromEntries(native.map((o) => [o.label, o]));
    const uid = process.getuid?.();
    expect(byLabel.carrier).toMatchObject({ held: true, details: { uid, cmdline: 'sleep 1000' } });
    expect(byLabel.descendant).toMatchObject({ held: true, details: { uid, cmdline: 'sleep 1000' } });
    expect(byLabel['zombie thread leader']).toMatchObject({ held: true, details: { uid } });
    expect(byLabel['environ bomb']?.details?.cmdline?.endsWith('\u2026')).toBe(true);
    for (const label of [
      'untagged as carrier',
      'carrier of another session',
      'descendant of another parent',
      'a new start time at the pid',
      'an exited pid',
    ]) {
      expect(byLabel[label], label).toEqual({ label, held: false, why: 'gone', details: undefined });
    }
    // The uid the kernel gives through the pidfd (PIDFD_GET_INFO) is status' real `Uid:`.
    expect(byLabel['another real uid']).toMatchObject({
      held: true,
      details: { uid: 65534, cmdline: 'sleep 1000' },
    });
    for (const o of native.filter((o) => o.held && o.label !== 'another real uid'))
      expect(o.details?.uid).toBe(uid);
  });

  it("holds a whole scan's new members in one call with the results of the per-member JS sequence", () => {
    const signaller = createSignaller();
    expect(signaller.mechanism, 'premise broken: no pidfd on this machine').toBe('pidfd');
    // Forty bombs too (4 KiB of cmdline each): past the first 64 KiB of cmdline room, so the
    // batch goes on in a larger one.
    const cases = holdCases();
    for (let i = 0; i < 40; i++) cases.push([`environ bomb ${i}`, bomb, cases[6]?.[2] as Evidence]);
    const requests = cases.map(([, id, evidence]) => ({ id, evidence }));
    const outcomes = (holds: Hold[]) =>
      holds.map((h, i) => {
        const outcome = { label: cases[i]?.[0], held: h.fd >= 0, why: h.why, details: h.details };
        releaseHold(h);
        return outcome;
      });
    const { js, native } = both(() => ({
      each: outcomes(requests.map(({ id, evidence }) => signaller.hold('/proc', id, evidence))),
      batch: outcomes(signaller.holdAll('/proc', requests)),
    }));
    expect(native.batch).toEqual(js.each);
    expect(js.batch).toEqual(js.each);
    expect(native.each).toEqual(js.each);
    const held = native.batch.filter((o) => o.held).map((o) => o.label);
    expect(held.slice(0, 5)).toEqual([
      'carrier',
      'descendant',
      'cgroup find (identity alone)',
      'zombie thread leader',
      'environ bomb',
    ]);
    expect(held).toHaveLength(6 + 40);
    expect(native.batch[7]).toMatchObject({ held: true, details: { uid: 65534, cmdline: 'sleep 1000' } });
    expect(native.batch.at(-1)?.details?.cmdline?.endsWith('\u2026')).toBe(true);
    expect(native.batch.at(-1)?.details).toEqual(native.batch[6]?.details);
  });
});

describe('reading candidate carriers through their pidfds', () => {
  // The native path on (TETHER_NATIVE_SCAN=0 turns it off for the file): holdCandidates is it.
  let was = true;
  beforeAll(() => {
    was = useNativeProc(true);
  });
  afterAll(() => {
    useNativeProc(was);
  });

  it('gives the environ reads of readEnvirons and, for carriers, the holds of holdAll', () => {
    const signaller = createSignaller();
    expect(signaller.mechanism, 'premise broken: no pidfd on this machine').toBe('pidfd');
    const snapshot = takeSnapshot();
    const candidates = ours.map((id) => snapshot.processes.get(id.pid)).filter((s) => s !== undefined);
    expect(candidates.length, 'premise broken: a fixture is not in the walk').toBe(ours.length);
    // A pid that no longer names the process the walk saw (another start time): read as gone.
    const reused = { ...(candidates[0] as ProcStat), startTime: (candidates[0] as ProcStat).startTime + 1 };
    const all = [...candidates, reused];
    const read = signaller.holdCandidates('/proc', tag.entry, all);
    expect(read).not.toBeNull();
    const outcomes = (read ?? []).map((c, i) => {
      const h = c.hold;
      const outcome = {
        pid: all[i]?.pid,
        read: c.read,
        held: h ? h.fd >= 0 : undefined,
        why: h?.why,
        details: h?.details,
      };
      if (h) releaseHold(h);
      return outcome;
    });
    // The JS sequence: readEnvirons, then a carrier held on its entry (holdAll on the JS path).
    const was = useNativeProc(false);
    let js: typeof outcomes;
    try {
      const reads = readEnvirons(
        '/proc',
        candidates.map((s) => s.pid),
        candidates.map((s) => s.state === 'Z'),
      );
      js = candidates.map((stat, i) => {
        const r = reads[i] as EnvironRead;
        const carrier = r.kind === 'ok' && r.entries.includes(tag.entry);
        const evidence: Evidence = { kind: 'carrier', entry: tag.entry, leaderExited: stat.state === 'Z' };
        const h = carrier ? signaller.holdAll('/proc', [{ id: stat, evidence }])[0] : undefined;
        const outcome = {
          pid: stat.pid,
          read: r,
          held: h ? h.fd >= 0 : undefined,
          why: h?.why,
          details: h?.details,
        };
        if (h) releaseHold(h);
        return outcome;
      });
    } finally {
      useNativeProc(was);
    }
    js.push({ pid: reused.pid, read: { kind: 'gone' }, held: undefined, why: undefined, details: undefined });
    expect(outcomes).toEqual(js);
    // Seven carriers held (the two sleeps, the shell and its child, the bomb, the leader, the
    // other uid's sleep); the untagged sleep and the decoys read but not held.
    expect(outcomes.filter((o) => o.held).length).toBe(7);
    expect(outcomes.find((o) => o.pid === otherUid.pid)?.details).toEqual({
      uid: 65534,
      cmdline: 'sleep 1000',
    });
    expect(outcomes.find((o) => o.pid === untagged.pid)).toMatchObject({
      held: undefined,
      read: { kind: 'ok' },
    });
  });
});

describe('the walk that reads environs too', () => {
  it('reads, in its one pass, the environs readEnviron reads, and lists the notable ones', () => {
    const notBefore = Math.min(...ours.map((id) => id.startTime));
    const skipped = tagged1;
    const snapshot = takeSnapshot('/proc', {
      from: notBefore,
      entry: tag.entry,
      skip: [skipped, { pid: untagged.pid, startTime: untagged.startTime + 1 }],
    });
    const table = snapshot.table;
    expect(table?.environ, 'premise broken: the native walk was not used').toBeDefined();
    if (!table) return;
    const was = useNativeProc(false);
    try {
      for (const id of ours) {
        const i = table.indexOf(id.pid);
        expect(i, `pid ${id.pid} is not in the walk`).toBeGreaterThanOrEqual(0);
        const stat = table.statAt(i);
        if (id === skipped) {
          expect(table.environAt(i), 'a skipped process had its environ read').toBeUndefined();
          continue;
        }
        // The JS path's read of the same process, made after the walk's.
        const js = readEnviron('/proc', id.pid, stat.state === 'Z');
        expect(table.environAt(i), `the environ of pid ${id.pid} (${stat.comm})`).toEqual(js);
        expect(table.carries(i, tag.entry)).toBe(js.kind === 'ok' && js.entries.includes(tag.entry));
      }
    } finally {
      useNativeProc(was);
    }
    // Notable: the skipped one, the carriers, the bomb (oversized) — not the untagged sleep,
    // whose skip names another start time, nor a process started before notBefore.
    const notable = [...table.notable].map((i) => table.pidAt(i));
    expect(notable).toContain(skipped.pid);
    expect(notable).toContain(bomb.pid);
    expect(notable).toContain(leader.pid);
    expect(notable).not.toContain(untagged.pid);
    expect(notable).not.toContain(process.pid);
    expect(table.environAt(table.indexOf(process.pid)), 'read before notBefore').toBeUndefined();
  });

  it("gives lookups by pid the JS walk's stats and children, the pids it did not list too", () => {
    const pids = [...ours.map((id) => id.pid), 0, 1, 2, process.pid, 0x3fffffff];
    const { js, native } = both(() => {
      const s = takeSnapshot();
      return pids.map((pid) => ({
        stat: s.processes.get(pid),
        has: s.processes.has(pid),
        children: sortPids(s.children.get(pid)),
      }));
    });
    expect(native).toEqual(js);
    expect(native[pids.indexOf(shell.pid)]?.children).toEqual([shellChild.pid]);
  });

  it("scans another session's walk, or one of a later notBefore, to the same result as its own", () => {
    const other = createTag();
    const notBefore = Math.min(...ours.map((id) => id.startTime));
    const ctx = () => scanContext(notBefore);
    const result = (r: ReturnType<typeof scanSession>) => ({
      members: r.members.map((m) => `${m.identity.pid}:${m.foundBy}`).sort(),
      unreadable: sortPids(
        r.unreadable.filter((u) => ours.some((id) => id.pid === u.stat.pid)).map((u) => u.stat.pid),
      ),
    });
    const own = result(scanSession(ctx()));
    const fromOther = result(
      scanSession(ctx(), takeSnapshot('/proc', { from: notBefore, entry: other.entry, skip: [tagged1] })),
    );
    const later = result(
      scanSession(ctx(), takeSnapshot('/proc', { from: notBefore + 1e9, entry: tag.entry })),
    );
    const js = both(() => result(scanSession(ctx(), takeSnapshot('/proc')))).js;
    expect(own.members.length).toBe(7);
    expect(fromOther).toEqual(own);
    expect(later).toEqual(own);
    expect(own).toEqual(js);
  });
});

describe("a PID 1 whose children's pids have every length", () => {
  // A PID namespace's init (`unshare --pid --fork --mount-proc`) forks a sleep onto pid 2, then,
  // setting ns_last_pid to 9, 99, 999…, onto 10, 100, 1000… up to the longest pid pid_max allows
  // (7 digits at .ci/run's 4194304, 5 at Linux's default 32768). Nothing else forks there, so
  // the pids are exact. The namespace's own procfs is read from here as /proc/INIT/root/proc:
  // its pid 1 holds children of every length, as a machine's PID 1 may.
  let ns: ChildProcess | undefined;
  afterAll(() => {
    // --kill-child: the init dies with unshare, and the kernel ends the namespace with it.
    if (ns && ns.exitCode === null && ns.signalCode === null) ns.kill('SIGKILL');
  });

  it("gives the JS walk's children, as a set, on the native path", async () => {
    const pidMax = Number(readFileSync('/proc/sys/kernel/pid_max', 'latin1'));
    const expected = [2];
    for (let next = 10; next < pidMax && next <= 1_000_000; next *= 10) expected.push(next);
    const forks = expected
      .slice(1)
      .map((pid) => `echo ${pid - 1} > /proc/sys/kernel/ns_last_pid; sleep 1000 &`)
      .join(' ');
    ns = spawn(
      'unshare',
      ['--pid', '--fork', '--mount-proc', '--kill-child', 'sh', '-c', `sleep 1000 & ${forks} wait`],
      { stdio: 'ignore' },
    );
    const unshare = ns.pid as number;
    let procRoot = '';
    let kids: number[] = [];
    await waitFor(`the namespace's init to fork ${expected.length} sleeps`, () => {
      try {
        const init = Number(readFileSync(`/proc/${unshare}/task/${unshare}/children`, 'latin1').trim());
        if (!init) return false;
        procRoot = `/proc/${init}/root/proc`;
        // Ground truth: the kernel's list of the init's children, in the namespace's pids.
        kids = readFileSync(`${procRoot}/1/task/1/children`, 'latin1').trim().split(' ').map(Number);
        // Each one asleep in its sleep, the init in its wait: a fork still the shell, or a sleep
        // still running its start-up, changes its comm, flags or state between the two walks,
        // which then differ (a busy machine).
        const settled = (pid: number, comm: string) =>
          readFileSync(`${procRoot}/${pid}/stat`, 'latin1').includes(`(${comm}) S `);
        return (
          kids.length === expected.length && settled(1, 'sh') && kids.every((kid) => settled(kid, 'sleep'))
        );
      } catch {
        return false;
      }
    });
    expect(sortPids(kids), 'premise broken: the sleeps did not take the pids set for them').toEqual(expected);
    expect(
      new Set(expected.map((pid) => String(pid).length)).size,
      'premise broken: one pid length only',
    ).toBe(expected.length);
    const { js, native } = both(() => {
      const s = takeSnapshot(procRoot);
      return {
        stats: sortStats([...s.processes.values()]),
        children: childEntries(s.children),
        ofInit: s.children.get(1),
      };
    });
    expect(native.stats).toEqual(js.stats);
    expect(native.children).toEqual(js.children);
    expect(sortPids(native.ofInit)).toEqual(expected);
    expect(sortPids(js.ofInit)).toEqual(expected);
  });
});

// The context of a scan for this file's session: its tag, processes started since `notBefore`,
// this process and its ancestors excluded.
function scanContext(notBefore: number): ScanContext {
  return {
    procRoot: '/proc',
    entry: tag.entry,
    notBefore,
    excluded: new Set(ancestorsOf('/proc', process.pid)),
    known: new Map(),
    uid: process.getuid?.() ?? -1,
    roots: [],
  };
}

describe('a scan with holds', () => {
  it('finds, holds and details the same members on both paths (carriers read through their pidfds)', () => {
    const signaller = createSignaller();
    const notBefore = Math.min(...ours.map((id) => id.startTime));
    const { js, native } = both(() => {
      const r = scanSession({
        ...scanContext(notBefore),
        hold: (requests) => signaller.holdAll('/proc', requests),
        holdCandidates: (candidates) => signaller.holdCandidates('/proc', tag.entry, candidates),
      });
      const members = r.members
        .map((m) => ({
          identity: m.identity,
          foundBy: m.foundBy,
          via: m.via,
          held: (m.hold?.fd ?? -1) >= 0,
          details: m.hold?.details,
        }))
        .sort((a, b) => a.identity.pid - b.identity.pid);
      for (const m of r.members) if (m.hold) releaseHold(m.hold);
      return members;
    });
    expect(native).toEqual(js);
    expect(native.map((m) => [m.foundBy, m.held])).toEqual(native.map((m) => [m.foundBy, true]));
    expect(native.find((m) => m.identity.pid === shellChild.pid)).toMatchObject({
      foundBy: 'descendant',
      via: shell.pid,
      details: { cmdline: 'sleep 1000' },
    });
    expect(native.length).toBe(7);
  });
});
