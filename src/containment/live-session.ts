// Whether a session is alive now: evidence, from this machine's /proc, that a supervisor of its
// tag runs (docs/containment.md, "Live sessions"). One home for the question that recover, a kept
// entry's expiry and the guard's `live-session` rule all ask: a tag alone is never evidence (any
// process can carry any tag: a copied environment, a made-up one), a ledger row is never
// evidence (it can be stale or forged), and a registration file alone is never evidence (its
// supervisor may have been SIGKILLed). Evidence is for leaving a session alone, never for
// signalling anything.
//
// A supervisor of tag T is any tether process (CLI or library, nested at any depth) whose own
// session is T. tether exports T to what the supervisor starts, never to the supervisor, so a
// supervisor never carries T itself. It shows itself three ways:
// - **its helper**: a process that looks like a helper (`looksLikeHelper`) and carries T, under a
//   live parent that does not carry T, is not PID 1, and is no helper itself (a helper is a
//   subreaper: an orphaned helper of a dead nested supervisor is adopted by the outer session's
//   helper, which never carries the inner tag);
// - **its registration**: the file the session writes when its first command starts and removes
//   at its end (`registerSession`), naming T and the supervisor's pid + start time, counted only
//   while that pid + start time is alive in the same boot and PID namespace, owned by that
//   process's uid (or root), not carrying T, and holding the file open (the writer keeps it open
//   for the session's life: a file naming another process is no one's word);
// - **its sandbox wrapper** (inside a container): an exec entry — pid > 1 whose parent is outside
//   the PID namespace (ppid 0: `docker exec`, `kubectl exec`, `nsenter`) — carrying T: the
//   completion wrapper runs as `env T=1 sh -c WRAP` (src/sandbox/exec.ts) for as long as its
//   command and its client's session do.
//
// Every sign also says when the processes it rests on started (`started`): a sign counts for a
// session only when they started before anything of that session could start them: a leftover
// is younger than its session, so a helper or a registration it forged is too. The exact bound
// is the tag's own begin (`tagBegin`: the moment its supervisor drew it, carried in its name,
// which no member can change; `signBeforeBegin`); recover also holds a sign to the row's begin,
// and where a tag carries no begin (an older tether's), the guard falls back to the oldest member
// of the tag it sees (`firstMembers`, `signBefore`; docs/containment.md, "Live sessions").
import {
  closeSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { readCmdline, readUid } from '../proc/details.js';
import { readEnvirons } from '../proc/environ.js';
import { CLOCK_TICKS_PER_SECOND } from '../proc/identity.js';
import type { Snapshot } from '../proc/snapshot.js';
import { type ProcStat, parseStatBuffer } from '../proc/stat.js';
import { TAG_NAME_PATTERN, TAG_PREFIX } from '../proc/tag.js';
import { readUntrustedFile } from '../proc/untrusted-file.js';
import { HELPER_COMM, looksLikeHelper } from './helper.js';

/** The variable naming the live-session registrations directory (absolute), before the defaults. */
export const SESSIONS_DIR_ENV = 'TETHER_SESSIONS_DIR';

/** Bytes a registration file may hold; a larger one is no registration. */
export const REGISTRATION_MAX_BYTES = 512;

/** Registration files read per call, at most (a directory filled by a writer cannot stall a tick). */
export const REGISTRATION_MAX_FILES = 4096;

/**
 * The live-session registrations directory, from `env`: `TETHER_SESSIONS_DIR` (absolute), else
 * `$XDG_RUNTIME_DIR/tether/sessions` (absolute), else `/run/tether/sessions` for root (uid 0),
 * else `<os.tmpdir()>/tether-<uid>/sessions`. A writer and a reader find the same directory only
 * when their environments resolve the same way (docs/containment.md, "Live sessions").
 */
export function sessionsDir(env: NodeJS.ProcessEnv = process.env, uid = process.getuid?.() ?? 0): string {
  const own = env[SESSIONS_DIR_ENV];
  if (own && isAbsolute(own)) return own;
  const runtime = env.XDG_RUNTIME_DIR;
  if (runtime && isAbsolute(runtime)) return join(runtime, 'tether', 'sessions');
  return uid === 0 ? '/run/tether/sessions' : join(tmpdir(), `tether-${uid}`, 'sessions');
}

/** One registration file, as read: which tag, which supervisor (pid + start time, clock ticks), where. */
export interface SessionRegistration {
  tag: string;
  pid: number;
  startTime: number;
  bootId: string;
  pidNamespace: number | undefined;
  /** The file's owner. */
  uid: number;
  /** The file's path, its directory resolved (`realpath`): what `/proc/<pid>/fd` of its holder shows. */
  path: string;
}

/**
 * A registration written by `registerSession`, held open by this process (one fd, close-on-exec)
 * until `remove()` closes it and takes it away (idempotent, never throws).
 */
export interface Registered {
  path: string;
  /**
   * Takes away now the stale files `remove()` would (never throws): for a caller with a moment
   * to spare while its session runs (sandbox.exec, once its command's stdin is sent), so that its
   * end does not pay for them. Once per registration: `remove()` then does not look again.
   */
  prune(): void;
  remove(): void;
}

// Line format: `tether-session 1 TAG PID START_TIME BOOT_ID PIDNS` (PIDNS `-` when unread).
const MAGIC = 'tether-session';
const VERSION = '1';
// File name: `<tag hex>.<pid>.<start time>.<n>` (n: this process's count, so that two calls
// under one tag in one process each have their own); a temp file's starts with `.`.
const NAME = /^([0-9a-f]{32})\.(\d+)\.(\d+)\.(\d+)$/;
let written = 0;

// This process's pid + start time and this boot's id and PID namespace, read once per
// `procRoot` (each registration read them again: three reads of /proc, about a fifth of its
// cost). None of them changes while this process lives: its pid and start time are its own, it
// outlives no boot, and a process never changes PID namespace (setns and unshare move its
// children) nor time namespace (its start time is on the clock of the one it started in). A read
// that failed is not kept: the next registration tries again.
const selfIds = new Map<string, { self: ProcStat; ids: ReturnType<typeof hostIds> }>();
function ownIds(procRoot: string): { self: ProcStat | undefined; ids: ReturnType<typeof hostIds> } {
  const known = selfIds.get(procRoot);
  if (known) return known;
  const self = statByFile(procRoot, process.pid);
  const ids = hostIds(procRoot);
  if (self && ids.bootId && ids.pidNamespace !== undefined) selfIds.set(procRoot, { self, ids });
  return { self, ids };
}

// This boot's id and PID namespace, read as src/ledger/supervisor.ts reads them (from files:
// the native library is not loaded for them).
function hostIds(procRoot: string): { bootId: string; pidNamespace: number | undefined } {
  let bootId = '';
  try {
    bootId = readFileSync(`${procRoot}/sys/kernel/random/boot_id`, 'latin1').trim();
  } catch {
    // unread: a registration then never matches
  }
  let pidNamespace: number | undefined;
  try {
    pidNamespace = statSync(`${procRoot}/self/ns/pid`).ino;
  } catch {
    pidNamespace = undefined;
  }
  return { bootId, pidNamespace };
}

// The directories this process has made (or found) already: one mkdir each.
const madeDirs = new Set<string>();

/**
 * Writes the registration of session `tag` (a tag name) supervised by this process into `dir`
 * (made 0700 when absent; refused unless it is a directory of this uid that no one else may
 * write, code `ENOTPRIVATE`): one 0600 file, by write-then-rename, naming the tag, this process's
 * pid + start time, the boot id and the PID namespace. `remove()` takes it away at the session's
 * end, and with it stale files of the same boot and PID namespace whose supervisor is gone (a
 * SIGKILLed supervisor never removes its own; at most 32 checked, from a random one on, and at
 * most once per `PRUNE_INTERVAL_MS` in a directory by this process: the end, or `prune()` while
 * the session runs, not the start, pays for it). Throws what the filesystem throws (EACCES,
 * EROFS, ENOSPC…): the caller says so.
 */
export function registerSession(tag: string, dir = sessionsDir(), procRoot = '/proc'): Registered {
  if (!TAG_NAME_PATTERN.test(tag)) throw new Error(`not a session tag name: ${JSON.stringify(tag)}`);
  const { self, ids } = ownIds(procRoot);
  if (!self) throw new Error(`cannot read ${procRoot}/${process.pid}/stat: is /proc mounted?`);
  if (!madeDirs.has(dir)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    checkPrivate(dir);
    madeDirs.add(dir);
  }
  const hex = tag.slice(TAG_PREFIX.length);
  written += 1;
  const path = join(dir, `${hex}.${self.pid}.${self.startTime}.${written}`);
  const tmp = join(dir, `.${hex}.${self.pid}.${process.hrtime.bigint()}`);
  const line = [MAGIC, VERSION, tag, self.pid, self.startTime, ids.bootId || '-', ids.pidNamespace ?? '-'];
  const text = `${line.join(' ')}\n`;
  // Kept open for the session's life: a reader counts a registration only while the process it
  // names holds it (Node opens with O_CLOEXEC: the helper and the payload never inherit it).
  let fd: number;
  try {
    fd = openSync(tmp, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    mkdirSync(dir, { recursive: true, mode: 0o700 }); // removed since this process made it
    fd = openSync(tmp, 'wx', 0o600);
  }
  try {
    writeSync(fd, text);
    renameSync(tmp, path);
  } catch (error) {
    closeQuietly(fd);
    removeQuietly(tmp);
    throw error;
  }
  let removed = false;
  let pruned = false;
  const prune = () => {
    if (pruned) return;
    pruned = true;
    pruneStale(dir, ids, procRoot, self);
  };
  return {
    path,
    prune,
    remove() {
      if (removed) return;
      removed = true;
      closeQuietly(fd);
      removeQuietly(path);
      prune();
    },
  };
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // closed already
  }
}

// Throws unless `dir` is a directory (not a symlink) of this process's uid that no one else may
// write: another user's directory (planted in a shared /tmp) could drop or replace registrations.
function checkPrivate(dir: string): void {
  const st = lstatSync(dir);
  const uid = process.getuid?.() ?? st.uid;
  if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o022) !== 0)
    throw Object.assign(
      new Error(
        `${dir} is not a private directory of uid ${uid} (${st.isSymbolicLink() ? 'a symlink' : `owner ${st.uid}, mode ${(st.mode & 0o777).toString(8)}`})`,
      ),
      { code: 'ENOTPRIVATE' },
    );
}

// `/proc/<pid>/stat` read with fs (a session's start does not load the native library for it).
function statByFile(procRoot: string, pid: number): ProcStat | undefined {
  try {
    const buf = readFileSync(`${procRoot}/${pid}/stat`);
    return parseStatBuffer(buf, buf.length);
  } catch {
    return undefined;
  }
}

function removeQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // gone already, or not ours to remove: a reader checks the supervisor anyway
  }
}

/** Registration files a `remove()` checks for a gone supervisor, at most (from a random one on). */
const PRUNE_MAX_FILES = 32;

/**
 * The least time between two looks for stale files in one directory by one process, ms: a
 * process making many short calls (an agent's tool commands, each a registration) read the
 * directory and up to 32 supervisors' stat files at every call's end. A stale file is harmless
 * meanwhile: a reader counts a registration only while the process it names holds it open.
 */
export const PRUNE_INTERVAL_MS = 5_000;
const prunedAt = new Map<string, number>();

// Removes registrations of this boot and PID namespace whose supervisor is gone, judged first by
// the pid + start time in the file's name (one stat read each, none for this process's own),
// the file read only then. Best effort and bounded (PRUNE_MAX_FILES a call, one call a
// PRUNE_INTERVAL_MS per directory): another namespace's, another boot's or an unreadable file is
// left as it is.
function pruneStale(dir: string, ids: ReturnType<typeof hostIds>, procRoot: string, self: ProcStat): void {
  if (ids.pidNamespace === undefined) return;
  const now = performance.now();
  const last = prunedAt.get(dir);
  if (last !== undefined && now - last < PRUNE_INTERVAL_MS) return;
  prunedAt.set(dir, now);
  const own = `${self.pid}.${self.startTime}`;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  const from = Math.floor(Math.random() * names.length);
  const picked = [...names.slice(from), ...names.slice(0, from)].slice(0, PRUNE_MAX_FILES);
  for (const name of picked) {
    const m = NAME.exec(name);
    if (!m) continue;
    if (`${m[2]}.${m[3]}` === own) continue; // this process's, alive: no read of its stat
    const stat = statByFile(procRoot, Number(m[2]));
    if (stat && stat.startTime === Number(m[3])) continue; // alive, or a zombie: kept

    const r = parseRegistration(dir, name);
    if (r && r.bootId === ids.bootId && r.pidNamespace === ids.pidNamespace) removeQuietly(r.path);
  }
}

/**
 * The registration files of `dir` (default `sessionsDir()`), at most `REGISTRATION_MAX_FILES`:
 * each a regular file (opened without following a link and without blocking), at most
 * `REGISTRATION_MAX_BYTES`, whose one line is well-formed and agrees with its file name. Any
 * other file is skipped. Paths are under `dir` resolved (`realpath`). A directory that cannot be
 * read holds none. Never throws.
 */
export function readSessionRegistrations(dir = sessionsDir()): SessionRegistration[] {
  let names: string[];
  try {
    dir = realpathSync(dir); // the path a holder's /proc/<pid>/fd link shows
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const entries: SessionRegistration[] = [];
  for (const name of names) {
    if (entries.length >= REGISTRATION_MAX_FILES) break;
    const r = parseRegistration(dir, name);
    if (r) entries.push(r);
  }
  return entries;
}

// The registration in `dir/name`, or undefined when it is none (see readSessionRegistrations).
function parseRegistration(dir: string, name: string): SessionRegistration | undefined {
  const m = NAME.exec(name);
  if (!m) return undefined;
  const path = join(dir, name);
  const read = readSmallFile(path);
  if (!read) return undefined;
  const fields = read.text.trim().split(' ');
  if (fields.length !== 7 || fields[0] !== MAGIC || fields[1] !== VERSION) return undefined;
  const [, , tag, pid, startTime, bootId, ns] = fields as string[];
  if (tag !== `${TAG_PREFIX}${m[1]}` || pid !== m[2] || startTime !== m[3]) return undefined;
  return {
    tag,
    pid: Number(pid),
    startTime: Number(startTime),
    bootId: bootId === '-' ? '' : (bootId as string),
    pidNamespace: ns === undefined || !/^\d+$/.test(ns) ? undefined : Number(ns),
    uid: read.uid,
    path,
  };
}

// A regular file's text and owner, at most REGISTRATION_MAX_BYTES, read as an untrusted file
// (src/proc/untrusted-file.ts); undefined for anything else.
function readSmallFile(path: string): { text: string; uid: number } | undefined {
  const read = readUntrustedFile(path, { maxBytes: REGISTRATION_MAX_BYTES });
  return read.ok ? { text: read.bytes.toString('latin1'), uid: read.stat.uid } : undefined;
}

/**
 * What the evidence functions read about one moment of the process table: a snapshot, the
 * session tags (names) each process's environ carries (only carriers are listed), and cmdlines.
 * Built by `viewSessions` (or by a caller that has read the environs already).
 */
export interface SessionView {
  procRoot: string;
  processes: ReadonlyMap<number, ProcStat>;
  /** pid → the tag names (`TETHER_SESSION_<hex>`) its environ carries. */
  carried: ReadonlyMap<number, readonly string[]>;
  /** `/proc/<pid>/cmdline`, NULs as spaces ('' when gone). */
  cmdline: (pid: number) => string;
}

/**
 * Reads every process's environ of `snapshot` for session entries (one batched native call when
 * it is there): the view the evidence is judged on. An environ that cannot be read (denied,
 * gone) carries nothing.
 */
export function viewSessions(snapshot: Snapshot, cmdline?: (pid: number) => string): SessionView {
  const stats = [...snapshot.processes.values()];
  const reads = readEnvirons(
    snapshot.procRoot,
    stats.map((s) => s.pid),
    stats.map((s) => s.state === 'Z'),
  );
  const carried = new Map<number, readonly string[]>();
  stats.forEach((s, i) => {
    const r = reads[i];
    if (r?.kind === 'ok' && r.entries.length > 0)
      carried.set(
        s.pid,
        r.entries.map((e) => e.slice(0, -2)),
      );
  });
  return {
    procRoot: snapshot.procRoot,
    processes: snapshot.processes,
    carried,
    cmdline: cmdline ?? ((pid) => readCmdline(snapshot.procRoot, pid) ?? ''),
  };
}

/**
 * One sign that tag `tag`'s session is alive now: `kind` says which evidence (see the file's
 * head), `supervisor` the pid of the live process that is (or, for a sandbox wrapper, stands for)
 * its supervisor, `reason` a sentence for a report. `started`: the start times (clock ticks since
 * boot, field 22 of `/proc/<pid>/stat`) of the processes it rests on — `supervisor` (the helper's
 * parent, the registration's holder, the sandbox wrapper) and, for a helper sign, `helper` (its
 * pid in `helperPid`); what `signBefore` judges.
 */
export interface LiveSign {
  tag: string;
  kind: 'helper' | 'registration' | 'sandbox-wrapper';
  supervisor: number;
  reason: string;
  started: { supervisor: number; helper?: number };
  helperPid?: number;
  /**
   * The supervisor runs in another time namespace than the reader (`/proc/<pid>/ns/time`): the
   * tag's begin it drew counts on its boot clock. `clockOffsetMicros`: how far its boot clock is
   * ahead of the reader's (from both `/proc/<pid>/timens_offsets`), which `signBeforeBegin`
   * takes off the begin; `otherClock` when that cannot be read: the begin cannot be compared,
   * and `signBeforeBegin` leaves the sign to the caller's other bound.
   */
  clockOffsetMicros?: number;
  otherClock?: true;
}

const alive = (stat: ProcStat | undefined): stat is ProcStat =>
  stat !== undefined && stat.state !== 'Z' && stat.state !== 'X';

/** File descriptors of one process looked at, at most, for a registration it holds. */
export const HOLDER_MAX_FDS = 65_536;

/**
 * Whether process `pid` holds `path` open now: one of its `/proc/<pid>/fd` links reads `path`
 * (links are read, never followed: no file system behind them is touched). False when its fds
 * cannot be listed (another uid's process for a reader that is not root, gone), past
 * `HOLDER_MAX_FDS`, or for a removed file (its link then ends with ` (deleted)`).
 */
export function holdsOpen(procRoot: string, pid: number, path: string): boolean {
  let fds: string[];
  try {
    fds = readdirSync(`${procRoot}/${pid}/fd`);
  } catch {
    return false;
  }
  for (const fd of fds.slice(0, HOLDER_MAX_FDS)) {
    try {
      if (readlinkSync(`${procRoot}/${pid}/fd/${fd}`) === path) return true;
    } catch {
      // closed meanwhile
    }
  }
  return false;
}

/**
 * Every sign of a live supervisor in `view`, by tag (each tag's signs in the order found:
 * helpers, registrations, sandbox wrappers). `registrations`: the files read
 * (`readSessionRegistrations`); each counts only when its pid (> 1) + start time is alive in
 * `view` in the reader's boot and PID namespace, the file's owner is that process's uid or
 * root, that process does not carry the tag, and it holds the file open (`holdsOpen`). A pid ≤ 1
 * is never taken for a supervisor. Whether a sign started early enough to count for a session is
 * the caller's question (`signBefore`).
 */
export function liveSupervisors(
  view: SessionView,
  registrations: readonly SessionRegistration[] = [],
): Map<string, LiveSign[]> {
  const signs = new Map<string, LiveSign[]>();
  const add = (sign: LiveSign) => {
    const list = signs.get(sign.tag);
    if (list) list.push(sign);
    else signs.set(sign.tag, [sign]);
  };
  const carries = (pid: number, tag: string) => view.carried.get(pid)?.includes(tag) ?? false;
  const isHelper = (stat: ProcStat) =>
    stat.comm === HELPER_COMM && looksLikeHelper(stat.comm, view.cmdline(stat.pid).split(' '));
  for (const [pid, tags] of view.carried) {
    const stat = view.processes.get(pid);
    if (!alive(stat) || pid <= 1) continue;
    // A sandbox wrapper: an exec entry (its parent outside this PID namespace) carrying the tag.
    if (stat.ppid === 0)
      for (const tag of tags)
        add({
          tag,
          kind: 'sandbox-wrapper',
          supervisor: pid,
          reason: `pid ${pid} carries its tag as an exec entry (its parent is outside this PID namespace: a sandbox session's wrapper) and runs: the session is live`,
          started: { supervisor: stat.startTime },
        });
    if (stat.ppid <= 1 || stat.comm !== HELPER_COMM || !isHelper(stat)) continue;
    const parent = view.processes.get(stat.ppid);
    if (!alive(parent) || isHelper(parent)) continue;
    for (const tag of tags)
      if (!carries(parent.pid, tag))
        add({
          tag,
          kind: 'helper',
          supervisor: parent.pid,
          reason: `its helper pid ${pid} still runs under pid ${parent.pid}: the session is supervised`,
          started: { supervisor: parent.startTime, helper: stat.startTime },
          helperPid: pid,
          ...clockOf(view.procRoot, parent.pid),
        });
  }
  if (registrations.length > 0) {
    const ids = hostIds(view.procRoot);
    for (const r of registrations) {
      if (r.pid <= 1 || ids.pidNamespace === undefined) continue;
      if (r.bootId !== ids.bootId || r.pidNamespace !== ids.pidNamespace) continue;
      const stat = view.processes.get(r.pid);
      if (!alive(stat) || carries(r.pid, r.tag)) continue;
      // Its start time as the supervisor read it, on its own boot clock (its time namespace's).
      const clock = clockOf(view.procRoot, r.pid);
      if (!sameStart(stat.startTime, r.startTime, clock)) continue;
      if (r.uid !== 0 && readUid(view.procRoot, r.pid) !== r.uid) continue;
      if (!holdsOpen(view.procRoot, r.pid, r.path)) continue;
      add({
        tag: r.tag,
        kind: 'registration',
        supervisor: r.pid,
        reason: `its supervisor pid ${r.pid} (registered in ${r.path}) is alive and holds its registration open: the session is supervised`,
        started: { supervisor: stat.startTime },
        ...clock,
      });
    }
  }
  return signs;
}

/**
 * Whether `sign` counts for a session none of whose members started before `bound` (clock ticks
 * since boot): a member can start only processes younger than itself, so a sign counts only
 * when the processes it rests on are older than every member — its supervisor (a helper's
 * parent, a registration's holder) started strictly before `bound`; a helper and a sandbox
 * wrapper, which start the session's first process themselves (in the same clock tick, often),
 * no later than `helperBound` (default `bound`; recover, whose bound is the row's begin less a
 * margin, gives the row's own tick: the helper starts before the row is written, often within
 * the margin).
 */
export function signBefore(sign: LiveSign, bound: number, helperBound = bound): boolean {
  if (sign.kind === 'sandbox-wrapper') return sign.started.supervisor <= helperBound;
  if (sign.started.supervisor >= bound) return false;
  return sign.started.helper === undefined || sign.started.helper <= helperBound;
}

// How process `pid`'s boot clock stands to the reader's: {} in the same time namespace (or where
// neither link can be read: a kernel without time namespaces); `clockOffsetMicros`, its boot
// clock ahead of the reader's, from both processes' `timens_offsets`; `otherClock` when another
// namespace's offsets cannot be read.
function clockOf(procRoot: string, pid: number): { clockOffsetMicros?: number; otherClock?: true } {
  let same: boolean;
  try {
    same = readlinkSync(`${procRoot}/${pid}/ns/time`) === readlinkSync(`${procRoot}/self/ns/time`);
  } catch {
    return {};
  }
  if (same) return {};
  const theirs = bootOffsetMicros(procRoot, pid);
  const ours = bootOffsetMicros(procRoot, 'self');
  return theirs === undefined || ours === undefined
    ? { otherClock: true }
    : { clockOffsetMicros: theirs - ours };
}

// The boottime offset of a process's time namespace, µs (`timens_offsets`: "boottime S NS").
function bootOffsetMicros(procRoot: string, pid: number | 'self'): number | undefined {
  try {
    const m = /^boottime\s+(-?\d+)\s+(\d+)$/m.exec(
      readFileSync(`${procRoot}/${pid}/timens_offsets`, 'latin1'),
    );
    return m ? Number(m[1]) * 1_000_000 + Math.floor(Number(m[2]) / 1000) : undefined;
  } catch {
    return undefined;
  }
}

// Whether a start time read here (`here`, clock ticks) is the one the process read of itself
// (`own`) on its boot clock: equal in the same time namespace; across namespaces, `here` moved
// by the offset, within a tick (an offset need not be whole ticks); never with an unknown offset.
function sameStart(
  here: number,
  own: number,
  clock: { clockOffsetMicros?: number; otherClock?: true },
): boolean {
  if (clock.otherClock) return false;
  if (clock.clockOffsetMicros === undefined) return here === own;
  return Math.abs(here + clock.clockOffsetMicros / MICROS_PER_TICK - own) <= 1;
}

/** Microseconds in one clock tick (the unit of a start time): 10,000. */
const MICROS_PER_TICK = 1_000_000 / CLOCK_TICKS_PER_SECOND;

/**
 * Whether `sign` counts for the session whose tag was drawn at `beginMicros` (microseconds since
 * boot: `tagBegin`): its supervisor — a helper's parent, a registration's holder — drew the tag,
 * so it started before; every member of the session started after, and so did anything a member
 * started. It counts when its supervisor started in a clock tick that ended no later than the
 * begin: `(start + 1) × 10 ms ≤ begin` (a start time is its moment rounded down to its tick, as
 * the begin is rounded down to 10 ms: exact, no margin). A sandbox wrapper always counts here: it
 * is started after its tag is drawn, through an exec channel, perhaps on another machine's clock;
 * what it rests on is that only a process outside the container's PID namespace can start an exec
 * entry (its parent is outside: ppid 0), which no member inside can. A sign whose supervisor
 * runs in another time namespace (`otherClock`) counts here too: its begin and its start time
 * are on two clocks; the caller's other bound (the oldest member, the row's begin) decides.
 */
export function signBeforeBegin(sign: LiveSign, beginMicros: number): boolean {
  if (sign.kind === 'sandbox-wrapper' || sign.otherClock) return true;
  // The begin on the reader's clock (a supervisor in another time namespace drew it on its own).
  const begin = beginMicros - (sign.clockOffsetMicros ?? 0);
  return (sign.started.supervisor + 1) * MICROS_PER_TICK <= begin;
}

/**
 * The start time (clock ticks since boot) of the oldest member of each tag seen in `view`: its
 * oldest live carrier, whatever it looks like (a helper and a sandbox wrapper carry the tag too:
 * a real one is its session's oldest carrier; a leftover that names itself `tether-helper` is
 * still a member). Tags with no live carrier are absent.
 */
export function firstMembers(view: SessionView): Map<string, number> {
  const first = new Map<string, number>();
  for (const [pid, tags] of view.carried) {
    const stat = view.processes.get(pid);
    if (!alive(stat)) continue;
    for (const tag of tags) {
      const known = first.get(tag);
      if (known === undefined || stat.startTime < known) first.set(tag, stat.startTime);
    }
  }
  return first;
}
