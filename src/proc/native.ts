// The native scan loop (native/scan.c) through koffi: the /proc reads of snapshot.ts,
// environ.ts, identity.ts and details.ts, by the same rules and with the same results, in one
// call per walk or per process instead of three or four JS↔kernel crossings per file.
// Optional: when the library was not built (no compiler), cannot load (another libc, koffi
// missing) or is turned off (`TETHER_NATIVE_SCAN=0`, `useNativeProc(false)`), `nativeProc()`
// is null and every caller reads through the JS path. Files are read through the JS path's
// shared 64 KiB buffer (read.ts), so no file grows memory on either path.
import { closeSync, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { getSystemErrorMap } from 'node:util';
import { errnoName, libc, libcFailedForFds } from '../libc.js';
import type { EnvironRead } from './environ-read.js';
import type { Identity } from './process-id.js';
import { READ_BUFFER_BYTES, type ReadOutcome, sharedBuffer } from './read.js';
import type { ProcStat } from './stat.js';
import { type PackedWalk, WALK_RECORD, type WalkEnviron } from './table.js';
import { TAG_ENTRY_PATTERN, TAG_PREFIX } from './tag.js';

/** The native reads; each throws what the JS path throws (an Error with `code`: EMFILE…). */
export interface NativeProc {
  /**
   * takeSnapshot's walk (native/scan.c `tp_walk`): every user-space process's stat, in readdir
   * order, and with `environ` the environ of each process it names, read right after its stat —
   * packed, for a `ProcTable`.
   */
  walk(procRoot: string, environ?: WalkEnviron): PackedWalk;
  /** readStat: one pid's stat; undefined when gone or unparsable. */
  stat(procRoot: string, pid: number): ProcStat | undefined;
  /**
   * readEnviron for each of `pids` (with `leaderExited[i]`: read through a live thread), each
   * within a time budget of `budgetMs` milliseconds (`ENVIRON_TIME_BUDGET_MS` but for a test).
   */
  environ(
    procRoot: string,
    pids: readonly number[],
    leaderExited: readonly boolean[],
    budgetMs: number,
  ): EnvironRead[];
  /**
   * The status `Uid:` (undefined when gone, denied or absent), then cmdline: at most `limit`
   * bytes, left in `sharedBuffer()` (`ReadOutcome`).
   */
  details(procRoot: string, pid: number, limit: number): { uid: number | undefined; cmdline: ReadOutcome };
  /**
   * The cmdline of each of `pids` in one call (native/scan.c `tp_cmdlines`): at most `limit`
   * bytes each, read as `readInto` reads one (one byte more to tell truncation). One result per
   * pid, in order: its outcome, its bytes from the start of `text`.
   */
  cmdlines(
    procRoot: string,
    pids: readonly number[],
    limit: number,
  ): { cmdline: ReadOutcome; text: Buffer }[];
  /**
   * Holds each of `requests` (one scan's new members) in one call (native/scan.c
   * `tp_hold_batch`): per member, pidfd_open(2), the start time and liveness re-read, the
   * `evidence` re-read, the fd not yet readable, then the details: the real uid
   * (PIDFD_GET_INFO, else status `Uid:`) and cmdline, at most `limit` bytes. One result per
   * request, in order. `no-pidfd`: pidfd_open failed with `errno` (not ESRCH). Throws what a
   * read throws (EMFILE…), every fd of the call closed.
   */
  holdAll(procRoot: string, requests: readonly HoldRequest[], limit: number): NativeHold[];
  /**
   * Reads each candidate carrier's environ from the process it holds (native/scan.c
   * `tp_prehold`): per candidate, pidfd_open(2), its stat re-read (the same start time, alive),
   * its environ read — `read`, as `environ` gives it (`gone` when the process the walk saw is
   * gone) — and when that holds `entry`: the fd not yet readable, then the details, as `holdAll`
   * (`hold`: `held`, or `gone`). A candidate that does not carry `entry` is not held (`hold`
   * `gone`); `no-pidfd`: pidfd_open failed (its environ read all the same). `ppid`: the parent
   * its re-read stat showed (-1 unread). With `signal`, a carrier held whose `may[i]` is set is
   * sent `signal.number` through its pidfd right after its details were read (`sent`: the
   * result, as `sendHeld`'s). Throws what a read throws, every fd of the call closed — but once
   * a signal was sent: an error whose `held` holds the results before the failure (their fds
   * open, the caller's: `PreHoldFailure`).
   */
  prehold(
    procRoot: string,
    candidates: readonly ProcStat[],
    entry: string,
    limit: number,
    signal?: PreSignal,
  ): PreHeld[];
  /** poll(2) of `fd` for POLLIN, timeout 0: its revents, or -errno. */
  poll1(fd: number): number;
  /**
   * poll(2) of each of `fds` for POLLIN, timeout 0, in one call: their revents in order, or
   * null when poll failed (each then unknown).
   */
  pollMany(fds: readonly number[]): Int32Array | null;
  /**
   * A held process signalled in one call (native/scan.c `tp_send_held`): 1 when its pidfd has
   * reported the exit (nothing sent), -EBADF when `fd` is not open, else pidfd_send_signal(2):
   * 0 sent, or -errno.
   */
  sendHeld(fd: number, signal: number): number;
}

/**
 * What a found process must still show once its pidfd is open (read after the open: so from the
 * held process): `carrier` — its environ holds `entry` as a whole record (through a live thread
 * when `leaderExited`); `parent` — its ppid is `ppid`; `identity` — its start time alone.
 */
export type Evidence =
  | { kind: 'carrier'; entry: string; leaderExited: boolean }
  | { kind: 'parent'; ppid: number }
  | { kind: 'identity' };

/** A process to hold (`NativeProc.holdAll`): its identity and what must still be true of it. */
export interface HoldRequest {
  id: Identity;
  evidence: Evidence;
}

/** A candidate carrier read through its pidfd (`NativeProc.prehold`). */
export interface PreHeld {
  read: EnvironRead;
  hold: NativeHold;
  ppid: number;
  /** The signal's result (`NativeProc.sendHeld`'s) when it was sent through the hold. */
  sent?: number;
}

/** A signal for `NativeProc.prehold` to send each held carrier whose `may[i]` is set. */
export interface PreSignal {
  number: number;
  may: readonly boolean[];
}

/**
 * The error of a prehold that failed after it had signalled: the results before the failure
 * (`held`: their fds open, the caller's), and what failed (`cause`).
 */
export class PreHoldFailure extends Error {
  constructor(
    readonly held: PreHeld[],
    cause: Error,
  ) {
    super(cause.message, { cause });
  }
}

/**
 * A native hold: `held` (the pidfd, the caller's to close; the uid, and cmdline's outcome with
 * its bytes in `text`), `gone`, or `no-pidfd` (pidfd_open's errno).
 */
export type NativeHold =
  | { kind: 'held'; fd: number; uid: number | undefined; cmdline: ReadOutcome; text: Buffer }
  | { kind: 'gone' }
  | { kind: 'no-pidfd'; errno: number };

const STAGES = ['scandir', 'open', 'read', 'scandir'];
const KINDS: ReadonlyArray<'ok' | 'gone' | 'denied'> = ['ok', 'gone', 'denied'];
const SNAPSHOT_RECORD_HEAD = 66; // tp_stat's record: 8 float64 + a uint16 comm length (native/scan.c)
const WS_TEXT = 1; // tp_walk's sizes (native/scan.c WS_*)
const WS_ENV = 2;
const WS_NOTABLE = 3;
const WS_INDEX = 4;
const WS_FILE = 5;

let cached: NativeProc | null | undefined;
// biome-ignore lint/suspicious/noExplicitAny: a koffi library handle.
let library: any;
let enabled = process.env.TETHER_NATIVE_SCAN !== '0';

/**
 * The native reads, or null: not built, not loadable, or turned off. A load that failed for want
 * of an fd (EMFILE) is tried again at the next call.
 */
export function nativeProc(): NativeProc | null {
  if (!enabled) return null;
  if (cached !== undefined) return cached;
  const c = libc();
  if (!c) return null;
  const path = libraryPath();
  if (path === undefined) {
    cached = null;
    return null;
  }
  try {
    const lib = c.koffi.load(path);
    cached = bind(lib);
    library = lib;
  } catch (error) {
    if (!/EMFILE|ENFILE|too many open files/i.test((error as Error).message) && !libcFailedForFds())
      cached = null;
    return null;
  }
  return cached;
}

/**
 * The loaded library's koffi handle, for the other native functions it carries (./native-files.ts);
 * null when `nativeProc()` is.
 */
// biome-ignore lint/suspicious/noExplicitAny: a koffi library handle.
export function nativeLibrary(): any {
  return nativeProc() ? library : null;
}

let uvErrors: Map<number, [string, string]> | undefined; // read at the first error: a scan makes none

/**
 * An Error worded as Node's fs words its own when `syscall` fails with `errno` (positive) on
 * `path` (and `dest`, a link's or rename's target): `EACCES: permission denied, open '/x'`,
 * with `code`, `errno` (negative), `syscall`, `path` and `dest` set. The words are libuv's
 * (`util.getSystemErrorMap()`, as Node's fs errors have them: `name too long`, not strerror(3)'s
 * `File name too long`); for an errno libuv has no name for, `errnoName` and `describe`'s words,
 * lower-cased. A `write`'s error names no path, as Node's.
 */
export function fsError(
  errno: number,
  syscall: string,
  path: string,
  describe: (errno: number) => string,
  dest?: string,
): NodeJS.ErrnoException {
  uvErrors ??= getSystemErrorMap();
  const uv = uvErrors.get(-errno);
  const code = uv?.[0] ?? errnoName(errno);
  const text = uv?.[1] ?? describe(errno);
  const words = `${text.charAt(0).toLowerCase()}${text.slice(1)}`;
  const where = syscall === 'write' ? '' : dest === undefined ? ` '${path}'` : ` '${path}' -> '${dest}'`;
  const error = new Error(`${code}: ${words}, ${syscall}${where}`) as NodeJS.ErrnoException;
  error.errno = -errno;
  error.code = code;
  error.syscall = syscall;
  if (syscall !== 'write') error.path = path;
  if (dest !== undefined) (error as { dest?: string }).dest = dest;
  return error;
}

/**
 * Turns the native path on or off for this process (tests and benchmarks compare both paths);
 * returns whether it was on.
 */
export function useNativeProc(on: boolean): boolean {
  const was = enabled;
  enabled = on;
  return was;
}

// dist/native/linux-<arch>/libtether-proc.so, seen from dist/proc/ (the package) or from
// src/proc/ (tests run the sources against a built dist/).
function libraryPath(): string | undefined {
  const file = `native/linux-${process.arch}/libtether-proc.so`;
  for (const rel of [`../${file}`, `../../dist/${file}`]) {
    const path = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(path)) return path;
  }
  return undefined;
}

// biome-ignore lint/suspicious/noExplicitAny: a koffi library handle.
function bind(lib: any): NativeProc {
  const walkFn = lib.func(
    'long tp_walk(const char *, int, void *, double, void *, void *, int, void *, void *, void *)',
  );
  const walkTakeFn = lib.func('long tp_walk_take(void *, void *, void *, void *, void *, void *, void *)');
  const statFn = lib.func('long tp_stat(const char *, int, int, void *, void *, long, void *)');
  const environFn = lib.func(
    'long tp_environ(const char *, int, void *, void *, int, double, void *, void *, long, void *)',
  );
  const detailsFn = lib.func('int tp_details(const char *, int, int, long, void *, void *, void *)');
  const holdBatchFn = lib.func(
    'long tp_hold_batch(const char *, int, void *, void *, void *, void *, void *, int, void *, long, void *, void *, void *, long, void *)',
  );
  const preholdFn = lib.func(
    'long tp_prehold(const char *, int, void *, void *, void *, int, void *, long, void *, void *, void *, long, void *, long, int, void *, void *)',
  );
  const cmdlinesFn = lib.func(
    'long tp_cmdlines(const char *, int, void *, int, long, void *, void *, long, void *)',
  );
  const poll1 = lib.func('int tp_poll1(int)');
  const pollManyFn = lib.func('int tp_poll_many(void *, int, void *, void *)');
  const sendHeldFn = lib.func('int tp_send_held(int, int)');
  const strerror = lib.func('const char *tp_strerror(int)');
  const openRoot = lib.func('int tp_open_root(const char *)');
  // /proc opened once (O_DIRECTORY) and kept: every file is then opened relative to it. Only
  // /proc: another root (a test's fake procfs) may be replaced at its path, so it is opened at
  // each call. A failed open (EMFILE) is tried again next time; meanwhile each call opens it.
  let procFd = -1;
  const rootFd = (procRoot: string): number => {
    if (procRoot !== '/proc') return -1;
    if (procFd < 0) {
      const fd = openRoot(procRoot) as number;
      if (fd >= 0) procFd = fd;
    }
    return procFd;
  };
  const onePid = new Int32Array(1);
  const oneFlag = new Uint8Array(1);
  const info = new Int32Array(6);
  const sizes = new Int32Array(6); // tp_walk's WS_*
  const details = new Float64Array(4);
  // One stat record, or a batch of environ records: grows (doubling) with the batch, never per
  // file. (A walk's records are its own arrays: its table reads them for as long as it lives.)
  let out = Buffer.from(new ArrayBuffer(256 * 1024));
  let f64 = new Float64Array(out.buffer);
  const grow = () => {
    out = Buffer.from(new ArrayBuffer(out.length * 2));
    f64 = new Float64Array(out.buffer);
  };
  // The cmdlines of one hold batch: grows (doubling) with the batch, never per file.
  let text = Buffer.from(new ArrayBuffer(64 * 1024));
  const buf = sharedBuffer();
  if (buf.length !== READ_BUFFER_BYTES) throw new Error('the shared read buffer is not 64 KiB');

  // The JS path's error for the same failure: `EMFILE: too many open files, open '/proc/1/stat'`.
  const failure = (procRoot: string, file: string): Error => {
    const [errno = 0, stage = 0, pid = 0, tid = 0] = info;
    const path =
      stage === 0
        ? procRoot
        : tid > 0
          ? `${procRoot}/${pid}/task/${tid}/${file}`
          : `${procRoot}/${pid}/${file}`;
    return fsError(errno, STAGES[stage] ?? 'open', path, (e) => strerror(e) as string);
  };

  const statAt = (at: number): ProcStat => {
    const i = at / 8;
    const commLength = out.readUInt16LE(at + 64);
    return {
      pid: f64[i] as number,
      comm: out.toString('latin1', at + SNAPSHOT_RECORD_HEAD, at + SNAPSHOT_RECORD_HEAD + commLength),
      state: String.fromCharCode(f64[i + 7] as number),
      ppid: f64[i + 1] as number,
      pgid: f64[i + 2] as number,
      sid: f64[i + 3] as number,
      flags: f64[i + 4] as number,
      threads: f64[i + 5] as number,
      startTime: f64[i + 6] as number,
    };
  };
  // The uid and cmdline a details or hold call left in `details` (cmdline bytes: in `buf`).
  const detailsRead = (): { uid: number | undefined; cmdline: ReadOutcome } => {
    const uid = details[0] as number;
    const kind = KINDS[details[1] as number];
    const cmdline: ReadOutcome =
      kind === 'ok'
        ? { kind, length: details[2] as number, truncated: details[3] === 1 }
        : kind === 'gone'
          ? { kind }
          : { kind: 'denied', code: 'EACCES' };
    return { uid: uid < 0 ? undefined : uid, cmdline };
  };
  // The 32 hex digits of a session entry (`TETHER_SESSION_<hex>=1`), as bytes; the last one kept.
  let lastEntry = '';
  const hexBytes = Buffer.alloc(32);
  const entryHex = (entry: string): Buffer | undefined => {
    if (entry !== lastEntry) {
      if (!TAG_ENTRY_PATTERN.test(entry)) return undefined;
      hexBytes.write(entry.slice(TAG_PREFIX.length, TAG_PREFIX.length + 32), 'latin1');
      lastEntry = entry;
    }
    return hexBytes;
  };

  return {
    walk(procRoot, environ) {
      let skipPids: Int32Array | null = null;
      let skipStarts: Float64Array | null = null;
      const skip = environ?.skip ?? [];
      if (skip.length > 0) {
        const sorted = [...skip].sort((a, b) => a.pid - b.pid);
        skipPids = Int32Array.from(sorted, (s) => s.pid);
        skipStarts = Float64Array.from(sorted, (s) => s.startTime);
      }
      const hex = environ ? (entryHex(environ.entry) ?? null) : null;
      const from = environ ? environ.from : -1;
      const n = walkFn(
        procRoot,
        rootFd(procRoot),
        buf,
        from,
        skipPids,
        skipStarts,
        skip.length,
        hex,
        sizes,
        info,
      );
      if (n < 0) throw failure(procRoot, sizes[WS_FILE] === 3 ? 'environ' : 'stat');
      const walk: PackedWalk = {
        count: n,
        rec: new Float64Array(WALK_RECORD * n),
        text: Buffer.allocUnsafe(sizes[WS_TEXT] as number),
        env: Buffer.allocUnsafe(sizes[WS_ENV] as number),
        notable: new Int32Array(sizes[WS_NOTABLE] as number),
        index: new Int32Array(sizes[WS_INDEX] as number),
        firstChild: new Int32Array(n),
        nextSibling: new Int32Array(n),
      };
      if (environ) walk.environ = environ;
      walkTakeFn(walk.rec, walk.text, walk.env, walk.notable, walk.index, walk.firstChild, walk.nextSibling);
      return walk;
    },
    stat(procRoot, pid) {
      const n = statFn(procRoot, rootFd(procRoot), pid, buf, out, out.length, info);
      if (n < 0) throw failure(procRoot, 'stat');
      return n === 0 ? undefined : statAt(0);
    },
    environ(procRoot, pids, leaderExited, budgetMs) {
      const reads: EnvironRead[] = [];
      for (let done = 0; done < pids.length; ) {
        const rest = pids.length - done;
        const p = rest === 1 ? onePid : new Int32Array(rest);
        const z = rest === 1 ? oneFlag : new Uint8Array(rest);
        for (let i = 0; i < rest; i++) {
          p[i] = pids[done + i] as number;
          z[i] = leaderExited[done + i] ? 1 : 0;
        }
        const n = environFn(procRoot, rootFd(procRoot), p, z, rest, budgetMs, buf, out, out.length, info);
        if (n === -2) {
          grow();
          continue;
        }
        if (n < 0) throw failure(procRoot, 'environ');
        const count = info[4] as number;
        envRecords(out, count, reads);
        done += count;
      }
      return reads;
    },
    details(procRoot, pid, limit) {
      if (detailsFn(procRoot, rootFd(procRoot), pid, limit, buf, details, info) < 0) {
        throw failure(procRoot, DETAIL_FILES[info[4] as number] ?? 'cmdline');
      }
      return detailsRead();
    },
    cmdlines(procRoot, pids, limit) {
      const n = pids.length;
      const results: { cmdline: ReadOutcome; text: Buffer }[] = [];
      if (n === 0) return results;
      const p = Int32Array.from(pids);
      const rec = new Float64Array(CMDLINE_RECORD * n);
      if (text.length < limit + 1) text = Buffer.from(new ArrayBuffer(2 * (limit + 1)));
      for (let done = 0; done < n; ) {
        const rest = n - done;
        const got = cmdlinesFn(
          procRoot,
          rootFd(procRoot),
          p.subarray(done),
          rest,
          limit,
          rec.subarray(CMDLINE_RECORD * done),
          text,
          text.length,
          info,
        ) as number;
        if (got < 0) throw failure(procRoot, 'cmdline');
        // This call's cmdlines, copied out of `text` (reused by the next call).
        const used = endOfText(rec, CMDLINE_RECORD, 1, done, got);
        const chunk = used === 0 ? EMPTY : Buffer.from(text.subarray(0, used));
        for (let i = done; i < done + got; i++) {
          const r = CMDLINE_RECORD * i;
          const kind = KINDS[rec[r] as number];
          const cmdline: ReadOutcome =
            kind === 'ok'
              ? { kind, length: rec[r + 2] as number, truncated: rec[r + 3] === 1 }
              : kind === 'gone'
                ? { kind }
                : { kind: 'denied', code: 'EACCES' };
          results.push({ cmdline, text: chunk.subarray(rec[r + 1] as number) });
        }
        done += got;
        if (got < rest) text = Buffer.from(new ArrayBuffer(text.length * 2));
      }
      return results;
    },
    holdAll(procRoot, requests, limit) {
      const n = requests.length;
      const results: NativeHold[] = [];
      if (n === 0) return results;
      const pids = new Int32Array(n);
      const starts = new Float64Array(n);
      const kinds = new Uint8Array(n);
      const via = new Int32Array(n);
      const exited = new Uint8Array(n);
      // One session entry per scan: a request of another is held as `gone` (its environ never
      // held this scan's entry) — the batch takes one.
      let entry: string | undefined;
      for (let i = 0; i < n; i++) {
        const { id, evidence } = requests[i] as HoldRequest;
        pids[i] = id.pid;
        starts[i] = id.startTime;
        kinds[i] = EVIDENCE[evidence.kind];
        if (evidence.kind === 'parent') via[i] = evidence.ppid;
        if (evidence.kind === 'carrier') {
          if (entry !== undefined && entry !== evidence.entry)
            throw new RangeError('one entry per hold batch');
          entry = evidence.entry;
          exited[i] = evidence.leaderExited ? 1 : 0;
        }
      }
      const hex = entry === undefined ? null : (entryHex(entry) ?? null);
      const rec = new Float64Array(HOLD_RECORD * n);
      if (text.length < limit + 1) text = Buffer.from(new ArrayBuffer(2 * (limit + 1)));
      for (let done = 0; done < n; ) {
        const rest = n - done;
        const got = holdBatchFn(
          procRoot,
          rootFd(procRoot),
          pids.subarray(done),
          starts.subarray(done),
          kinds.subarray(done),
          via.subarray(done),
          exited.subarray(done),
          rest,
          hex,
          limit,
          buf,
          rec.subarray(HOLD_RECORD * done),
          text,
          text.length,
          info,
        ) as number;
        if (got < 0) {
          for (const r of results) if (r.kind === 'held') closeFd(r.fd);
          throw failure(procRoot, DETAIL_FILES[info[4] as number] ?? 'stat');
        }
        // This call's cmdlines, copied out of `text` (reused by the next call).
        const used = endOfText(rec, HOLD_RECORD, 4, done, got);
        const chunk = used === 0 ? EMPTY : Buffer.from(text.subarray(0, used));
        for (let i = done; i < done + got; i++) results.push(holdAt(rec, i, chunk));
        done += got;
        if (got < rest) text = Buffer.from(new ArrayBuffer(text.length * 2));
      }
      return results;
    },
    prehold(procRoot, candidates, entry, limit, signal) {
      const n = candidates.length;
      const results: PreHeld[] = [];
      if (n === 0) return results;
      const pids = new Int32Array(n);
      const starts = new Float64Array(n);
      const exited = new Uint8Array(n);
      const may = signal ? new Uint8Array(n) : null;
      for (let i = 0; i < n; i++) {
        const stat = candidates[i] as ProcStat;
        pids[i] = stat.pid;
        starts[i] = stat.startTime;
        exited[i] = stat.state === 'Z' ? 1 : 0; // a zombie leader: read through a live thread
        if (may && signal?.may[i]) may[i] = 1;
      }
      const sig = signal?.number ?? 0;
      const hex = entryHex(entry) ?? null;
      const rec = new Float64Array(HOLD_RECORD * n);
      if (text.length < limit + 1) text = Buffer.from(new ArrayBuffer(2 * (limit + 1)));
      const reads: EnvironRead[] = [];
      for (let done = 0; done < n; ) {
        const rest = n - done;
        const got = preholdFn(
          procRoot,
          rootFd(procRoot),
          pids.subarray(done),
          starts.subarray(done),
          exited.subarray(done),
          rest,
          hex,
          limit,
          buf,
          rec.subarray(HOLD_RECORD * done),
          text,
          text.length,
          out,
          out.length,
          sig,
          may?.subarray(done) ?? null,
          info,
        ) as number;
        const failed = got < 0 || info[5] === PREHOLD_FAILED_AFTER_SIGNAL;
        const error = failed ? failure(procRoot, DETAIL_FILES[info[4] as number] ?? 'stat') : undefined;
        if (got > 0) {
          envRecords(out, got, reads);
          const used = endOfText(rec, HOLD_RECORD, 4, done, got);
          const chunk = used === 0 ? EMPTY : Buffer.from(text.subarray(0, used));
          for (let i = done; i < done + got; i++) {
            const r: PreHeld = {
              read: reads[i] as EnvironRead,
              hold: holdAt(rec, i, chunk),
              ppid: rec[HOLD_RECORD * i + 7] as number,
            };
            const sent = rec[HOLD_RECORD * i + 8] as number;
            if (sent !== NOT_SENT) r.sent = sent;
            results.push(r);
          }
        }
        if (error) {
          // What was signalled is the caller's to report: its holds are handed over, open.
          if (results.some((r) => r.sent !== undefined)) throw new PreHoldFailure(results, error);
          for (const r of results) if (r.hold.kind === 'held') closeFd(r.hold.fd);
          throw error;
        }
        done += got;
        if (got < rest && info[5] === 1) grow();
        else if (got < rest) text = Buffer.from(new ArrayBuffer(text.length * 2));
      }
      return results;
    },
    poll1(fd) {
      return poll1(fd) as number;
    },
    pollMany(fds) {
      const n = fds.length;
      const p = Int32Array.from(fds);
      const revents = new Int32Array(n);
      if (n === 0) return revents;
      return (pollManyFn(p, n, revents, Buffer.allocUnsafe(8 * n)) as number) < 0 ? null : revents;
    },
    sendHeld(fd, signal) {
      return sendHeldFn(fd, signal) as number;
    },
  };
}

// tp_hold_batch's evidence kinds, record and results (native/scan.c), and the files its
// info[4] names.
const EVIDENCE = { identity: 0, carrier: 1, parent: 2 } as const;
const HOLD_RECORD = 10;
const NOT_SENT = 2; // tp_prehold's rec[8] when no signal was sent
const PREHOLD_FAILED_AFTER_SIGNAL = 4; // tp_prehold's info[5]: a read failed after a signal
const CMDLINE_RECORD = 4; // tp_cmdlines' record: kind, offset, length, truncated
const HOLD_GONE = -2;
const HOLD_NO_PIDFD = -3;
const HELD_GONE: NativeHold = { kind: 'gone' };
const DETAIL_FILES = ['stat', 'status', 'cmdline', 'environ'];
const EMPTY = Buffer.alloc(0);

function closeFd(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // EBADF: nothing to close
  }
}

// Member i's hold from its record (its cmdline bytes in `text`, at the record's offset).
function holdAt(rec: Float64Array, i: number, text: Buffer): NativeHold {
  const r = HOLD_RECORD * i;
  const fd = rec[r] as number;
  if (fd === HOLD_GONE) return HELD_GONE;
  if (fd === HOLD_NO_PIDFD) return { kind: 'no-pidfd', errno: rec[r + 1] as number };
  const uid = rec[r + 2] as number;
  const kind = KINDS[rec[r + 3] as number];
  const at = rec[r + 4] as number;
  const cmdline: ReadOutcome =
    kind === 'ok'
      ? { kind, length: rec[r + 5] as number, truncated: rec[r + 6] === 1 }
      : kind === 'gone'
        ? { kind }
        : { kind: 'denied', code: 'EACCES' };
  return { kind: 'held', fd, uid: uid < 0 ? undefined : uid, cmdline, text: text.subarray(at) };
}

// The end of the cmdline bytes records [from, from + count) left in `text`: each record is
// `width` doubles, its text's offset at `at` and its length at `at + 1`.
function endOfText(rec: Float64Array, width: number, at: number, from: number, count: number): number {
  let end = 0;
  for (let i = from; i < from + count; i++) {
    const r = width * i + at;
    end = Math.max(end, (rec[r] as number) + (rec[r + 1] as number));
  }
  return end;
}

const GONE: EnvironRead = { kind: 'gone' };
const DENIED: EnvironRead = { kind: 'denied' };

// `count` environ records of tp_environ / tp_prehold (native/scan.c) from out[0…], onto `reads`.
function envRecords(out: Buffer, count: number, reads: EnvironRead[]): void {
  let at = 0;
  for (let i = 0; i < count; i++) {
    const kind = KINDS[out[at] as number];
    const entryCount = out.readUInt32LE(at + 10);
    if (kind === 'ok') {
      const entries: string[] = [];
      for (let e = 0; e < entryCount; e++) {
        const hex = out.toString('latin1', at + 14 + 32 * e, at + 46 + 32 * e);
        entries.push(`${TAG_PREFIX}${hex}=1`);
      }
      reads.push({ kind, entries, bytes: out.readDoubleLE(at + 2), oversized: out[at + 1] === 1 });
    } else reads.push(kind === 'gone' ? GONE : DENIED);
    at += 14 + 32 * entryCount;
  }
}
