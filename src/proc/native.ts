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
import { TAG_ENTRY_PATTERN, TAG_HEX_DIGITS, TAG_PREFIX } from './tag.js';

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
   * a signal was sent, the read's error is returned as `failure` beside the results before it
   * (`held`: their fds open, the caller's; ./hold.ts throws them as `PreholdFailure`).
   */
  prehold(
    procRoot: string,
    candidates: readonly ProcStat[],
    entry: string,
    limit: number,
    signal?: PreSignal,
  ): { held: PreHeld[]; failure?: Error };
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
 * A native hold: `held` (the pidfd, the caller's to close; the uid, and cmdline's outcome with
 * its bytes in `text`), `gone`, or `no-pidfd` (pidfd_open's errno).
 */
export type NativeHold =
  | { kind: 'held'; fd: number; uid: number | undefined; cmdline: ReadOutcome; text: Buffer }
  | { kind: 'gone' }
  | { kind: 'no-pidfd'; errno: number };

/**
 * native/tether.h's constants this binding reads, by their names there without `TP_` (those the
 * JS path shares are its own constants). test/proc/native-contract.test.ts fails when one
 * differs from the header, and when one of the JS path's (`PF_KTHREAD`…) does.
 */
export const TP = {
  READ_BUFFER_BYTES,
  TAG_PREFIX,
  TAG_HEX_DIGITS,
  KIND_OK: 0,
  KIND_GONE: 1,
  KIND_DENIED: 2,
  INFO_ERRNO: 0,
  INFO_STAGE: 1,
  INFO_PID: 2,
  INFO_TID: 3,
  INFO_FILE: 4,
  INFO_MORE: 5,
  INFO_LENGTH: 6,
  STAGE_ROOT: 0,
  STAGE_OPEN: 1,
  STAGE_READ: 2,
  STAGE_TASKS: 3,
  FILE_STAT: 0,
  FILE_STATUS: 1,
  FILE_CMDLINE: 2,
  FILE_ENVIRON: 3,
  NO_ROOM: -2,
  STAT_COMM_LENGTH_AT: 64,
  STAT_RECORD_HEAD: 66,
  ENV_KIND_AT: 0,
  ENV_OVERSIZED_AT: 1,
  ENV_BYTES_AT: 2,
  ENV_COUNT_AT: 10,
  ENV_HEAD: 14,
  DETAILS_UID: 0,
  DETAILS_KIND: 1,
  DETAILS_CMDLINE_LENGTH: 2,
  DETAILS_TRUNCATED: 3,
  DETAILS_LENGTH: 4,
  CMDLINE_KIND: 0,
  CMDLINE_AT: 1,
  CMDLINE_LENGTH: 2,
  CMDLINE_TRUNCATED: 3,
  CMDLINE_RECORD: 4,
  EVIDENCE_IDENTITY: 0,
  EVIDENCE_CARRIER: 1,
  EVIDENCE_PARENT: 2,
  HOLD_FD: 0,
  HOLD_ERRNO: 1,
  HOLD_UID: 2,
  HOLD_KIND: 3,
  HOLD_TEXT_AT: 4,
  HOLD_CMDLINE_LENGTH: 5,
  HOLD_TRUNCATED: 6,
  HOLD_PPID: 7,
  HOLD_SENT: 8,
  HOLD_RECORD: 10,
  HOLD_GONE: -2,
  HOLD_NO_PIDFD: -3,
  NOT_SENT: 2,
  PREHOLD_ENV_FULL: 1,
  PREHOLD_TEXT_FULL: 2,
  PREHOLD_FAILED: 3,
  PREHOLD_FAILED_AFTER_SIGNAL: 4,
  // TP_W_*: src/proc/table.ts reads the walk's records (the test reads its W_* from its source).
  WALK_RECORD,
  WS_RECORDS: 0,
  WS_TEXT: 1,
  WS_ENV: 2,
  WS_NOTABLE: 3,
  WS_INDEX: 4,
  WS_FILE: 5,
  WS_LENGTH: 6,
  // native/spool.c's (src/proc/native-files.ts)
  SPOOL_STAGE_OPEN: 1,
  SPOOL_STAGE_WRITE: 2,
  SPOOL_STAGE_LINK: 3,
  SPOOL_STAGE_RENAME: 4,
  SPOOL_STAGE_READ: 5,
  SPOOL_STAGE_LSTAT: 6,
  SPOOL_STAGE_MKDIR: 7,
  SPOOL_NOT_REGULAR: -100_000,
} as const;

/**
 * The structs of native/tether.h in koffi's words, member by member, in order (types as in
 * NATIVE_FUNCTIONS). koffi builds one from a JS object at each call that takes it.
 */
export const NATIVE_STRUCTS = {
  tp_proc: [
    ['root', 'const char *'],
    ['rootfd', 'int'],
    ['buf', 'void *'],
    ['info', 'void *'],
  ],
  tp_walk_args: [
    ['env_from', 'double'],
    ['skip_pids', 'void *'],
    ['skip_starts', 'void *'],
    ['skip_n', 'int'],
    ['entry_hex', 'void *'],
  ],
  tp_environ_args: [
    ['pids', 'void *'],
    ['leader_exited', 'void *'],
    ['n', 'int'],
    ['budget_ms', 'double'],
    ['out', 'void *'],
    ['cap', 'long'],
  ],
  tp_cmdlines_args: [
    ['pids', 'void *'],
    ['n', 'int'],
    ['limit', 'long'],
    ['rec', 'void *'],
    ['text', 'void *'],
    ['text_cap', 'long'],
  ],
  tp_hold_args: [
    ['pids', 'void *'],
    ['start_times', 'void *'],
    ['evidence', 'void *'],
    ['via', 'void *'],
    ['leader_exited', 'void *'],
    ['n', 'int'],
    ['entry_hex', 'void *'],
    ['cmdline_limit', 'long'],
    ['rec', 'void *'],
    ['text', 'void *'],
    ['text_cap', 'long'],
  ],
  tp_prehold_args: [
    ['pids', 'void *'],
    ['start_times', 'void *'],
    ['leader_exited', 'void *'],
    ['n', 'int'],
    ['entry_hex', 'void *'],
    ['cmdline_limit', 'long'],
    ['rec', 'void *'],
    ['text', 'void *'],
    ['text_cap', 'long'],
    ['env', 'void *'],
    ['env_cap', 'long'],
    ['sig', 'int'],
    ['may_signal', 'void *'],
  ],
} as const;

/**
 * The tp_* functions of native/tether.h in koffi's words, each `[result, ...parameters]`: a C
 * string is `const char *`, a struct of NATIVE_STRUCTS is `<name> *`, any other pointer `void *`
 * (a TypedArray or Buffer, passed in place and written there). test/proc/native-contract.test.ts
 * derives the same table from the header.
 */
export const NATIVE_FUNCTIONS = {
  tp_open_root: ['int', 'const char *'],
  tp_walk: ['long', 'tp_proc *', 'tp_walk_args *', 'void *'],
  tp_walk_take: ['long', 'void *', 'void *', 'void *', 'void *', 'void *', 'void *', 'void *'],
  tp_stat: ['long', 'const char *', 'int', 'int', 'void *', 'void *', 'long', 'void *'],
  tp_environ: ['long', 'tp_proc *', 'tp_environ_args *'],
  tp_details: ['int', 'const char *', 'int', 'int', 'long', 'void *', 'void *', 'void *'],
  tp_cmdlines: ['long', 'tp_proc *', 'tp_cmdlines_args *'],
  tp_hold_batch: ['long', 'tp_proc *', 'tp_hold_args *'],
  tp_prehold: ['long', 'tp_proc *', 'tp_prehold_args *'],
  tp_poll1: ['int', 'int'],
  tp_poll_many: ['int', 'void *', 'int', 'void *', 'void *'],
  tp_send_held: ['int', 'int', 'int'],
  tp_strerror: ['const char *', 'int'],
  tp_head: ['long', 'const char *', 'void *', 'long', 'void *'],
  tp_find_addon: ['int', 'const char *', 'const char *', 'void *', 'int', 'void *', 'long'],
  tp_spool_dir: ['int', 'const char *', 'void *'],
  tp_spool_put: ['int', 'const char *', 'const char *', 'void *', 'long', 'int', 'void *'],
  tp_host: ['int', 'void *', 'void *', 'long', 'void *'],
} as const;

/** A tp_* function of the table, called through koffi. */
// biome-ignore lint/suspicious/noExplicitAny: koffi converts each argument by the table's type.
export type NativeFunction = (...args: any[]) => unknown;

let structsDeclared = false;

/**
 * `name` of the loaded library, declared to koffi by its row of NATIVE_FUNCTIONS (the structs of
 * NATIVE_STRUCTS declared first, once: koffi's type names are global).
 */
// biome-ignore lint/suspicious/noExplicitAny: a koffi library handle.
export function nativeFunction(lib: any, name: keyof typeof NATIVE_FUNCTIONS): NativeFunction {
  if (!structsDeclared) {
    const koffi = libc()?.koffi;
    for (const [struct, members] of Object.entries(NATIVE_STRUCTS))
      koffi.struct(struct, Object.fromEntries(members));
    structsDeclared = true;
  }
  const [result, ...parameters] = NATIVE_FUNCTIONS[name];
  return lib.func(name, result, parameters);
}

// Node's syscall name for a failed stage; the kinds of a read; the file info[INFO_FILE] names.
const STAGES: Record<number, string> = {
  [TP.STAGE_ROOT]: 'scandir',
  [TP.STAGE_OPEN]: 'open',
  [TP.STAGE_READ]: 'read',
  [TP.STAGE_TASKS]: 'scandir',
};
const KINDS: Record<number, 'ok' | 'gone' | 'denied'> = {
  [TP.KIND_OK]: 'ok',
  [TP.KIND_GONE]: 'gone',
  [TP.KIND_DENIED]: 'denied',
};
const FILES: Record<number, string> = {
  [TP.FILE_STAT]: 'stat',
  [TP.FILE_STATUS]: 'status',
  [TP.FILE_CMDLINE]: 'cmdline',
  [TP.FILE_ENVIRON]: 'environ',
};
const EVIDENCE = {
  identity: TP.EVIDENCE_IDENTITY,
  carrier: TP.EVIDENCE_CARRIER,
  parent: TP.EVIDENCE_PARENT,
} as const;

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
    cached = new NativeReads(lib);
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

type ScanFunctions = Record<
  | 'tp_open_root'
  | 'tp_walk'
  | 'tp_walk_take'
  | 'tp_stat'
  | 'tp_environ'
  | 'tp_details'
  | 'tp_cmdlines'
  | 'tp_hold_batch'
  | 'tp_prehold'
  | 'tp_poll1'
  | 'tp_poll_many'
  | 'tp_send_held'
  | 'tp_strerror',
  NativeFunction
>;

// The reads of native/scan.c, with the buffers they share: each grows (doubling) with a batch,
// never per file, and every file is read through the JS path's shared buffer.
class NativeReads implements NativeProc {
  private readonly fn: ScanFunctions;
  // /proc opened once (O_DIRECTORY) and kept: every file is then opened relative to it. Only
  // /proc: another root (a test's fake procfs) may be replaced at its path, so it is opened at
  // each call. A failed open (EMFILE) is tried again next time; meanwhile each call opens it.
  private procFd = -1;
  private readonly onePid = new Int32Array(1);
  private readonly oneFlag = new Uint8Array(1);
  private readonly info = new Int32Array(TP.INFO_LENGTH);
  private readonly sizes = new Int32Array(TP.WS_LENGTH);
  private readonly detailsOut = new Float64Array(TP.DETAILS_LENGTH);
  // One stat record, or a batch of environ records. (A walk's records are its own arrays: its
  // table reads them for as long as it lives.)
  private out = Buffer.from(new ArrayBuffer(256 * 1024));
  private f64 = new Float64Array(this.out.buffer);
  // The cmdlines of one hold batch.
  private text = Buffer.from(new ArrayBuffer(64 * 1024));
  private readonly buf = sharedBuffer();
  // The 32 hex digits of a session entry (`TETHER_SESSION_<hex>=1`), as bytes; the last one kept.
  private lastEntry = '';
  private readonly hexBytes = Buffer.alloc(TP.TAG_HEX_DIGITS);

  // biome-ignore lint/suspicious/noExplicitAny: a koffi library handle.
  constructor(lib: any) {
    const fn: Partial<ScanFunctions> = {};
    for (const name of SCAN_FUNCTIONS) fn[name] = nativeFunction(lib, name);
    this.fn = fn as ScanFunctions;
    if (this.buf.length !== READ_BUFFER_BYTES) throw new Error('the shared read buffer is not 64 KiB');
  }

  private rootFd(procRoot: string): number {
    if (procRoot !== '/proc') return -1;
    if (this.procFd < 0) {
      const fd = this.fn.tp_open_root(procRoot) as number;
      if (fd >= 0) this.procFd = fd;
    }
    return this.procFd;
  }

  // Where a batch call reads (native/tether.h `struct tp_proc`).
  private proc(procRoot: string) {
    return { root: procRoot, rootfd: this.rootFd(procRoot), buf: this.buf, info: this.info };
  }

  private grow(): void {
    this.out = Buffer.from(new ArrayBuffer(this.out.length * 2));
    this.f64 = new Float64Array(this.out.buffer);
  }

  // Room for one cmdline of `limit` bytes (and one more) in `text`.
  private textFor(limit: number): void {
    if (this.text.length < limit + 1) this.text = Buffer.from(new ArrayBuffer(2 * (limit + 1)));
  }

  // The JS path's error for the same failure: `EMFILE: too many open files, open '/proc/1/stat'`.
  private failure(procRoot: string, file: string): Error {
    const info = this.info;
    const errno = info[TP.INFO_ERRNO] ?? 0;
    const stage = info[TP.INFO_STAGE] ?? 0;
    const pid = info[TP.INFO_PID] ?? 0;
    const tid = info[TP.INFO_TID] ?? 0;
    const path =
      stage === TP.STAGE_ROOT
        ? procRoot
        : tid > 0
          ? `${procRoot}/${pid}/task/${tid}/${file}`
          : `${procRoot}/${pid}/${file}`;
    return fsError(errno, STAGES[stage] ?? 'open', path, (e) => this.fn.tp_strerror(e) as string);
  }

  // The failure of a call whose info[INFO_FILE] names the file (`otherwise` when it names none).
  private fileFailure(procRoot: string, otherwise: string): Error {
    return this.failure(procRoot, FILES[this.info[TP.INFO_FILE] as number] ?? otherwise);
  }

  private entryHex(entry: string): Buffer | undefined {
    if (entry !== this.lastEntry) {
      if (!TAG_ENTRY_PATTERN.test(entry)) return undefined;
      const at = TAG_PREFIX.length;
      this.hexBytes.write(entry.slice(at, at + TP.TAG_HEX_DIGITS), 'latin1');
      this.lastEntry = entry;
    }
    return this.hexBytes;
  }

  walk(procRoot: string, environ?: WalkEnviron): PackedWalk {
    let skipPids: Int32Array | null = null;
    let skipStarts: Float64Array | null = null;
    const skip = environ?.skip ?? [];
    if (skip.length > 0) {
      const sorted = [...skip].sort((a, b) => a.pid - b.pid);
      skipPids = Int32Array.from(sorted, (s) => s.pid);
      skipStarts = Float64Array.from(sorted, (s) => s.startTime);
    }
    const hex = environ ? (this.entryHex(environ.entry) ?? null) : null;
    const from = environ ? environ.from : -1;
    const sizes = this.sizes;
    const n = this.fn.tp_walk(
      this.proc(procRoot),
      {
        env_from: from,
        skip_pids: skipPids,
        skip_starts: skipStarts,
        skip_n: skip.length,
        entry_hex: hex,
      },
      sizes,
    );
    if ((n as number) < 0)
      throw this.failure(procRoot, sizes[TP.WS_FILE] === TP.FILE_ENVIRON ? 'environ' : 'stat');
    const count = n as number;
    const walk: PackedWalk = {
      count,
      rec: new Float64Array(WALK_RECORD * count),
      text: Buffer.allocUnsafe(sizes[TP.WS_TEXT] as number),
      env: Buffer.allocUnsafe(sizes[TP.WS_ENV] as number),
      notable: new Int32Array(sizes[TP.WS_NOTABLE] as number),
      index: new Int32Array(sizes[TP.WS_INDEX] as number),
      firstChild: new Int32Array(count),
      nextSibling: new Int32Array(count),
    };
    if (environ) walk.environ = environ;
    const w = walk;
    this.fn.tp_walk_take(w.rec, w.text, w.env, w.notable, w.index, w.firstChild, w.nextSibling);
    return walk;
  }

  stat(procRoot: string, pid: number): ProcStat | undefined {
    const { out, info } = this;
    const n = this.fn.tp_stat(
      procRoot,
      this.rootFd(procRoot),
      pid,
      this.buf,
      out,
      out.length,
      info,
    ) as number;
    if (n < 0) throw this.failure(procRoot, 'stat');
    if (n === 0) return undefined;
    const f64 = this.f64;
    const commLength = out.readUInt16LE(TP.STAT_COMM_LENGTH_AT);
    const head = TP.STAT_RECORD_HEAD;
    return {
      pid: f64[0] as number,
      comm: out.toString('latin1', head, head + commLength),
      state: String.fromCharCode(f64[7] as number),
      ppid: f64[1] as number,
      pgid: f64[2] as number,
      sid: f64[3] as number,
      flags: f64[4] as number,
      threads: f64[5] as number,
      startTime: f64[6] as number,
    };
  }

  environ(
    procRoot: string,
    pids: readonly number[],
    leaderExited: readonly boolean[],
    budgetMs: number,
  ): EnvironRead[] {
    const reads: EnvironRead[] = [];
    for (let done = 0; done < pids.length; ) {
      const rest = pids.length - done;
      const p = rest === 1 ? this.onePid : new Int32Array(rest);
      const z = rest === 1 ? this.oneFlag : new Uint8Array(rest);
      for (let i = 0; i < rest; i++) {
        p[i] = pids[done + i] as number;
        z[i] = leaderExited[done + i] ? 1 : 0;
      }
      const { out, info } = this;
      const n = this.fn.tp_environ(this.proc(procRoot), {
        pids: p,
        leader_exited: z,
        n: rest,
        budget_ms: budgetMs,
        out,
        cap: out.length,
      });
      if (n === TP.NO_ROOM) {
        this.grow();
        continue;
      }
      if ((n as number) < 0) throw this.failure(procRoot, 'environ');
      const count = info[TP.INFO_FILE] as number; // tp_environ: the pids done
      envRecords(out, count, reads);
      done += count;
    }
    return reads;
  }

  details(procRoot: string, pid: number, limit: number): { uid: number | undefined; cmdline: ReadOutcome } {
    const d = this.detailsOut;
    if (
      (this.fn.tp_details(procRoot, this.rootFd(procRoot), pid, limit, this.buf, d, this.info) as number) < 0
    )
      throw this.fileFailure(procRoot, 'cmdline');
    const uid = d[TP.DETAILS_UID] as number;
    const cmdline = outcome(d[TP.DETAILS_KIND], d[TP.DETAILS_CMDLINE_LENGTH], d[TP.DETAILS_TRUNCATED]);
    return { uid: uid < 0 ? undefined : uid, cmdline };
  }

  cmdlines(
    procRoot: string,
    pids: readonly number[],
    limit: number,
  ): { cmdline: ReadOutcome; text: Buffer }[] {
    const n = pids.length;
    const results: { cmdline: ReadOutcome; text: Buffer }[] = [];
    if (n === 0) return results;
    const p = Int32Array.from(pids);
    const width = TP.CMDLINE_RECORD;
    const rec = new Float64Array(width * n);
    this.textFor(limit);
    for (let done = 0; done < n; ) {
      const rest = n - done;
      const text = this.text;
      const got = this.fn.tp_cmdlines(this.proc(procRoot), {
        pids: p.subarray(done),
        n: rest,
        limit,
        rec: rec.subarray(width * done),
        text,
        text_cap: text.length,
      });
      if ((got as number) < 0) throw this.failure(procRoot, 'cmdline');
      const chunk = textChunk(text, rec, width, TP.CMDLINE_AT, done, got as number);
      for (let i = done; i < done + (got as number); i++) {
        const r = width * i;
        const cmdline = outcome(
          rec[r + TP.CMDLINE_KIND],
          rec[r + TP.CMDLINE_LENGTH],
          rec[r + TP.CMDLINE_TRUNCATED],
        );
        results.push({ cmdline, text: chunk.subarray(rec[r + TP.CMDLINE_AT] as number) });
      }
      done += got as number;
      if ((got as number) < rest) this.text = Buffer.from(new ArrayBuffer(text.length * 2));
    }
    return results;
  }

  holdAll(procRoot: string, requests: readonly HoldRequest[], limit: number): NativeHold[] {
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
        if (entry !== undefined && entry !== evidence.entry) throw new RangeError('one entry per hold batch');
        entry = evidence.entry;
        exited[i] = evidence.leaderExited ? 1 : 0;
      }
    }
    const hex = entry === undefined ? null : (this.entryHex(entry) ?? null);
    const width = TP.HOLD_RECORD;
    const rec = new Float64Array(width * n);
    this.textFor(limit);
    for (let done = 0; done < n; ) {
      const rest = n - done;
      const text = this.text;
      const got = this.fn.tp_hold_batch(this.proc(procRoot), {
        pids: pids.subarray(done),
        start_times: starts.subarray(done),
        evidence: kinds.subarray(done),
        via: via.subarray(done),
        leader_exited: exited.subarray(done),
        n: rest,
        entry_hex: hex,
        cmdline_limit: limit,
        rec: rec.subarray(width * done),
        text,
        text_cap: text.length,
      }) as number;
      if (got < 0) {
        for (const r of results) if (r.kind === 'held') closeFd(r.fd);
        throw this.fileFailure(procRoot, 'stat');
      }
      const chunk = textChunk(text, rec, width, TP.HOLD_TEXT_AT, done, got);
      for (let i = done; i < done + got; i++) results.push(holdAt(rec, i, chunk));
      done += got;
      if (got < rest) this.text = Buffer.from(new ArrayBuffer(text.length * 2));
    }
    return results;
  }

  prehold(
    procRoot: string,
    candidates: readonly ProcStat[],
    entry: string,
    limit: number,
    signal?: PreSignal,
  ): { held: PreHeld[]; failure?: Error } {
    const n = candidates.length;
    const results: PreHeld[] = [];
    if (n === 0) return { held: results };
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
    const hex = this.entryHex(entry) ?? null;
    const width = TP.HOLD_RECORD;
    const rec = new Float64Array(width * n);
    this.textFor(limit);
    const reads: EnvironRead[] = [];
    for (let done = 0; done < n; ) {
      const rest = n - done;
      const { text, out, info } = this;
      const got = this.fn.tp_prehold(this.proc(procRoot), {
        pids: pids.subarray(done),
        start_times: starts.subarray(done),
        leader_exited: exited.subarray(done),
        n: rest,
        entry_hex: hex,
        cmdline_limit: limit,
        rec: rec.subarray(width * done),
        text,
        text_cap: text.length,
        env: out,
        env_cap: out.length,
        sig,
        may_signal: may?.subarray(done) ?? null,
      }) as number;
      const stopped = info[TP.INFO_MORE];
      const failed = got < 0 || stopped === TP.PREHOLD_FAILED_AFTER_SIGNAL;
      const error = failed ? this.fileFailure(procRoot, 'stat') : undefined;
      if (got > 0) {
        envRecords(out, got, reads);
        const chunk = textChunk(text, rec, width, TP.HOLD_TEXT_AT, done, got);
        for (let i = done; i < done + got; i++) {
          const r: PreHeld = {
            read: reads[i] as EnvironRead,
            hold: holdAt(rec, i, chunk),
            ppid: rec[width * i + TP.HOLD_PPID] as number,
          };
          const sent = rec[width * i + TP.HOLD_SENT] as number;
          if (sent !== TP.NOT_SENT) r.sent = sent;
          results.push(r);
        }
      }
      if (error) {
        // What was signalled is the caller's to report: its holds are handed over, open.
        if (results.some((r) => r.sent !== undefined)) return { held: results, failure: error };
        for (const r of results) if (r.hold.kind === 'held') closeFd(r.hold.fd);
        throw error;
      }
      done += got;
      if (got < rest && stopped === TP.PREHOLD_ENV_FULL) this.grow();
      else if (got < rest) this.text = Buffer.from(new ArrayBuffer(text.length * 2));
    }
    return { held: results };
  }

  poll1(fd: number): number {
    return this.fn.tp_poll1(fd) as number;
  }

  pollMany(fds: readonly number[]): Int32Array | null {
    const n = fds.length;
    const p = Int32Array.from(fds);
    const revents = new Int32Array(n);
    if (n === 0) return revents;
    return (this.fn.tp_poll_many(p, n, revents, Buffer.allocUnsafe(8 * n)) as number) < 0 ? null : revents;
  }

  sendHeld(fd: number, signal: number): number {
    return this.fn.tp_send_held(fd, signal) as number;
  }
}

const SCAN_FUNCTIONS: readonly (keyof ScanFunctions)[] = [
  'tp_open_root',
  'tp_walk',
  'tp_walk_take',
  'tp_stat',
  'tp_environ',
  'tp_details',
  'tp_cmdlines',
  'tp_hold_batch',
  'tp_prehold',
  'tp_poll1',
  'tp_poll_many',
  'tp_send_held',
  'tp_strerror',
];

const HELD_GONE: NativeHold = { kind: 'gone' };
const EMPTY = Buffer.alloc(0);

function closeFd(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // EBADF: nothing to close
  }
}

// A cmdline's outcome from a record's kind, length and truncated flag.
function outcome(
  kind: number | undefined,
  length: number | undefined,
  truncated: number | undefined,
): ReadOutcome {
  const k = KINDS[kind as number];
  if (k === 'ok') return { kind: k, length: length as number, truncated: truncated === 1 };
  return k === 'gone' ? { kind: 'gone' } : { kind: 'denied', code: 'EACCES' };
}

// Member i's hold from its record (its cmdline bytes in `text`, at the record's offset).
function holdAt(rec: Float64Array, i: number, text: Buffer): NativeHold {
  const r = TP.HOLD_RECORD * i;
  const fd = rec[r + TP.HOLD_FD] as number;
  if (fd === TP.HOLD_GONE) return HELD_GONE;
  if (fd === TP.HOLD_NO_PIDFD) return { kind: 'no-pidfd', errno: rec[r + TP.HOLD_ERRNO] as number };
  const uid = rec[r + TP.HOLD_UID] as number;
  const cmdline = outcome(rec[r + TP.HOLD_KIND], rec[r + TP.HOLD_CMDLINE_LENGTH], rec[r + TP.HOLD_TRUNCATED]);
  const at = rec[r + TP.HOLD_TEXT_AT] as number;
  return { kind: 'held', fd, uid: uid < 0 ? undefined : uid, cmdline, text: text.subarray(at) };
}

// The cmdline bytes of records [from, from + count) copied out of `text` (reused by the next
// call): each record is `width` doubles, its text's offset at `at` and its length at `at + 1`.
function textChunk(
  text: Buffer,
  rec: Float64Array,
  width: number,
  at: number,
  from: number,
  count: number,
): Buffer {
  let end = 0;
  for (let i = from; i < from + count; i++) {
    const r = width * i + at;
    end = Math.max(end, (rec[r] as number) + (rec[r + 1] as number));
  }
  return end === 0 ? EMPTY : Buffer.from(text.subarray(0, end));
}

const GONE: EnvironRead = { kind: 'gone' };
const DENIED: EnvironRead = { kind: 'denied' };

// `count` environ records of tp_environ / tp_prehold (native/tether.h TP_ENV_*) from out[0…],
// onto `reads`.
function envRecords(out: Buffer, count: number, reads: EnvironRead[]): void {
  const hexDigits = TP.TAG_HEX_DIGITS;
  let at = 0;
  for (let i = 0; i < count; i++) {
    const kind = KINDS[out[at + TP.ENV_KIND_AT] as number];
    const entryCount = out.readUInt32LE(at + TP.ENV_COUNT_AT);
    const first = at + TP.ENV_HEAD;
    if (kind === 'ok') {
      const entries: string[] = [];
      for (let e = 0; e < entryCount; e++) {
        const hex = out.toString('latin1', first + hexDigits * e, first + hexDigits * (e + 1));
        entries.push(`${TAG_PREFIX}${hex}=1`);
      }
      const bytes = out.readDoubleLE(at + TP.ENV_BYTES_AT);
      reads.push({ kind, entries, bytes, oversized: out[at + TP.ENV_OVERSIZED_AT] === 1 });
    } else reads.push(kind === 'gone' ? GONE : DENIED);
    at = first + hexDigits * entryCount;
  }
}
