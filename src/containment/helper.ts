// The subreaper layer's client (docs/containment.md, "The helper"). The helper is native
// (native/helper.c, built per architecture into dist/native/linux-<arch>/tether-helper by
// scripts/build-helper.mjs; `helperPath` picks this machine's): a separate process, so the
// supervisor never becomes a subreaper itself (libuv never reaps adopted orphans, and a
// waitpid(-1) in Node steals libuv's own children).
//
// The wire protocol (fds 3-5, each line in each direction) is the table in docs/containment.md,
// "The helper's wire protocol"; ./helper-protocol.ts reads it. `startHelper` is its steps in
// order: the pipes, the spawn, the caller's work while it starts (`whileStarting`), the bounded
// wait for `started`, the holds and `go`, then the
// status lines followed to the payload's end.
import { type ChildProcess, type StdioOptions, spawn } from 'node:child_process';
import { accessSync, closeSync, constants, readdirSync, readSync, statSync, writeSync } from 'node:fs';
import { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { errnoName, libc, libcError, POLLIN, pollOne, signalName } from '../libc.js';
import { type Identity, identityOf, readStat } from '../proc/identity.js';
import { readText } from '../proc/read.js';
import { createSignaller, type Hold, releaseHold } from '../sweep/signal.js';
import { describeTarget, hostTarget, readElf, runsOn } from './elf.js';
import {
  type ChildrenAnswer,
  CONTROL,
  findAnswer,
  type HelperStatus,
  parseStatusLine,
} from './helper-protocol.js';
import { helperFile, PREBUILT_ARCHES } from './prebuilt.js';

// The fallback for an architecture without a prebuilt helper (or a checkout not yet built):
// this script, shipped in the package, compiles native/helper.c with cc.
const BUILD_SCRIPT = fileURLToPath(new URL('../../scripts/build-helper.mjs', import.meta.url));
const MISSING = 'missing';
/** Per path: the verdict on its header, for the file version (dev, inode, size, mtime) read. */
const verdicts = new Map<string, { version: string; why: string | undefined }>();

// Why the file at `path` cannot be this process's helper: MISSING, a reason, or undefined (it
// can). The header is read once per file version: a rebuild renames a new file over the old.
function unusable(path: string): string | undefined {
  let version: string;
  try {
    const st = statSync(path);
    if (!st.isFile()) return 'is not a regular file';
    version = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
    accessSync(path, constants.X_OK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return MISSING;
    return code === 'EACCES' ? 'is not executable' : `cannot be read (${code})`;
  }
  const known = verdicts.get(path);
  if (known?.version === version) return known.why;
  let why: string | undefined;
  try {
    const head = readElf(path);
    const host = hostTarget();
    if (head.kind === 'other') why = `is ${head.reason}`;
    else if (head.kind === 'elf' && !runsOn(head.target, host)) {
      why = `is built for ${describeTarget(head.target)}, not for this process's ${describeTarget(host)}: it cannot exec here`;
    }
  } catch (error) {
    why = `cannot be read (${(error as NodeJS.ErrnoException).code})`;
  }
  verdicts.set(path, { version, why });
  return why;
}

/**
 * Where this machine's helper is: `TETHER_HELPER` when set, else the package's
 * dist/native/linux-<process.arch>/tether-helper (also when this module runs from src/, as
 * under the tests). The file must be executable and, when it is an ELF file, built for this
 * process's architecture (machine, class, byte order: `readElf`); a `#!` script is taken as is.
 * Returns the path, or why there is none (`reason`, shown in the NO_HELPER warning): it names
 * the architectures, and for one without a prebuilt helper the command that builds one with cc.
 */
export function helperPath(): { path: string } | { reason: string } {
  const override = process.env.TETHER_HELPER;
  if (override === '') return { reason: 'the helper is disabled (TETHER_HELPER is empty)' };
  if (override) {
    const why = unusable(override);
    if (why === undefined) return { path: override };
    return { reason: `the helper at TETHER_HELPER=${override} ${why === MISSING ? 'does not exist' : why}` };
  }
  const file = helperFile(process.arch);
  for (const relative of [`../${file}`, `../../dist/${file}`]) {
    const path = fileURLToPath(new URL(relative, import.meta.url));
    const why = unusable(path);
    if (why === undefined) return { path };
    if (why !== MISSING) return { reason: `the helper at ${path} ${why}` };
  }
  const build = `node ${BUILD_SCRIPT} --host`;
  const host = `linux-${process.arch}`;
  return PREBUILT_ARCHES.includes(process.arch)
    ? {
        reason: `the helper for ${host} is not built (dist/${file}): \`npm run build\` or \`${build}\` compiles it with cc`,
      }
    : {
        reason: `this package carries no helper for ${host} (prebuilt: ${PREBUILT_ARCHES.map((a) => `linux-${a}`).join(', ')}): \`${build}\` compiles one (musl-gcc where installed, else cc)`,
      };
}

/** What `startHelper` needs: the payload, its stdio, and the dead man's switch's budgets (ms). */
export interface HelperOptions {
  command: string;
  args: readonly string[];
  cwd?: string;
  env: NodeJS.ProcessEnv;
  /** Only fds 0–2 pass through the helper. */
  stdio: StdioOptions;
  graceMs: number;
  killAfterMs: number;
  /** The session's cgroup directory: the payload joins it before exec. */
  cgroup?: string;
  /** Run the payload as the child of an init in a new PID namespace. */
  pidns: boolean;
  procRoot: string;
  /** Receives each `warn` line the helper writes before the payload's end (a failed system call). */
  onWarning?: (warning: HelperWarning) => void;
  /**
   * Called once the helper process is spawned, before the wait for its `started` line: work that
   * must be done before the payload's go (the session's ledger begin) runs while the helper
   * starts. What it throws is rethrown after the helper is killed before its go: the payload
   * never execs.
   */
  whileStarting?: () => void;
}

/** How the payload ended, as the helper saw it. */
export type PayloadEnd =
  /** `signalNumber`: the signal that ended it, also when Node has no name for it (real-time). */
  | { kind: 'exit'; exitCode: number | null; signal: NodeJS.Signals | null; signalNumber?: number }
  /** exec(2) (or joining the cgroup, or setting up the namespace) failed in the child. */
  | { kind: 'exec-failed'; stage: string; errno: string }
  /**
   * The helper ended before it reported the payload's end (it was killed), or a PID
   * namespace's init was killed first: the status is unknown.
   */
  | { kind: 'lost' };

/** A running helper and its payload. */
export interface Helper {
  child: ChildProcess;
  /** The helper itself: never a member of the session, every descendant of it is. */
  helper: Identity;
  /** With a PID namespace: its init (as this namespace sees it), also never a member. */
  init?: Identity;
  /** The payload (pid as this namespace sees it, start time). */
  payload: Identity;
  /**
   * The payload's pidfd, opened before it could exec (src/sweep/signal.ts `Hold`; fd -1 without
   * pidfd, or on EMFILE — then `why` names the errno). The caller owns it: `releaseHold` it.
   */
  payloadHold: Hold;
  /**
   * The helper's own pidfd, and its init's with a PID namespace, opened before the payload's
   * go: a root is trusted only while its hold has not reported its exit (a released helper's
   * pid, reused, must never make a bystander's children the session's). The caller owns them.
   */
  helperHold: Hold;
  initHold?: Hold;
  end: Promise<PayloadEnd>;
  /**
   * Asks the helper whether it has any child (waitid(2) there): true when none — its whole
   * subtree is gone; false when it has one; undefined when it cannot tell (PID namespace), is
   * gone, or does not answer within 20 ms (stopped). Synchronous: for the sweep's rounds.
   */
  childless(): boolean | undefined;
  /**
   * Asks the helper whether it has a child other than the `kept` processes (each told to it once,
   * by identity: `keep PID START`), waiting up to `boundMs` (ms) for its answer: `none` (no
   * child but kept ones: nothing else of its subtree is left), `child`, `unknown` (it cannot
   * tell: a PID namespace's init is always its child); undefined when it did not answer in time
   * (stopped, slow) or is gone. A late answer to an earlier ask that went unanswered counts (a
   * helper that had no child then has none now). Synchronous: for the sweep's rounds.
   */
  ask(kept: readonly Identity[], boundMs: number): ChildrenAnswer | undefined;
  /** Tells the helper to exit now (after the sweep). Idempotent, synchronous. */
  release(): void;
  /**
   * Closes the control pipe without `release` (when the supervisor's own sweep could not run):
   * the helper's dead man's switch ends its subtree itself — TERM, grace, KILL, cgroup.kill —
   * removes the cgroup and exits. Idempotent, synchronous; a no-op after `release`.
   */
  abandon(): void;
  /** Resolves when the helper process has exited (Node saw it end). */
  exited: Promise<void>;
}

/**
 * Why the helper could not be used: `unavailable` (fall back to the env tag, and say so),
 * `refused` (what was asked cannot be done here), or `spawn-failed` (spawn(2) of the helper
 * failed for a reason that is the command's own — a missing cwd, E2BIG, an argument Node
 * refuses: the command's own start failure is that one; see `commandsOwn`).
 */
export class HelperStartError extends Error {
  constructor(
    readonly kind: 'unavailable' | 'refused' | 'spawn-failed',
    message: string,
    /**
     * When spawn(2) of the helper failed with an errno Node reports only on the next tick
     * (EMFILE, ENFILE, EAGAIN): resolves to that errno's code, for the warning's message.
     */
    readonly errno?: Promise<string>,
    /** `spawn-failed` from a throw: what Node threw (E2BIG…), the command's start failure. */
    readonly thrown?: unknown,
  ) {
    super(message);
  }
}

const O_CLOEXEC = 0o2000000;
const O_NONBLOCK = 0o4000;
const ANSWER_TIMEOUT_MS = 20;
let pipe2: ((fds: Int32Array, flags: number) => number) | undefined;

// pipe2(2) with O_CLOEXEC on both ends: no other child of this process inherits them. On a
// failure the pipes `opened` so far are closed (fd exhaustion must not leak what remains).
function cloexecPipe(opened: number[], extraFlags = 0): [read: number, write: number] {
  const c = libc();
  if (!c)
    throw new HelperStartError(
      'unavailable',
      `koffi cannot load: no pipe2(2) for the helper (${libcError()})`,
    );
  pipe2 ??= c.lib.func('int pipe2(_Out_ int *fds, int flags)') as (fds: Int32Array, flags: number) => number;
  const fds = new Int32Array(2);
  if (pipe2(fds, O_CLOEXEC | extraFlags) !== 0) {
    const errno = errnoName(c.errno());
    for (const fd of opened.splice(0)) closeSync(fd);
    throw new HelperStartError('unavailable', `the helper's pipes cannot be made (pipe2: ${errno})`);
  }
  opened.push(fds[0] as number, fds[1] as number);
  return [fds[0] as number, fds[1] as number];
}

function stdioOf(stdio: StdioOptions): StdioOptions {
  if (!Array.isArray(stdio)) return [stdio, stdio, stdio];
  if (stdio.length > 3 && stdio.slice(3).some((s) => s !== undefined && s !== null && s !== 'ignore')) {
    throw new HelperStartError(
      'refused',
      'stdio beyond fd 2 cannot pass through the helper: use containment ["env-tag"] for extra fds or IPC',
    );
  }
  return [stdio[0] ?? 'pipe', stdio[1] ?? 'pipe', stdio[2] ?? 'pipe'];
}

/**
 * How long `startHelper` waits, synchronously, for the helper's `started` (or `error`) line, ms.
 * A real helper answers in about a millisecond (a fork, a pidfd, a line); a loaded machine may
 * take a hundred times that. A file that never answers (a `#!` script that sleeps) would
 * otherwise freeze the event loop — every timer, `timeout` included — for as long as it lives.
 */
export const HELPER_START_TIMEOUT_MS = 5000;
/** The pause between reads of the status pipe while the helper has not answered, ms. */
const START_POLL_MS = 1;
const F_GETFL = 3;
const F_SETFL = 4;
let fcntl: ((fd: number, cmd: number, ...typed: unknown[]) => number) | undefined;

// O_NONBLOCK on one end of a pipe (fcntl(2) F_SETFL): the helper's end stays blocking.
function setNonBlocking(fd: number): void {
  const c = libc();
  if (!c) throw new HelperStartError('unavailable', `koffi cannot load: no fcntl(2) (${libcError()})`);
  fcntl ??= c.lib.func('int fcntl(int fd, int cmd, ...)') as typeof fcntl;
  const flags = fcntl?.(fd, F_GETFL) ?? -1;
  if (flags < 0 || (fcntl?.(fd, F_SETFL, 'int', flags | O_NONBLOCK) ?? -1) < 0)
    throw new HelperStartError(
      'unavailable',
      `the helper's status pipe cannot be polled (fcntl: ${errnoName(c.errno())})`,
    );
}

// What a caller told synchronously of a failed spawn (its errno comes a tick later) can still
// learn now: how many fds this process holds against its limit (/proc/self/fd, and the soft
// "Max open files" of /proc/self/limits, proc(5)). '' when either cannot be read.
function fdUsage(): string {
  try {
    const open = readdirSync('/proc/self/fd').length;
    const limit = /^Max open files\s+(\d+)/m.exec(readText('/proc/self/limits') ?? '')?.[1];
    return limit ? `; ${open} fds open of this process's limit of ${limit}` : '';
  } catch {
    return ''; // no fd even to look (EMFILE): the errno follows in the warning
  }
}

/**
 * Reads lines from the non-blocking `fd` until one matches `until`, EOF, or `boundMs` passed
 * (`timedOut`); returns them and what is left over. Synchronous: between reads it waits in
 * poll(2) for the fd, never past the bound (a short pause where poll cannot be had).
 */
function readLinesSync(
  fd: number,
  until: RegExp,
  boundMs: number,
): { lines: string[]; rest: string; eof: boolean; timedOut: boolean } {
  const buf = Buffer.alloc(512);
  const pause = new Int32Array(new SharedArrayBuffer(4));
  const deadline = performance.now() + boundMs;
  let text = '';
  let eof = false;
  let timedOut = false;
  for (;;) {
    let n = -1;
    try {
      n = readSync(fd, buf, 0, buf.length, null);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') throw error;
    }
    if (n === 0) {
      eof = true;
      break;
    }
    if (n > 0) {
      text += buf.toString('latin1', 0, n);
      if (until.test(text)) break;
      continue;
    }
    const left = deadline - performance.now();
    if (left <= 0) {
      timedOut = true;
      break;
    }
    if (pollOne(fd, POLLIN, left) === null) Atomics.wait(pause, 0, 0, START_POLL_MS);
  }
  const cut = text.lastIndexOf('\n') + 1;
  return { lines: text.slice(0, cut).split('\n').filter(Boolean), rest: text.slice(cut), eof, timedOut };
}

// How a helper that ended its status pipe without a line ended: its wait status, read from
// /proc/PID/stat (field 52, exit_code, readable while it is our unreaped zombie; Linux ≥ 3.5),
// waited for up to `boundMs`. Undefined while it still runs (it only closed the pipe).
function zombieStatus(procRoot: string, pid: number, boundMs: number): string | undefined {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  const deadline = performance.now() + boundMs;
  for (;;) {
    // Through the shared bounded reader; cut at the last ')' (comm may hold one), so that
    // fields[0] is field 3 and fields[49] field 52.
    let stat: string | undefined;
    try {
      stat = readText(`${procRoot}/${pid}/stat`);
    } catch {
      // EMFILE, EIO: the status cannot be read
    }
    if (stat === undefined) return undefined; // gone (reaped), or no procfs here
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z' && fields[49] !== undefined) {
      const status = Number(fields[49]);
      const sig = status & 0x7f;
      const code = (status >> 8) & 0xff;
      if (sig !== 0) return `it was killed by ${signalName(sig) ?? `signal ${sig}`}`;
      // 127: the kernel refused the file (ENOEXEC: a corruption `readElf` does not see), and
      // execvp(3) then ran it through /bin/sh, which could not either.
      const hint = code === 127 ? ': the kernel would not exec it (ENOEXEC) nor could /bin/sh run it' : '';
      return `it exited with status ${code}${hint}`;
    }
    if (performance.now() >= deadline) return undefined;
    Atomics.wait(pause, 0, 0, START_POLL_MS);
  }
}

/** A `warn` line of the helper: a system call failed there (docs/containment.md, "What each errno means"). */
export type HelperWarning = Extract<HelperStatus, { kind: 'warn' }>;

/** The helper's ends and ours of its three pipes (fd 3 status, fd 4 control, fd 5 answer). */
interface Pipes {
  statusRead: number;
  statusWrite: number;
  controlRead: number;
  controlWrite: number;
  answerRead: number;
  answerWrite: number;
}

// The three pipes, ours non-blocking where a read must be bounded: the status pipe (see
// HELPER_START_TIMEOUT_MS) and the answer pipe (a stopped helper must not hang a sweep's round).
// Throws `unavailable` with every fd opened so far closed.
function openPipes(): Pipes {
  const opened: number[] = [];
  const [statusRead, statusWrite] = cloexecPipe(opened);
  try {
    setNonBlocking(statusRead);
  } catch (error) {
    for (const fd of opened.splice(0)) closeSync(fd);
    throw error;
  }
  const [controlRead, controlWrite] = cloexecPipe(opened);
  const [answerRead, answerWrite] = cloexecPipe(opened, O_NONBLOCK);
  return { statusRead, statusWrite, controlRead, controlWrite, answerRead, answerWrite };
}

// The helper's argv: its budgets, the cgroup, the namespace, then `-- CMD ARG...`.
/**
 * The name the helper runs under: the file `scripts/build-helper.mjs` builds and the package
 * ships (`src/containment/prebuilt.ts`), as `/proc/<pid>/stat` shows it (`comm`).
 */
export const HELPER_COMM = 'tether-helper';

/**
 * Whether a process is, by what it shows of itself, a tether helper: its comm is `HELPER_COMM`
 * and its argv starts the way `helperArgv` writes it (`tether-helper --grace MS …`). Evidence
 * for sparing it (the guard's `live-session` rule), never for signalling: any process can name
 * itself so. `argv`: the cmdline split on NULs (or on spaces, as `readCmdline` returns it).
 */
export function looksLikeHelper(comm: string, argv: readonly string[]): boolean {
  return comm === HELPER_COMM && argv[1] === '--grace';
}

function helperArgv(opts: HelperOptions): string[] {
  const argv = ['--grace', String(opts.graceMs), '--kill-after', String(opts.killAfterMs)];
  if (opts.cgroup) argv.push('--cgroup', opts.cgroup);
  if (opts.pidns) argv.push('--pidns');
  return [...argv, '--', opts.command, ...opts.args];
}

// spawn(2) of the helper with the payload's stdio on fds 0-2 and the pipes' helper ends on 3-5,
// which are closed here either way. `thrown`: Node refused before any process (a NUL byte, E2BIG).
function spawnHelper(
  path: string,
  opts: HelperOptions,
  stdio: StdioOptions,
  pipes: Pipes,
): { child: ChildProcess | undefined; thrown: unknown } {
  try {
    const child = spawn(path, helperArgv(opts), {
      cwd: opts.cwd,
      env: opts.env,
      stdio: [
        ...(stdio as unknown[]),
        pipes.statusWrite,
        pipes.controlRead,
        pipes.answerWrite,
      ] as StdioOptions,
    });
    return { child, thrown: undefined };
  } catch (error) {
    return { child: undefined, thrown: error };
  } finally {
    closeSync(pipes.statusWrite);
    closeSync(pipes.controlRead);
    closeSync(pipes.answerWrite);
  }
}

// Whether a synchronous throw of the helper's spawn is provably the command's own, by its code:
// E2BIG — the helper passes the command's arguments and environment on unchanged, and adds only
// its own path and a few short options (see `helperArgv`), so what is too large for the kernel
// is the command's (the one case it is not, a command within those few hundred bytes of the
// limit, is handled by the caller: see docs/containment.md); an ERR_ code — Node refused the
// arguments or the environment before any system call, and refuses them for the command too.
// Every other errno is about the helper's file itself, which was found executable a moment
// ago: ELOOP (a `#!` chain that loops or nests too deep), ETXTBSY (the file is open for
// writing), ENOEXEC, EISDIR, ENOTDIR, ENAMETOOLONG, EPERM, EINVAL, ENOMEM, EIO… — the command,
// a different file, may start fine: the helper is what is missing.
function commandsOwn(code: string | undefined): boolean {
  return code === 'E2BIG' || (code?.startsWith('ERR_') ?? false);
}

// What an errno of the helper's spawn says about its file, for the warning.
const SPAWN_ERRNO_HINT: Record<string, string> = {
  ELOOP: ': its #! interpreter chain loops or nests too deep, or a symbolic link loops',
  ETXTBSY: ': the file is open for writing (a build or a copy still under way)',
};

// Why a spawn that gave no pid failed. A throw that is the command's own (`commandsOwn`) or a
// missing cwd would fail the command the same way (`spawn-failed`: the command's own spawn
// says it); any other throw is the helper's file (`unavailable`, naming the errno). Otherwise
// Node reports the errno on the next tick — EMFILE, ENFILE (no fd left for the helper's
// stdio), EAGAIN (no process left) — and the helper is what is missing (`unavailable`, its
// errno promised).
function spawnFailure(path: string, opts: HelperOptions, child: ChildProcess | undefined, thrown: unknown) {
  child?.on('error', () => undefined);
  if (thrown !== undefined) {
    const code = (thrown as NodeJS.ErrnoException).code;
    if (commandsOwn(code))
      return new HelperStartError('spawn-failed', `cannot start the helper ${path}`, undefined, thrown);
    const why = code ?? clipText((thrown as Error).message ?? String(thrown));
    return new HelperStartError(
      'unavailable',
      `the helper could not be spawned (${path}: ${why}${SPAWN_ERRNO_HINT[why] ?? ''})`,
    );
  }
  if ((opts.cwd !== undefined && !searchableDir(opts.cwd)) || !child)
    return new HelperStartError('spawn-failed', `cannot start the helper ${path}`);
  const errno = new Promise<string>((resolve) =>
    child.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message)),
  );
  return new HelperStartError('unavailable', `the helper could not be spawned (${path}${fdUsage()})`, errno);
}

function clipText(text: string): string {
  return text.length > 120 ? `${text.slice(0, 119)}…` : text;
}

/** What the helper said before it could be used: its lines up to `started` or `error`. */
interface StartLines {
  /** Every complete line, raw (quoted in a failure) and parsed. */
  lines: string[];
  statuses: HelperStatus[];
  /** What followed the last complete line (part of the next). */
  rest: string;
  eof: boolean;
  timedOut: boolean;
}

// The first lines, read synchronously for at most HELPER_START_TIMEOUT_MS: until one that
// begins `started ` or `error ` (well-formed or not: a malformed one fails the start at once).
function awaitStarted(statusRead: number): StartLines {
  const read = readLinesSync(statusRead, /^(?:started|error) .*\n/m, HELPER_START_TIMEOUT_MS);
  return { ...read, statuses: read.lines.map(parseStatusLine) };
}

// The first status of a kind among `statuses`.
function first<K extends HelperStatus['kind']>(
  statuses: readonly HelperStatus[],
  kind: K,
): Extract<HelperStatus, { kind: K }> | undefined {
  return statuses.find((s): s is Extract<HelperStatus, { kind: K }> => s.kind === kind);
}

// The error `startHelper` throws when the helper did not say `started`, its message built from
// an ordered ladder: its own `error` line (unshare and the namespace's mount are `refused`),
// the bound, how a silent helper ended (`status`, read before it was killed), what it said.
function startFailure(said: StartLines, status: string | undefined): HelperStartError {
  const error = first(said.statuses, 'error');
  if (error?.what === 'unshare') {
    return new HelperStartError(
      'refused',
      `cannot create a PID namespace (unshare CLONE_NEWPID: ${errnoName(error.errno)}): it needs CAP_SYS_ADMIN (tether does not create user namespaces)`,
    );
  }
  if (error?.what === 'namespace') {
    return new HelperStartError(
      'refused',
      `cannot set up the PID namespace: mounting its own /proc failed (${errnoName(error.errno)}; a masked or read-only /proc)`,
    );
  }
  const quoted = said.lines.length > 0 ? `it said ${JSON.stringify(said.lines.join('; '))} and ` : '';
  const what = error
    ? `${error.what}: ${errnoName(error.errno)}`
    : said.timedOut
      ? `${quoted}no "started" line within ${HELPER_START_TIMEOUT_MS} ms: it was killed`
      : status
        ? `it closed its status pipe without a line: ${status}${status === 'it still ran' ? ', and was killed' : ''}`
        : `${quoted}no "started" line`;
  return new HelperStartError('unavailable', `the helper could not start the payload (${what})`);
}

// A helper that did not say `started`: how it ended if it said nothing (read before it is
// killed), then killed — our own child, not yet reaped (the event loop has not run since its
// spawn), so its pid is still its own; a payload it may have forked never gets its `go`, and
// never execs. Returns the error to throw.
function abortStart(
  child: ChildProcess,
  said: StartLines,
  statusRead: number,
  control: Control,
  procRoot: string,
): HelperStartError {
  const pid = child.pid as number;
  const status =
    said.eof && said.lines.length === 0 ? (zombieStatus(procRoot, pid, 200) ?? 'it still ran') : undefined;
  discard(child, statusRead, control);
  return startFailure(said, status);
}

// A helper that will not be used, before its `go`: our ends of its pipes closed, and it killed
// (our own child, not yet reaped: its pid is still its own); a payload it forked never gets
// its go byte, and never execs.
function discard(child: ChildProcess, statusRead: number, control: Control): void {
  control.release();
  closeSync(statusRead);
  child.on('error', () => undefined);
  child.kill('SIGKILL');
}

// Why the processes the helper named are not its own, or undefined when they are: the helper
// line must name the process this one spawned (`helperPid`); the payload's parent must be the
// helper — with a PID namespace, the init named on the `init` line, whose own parent is the
// helper. Each stat is read after that process's hold was opened (and its start time checked
// in the same read), so it names the held process. Any other answer — a `TETHER_HELPER` that
// names a bystander, or a helper that died and left its payload reparented — is the helper's
// fault: holding and signalling such a process would act on one outside the session.
function parentageFault(
  procRoot: string,
  helperPid: number,
  self: Identity,
  payload: Identity,
  init: Identity | undefined,
  pidns: boolean,
): string | undefined {
  // The parent of `id` (startTime -1: of whatever process holds the pid), 'gone', or
  // 'unreadable' (no stat to read at all, or a read that threw: EMFILE…).
  const parentOf = (id: Identity): number | 'gone' | 'unreadable' => {
    let stat: ReturnType<typeof readStat>;
    try {
      stat = readStat(procRoot, id.pid);
    } catch {
      return 'unreadable';
    }
    if (!stat) return id.startTime === -1 ? 'unreadable' : 'gone';
    return id.startTime === -1 || stat.startTime === id.startTime ? stat.ppid : 'gone';
  };
  if (self.pid !== helperPid)
    return `its "helper" line names pid ${self.pid}, not the helper (pid ${helperPid})`;
  // The helper is our own unreaped child: its stat is readable whenever procRoot is a procfs.
  // When it is not (no procfs there), no check can be made — and none is needed: every hold's
  // start-time check read the same procRoot and failed (`gone`), and so does every re-check
  // before a signal: nothing named is held or signalled.
  if (parentOf({ pid: helperPid, startTime: -1 }) === 'unreadable') return undefined;
  const named = `it named pid ${payload.pid} as its payload`;
  if (!pidns) {
    const parent = parentOf(payload);
    return parent === helperPid
      ? undefined
      : `${named}, whose parent is ${parent}, not the helper (pid ${helperPid})`;
  }
  if (!init) return `${named} but no init of its PID namespace`;
  const initParent = parentOf(init);
  if (initParent !== helperPid)
    return `its namespace's init (pid ${init.pid}) has the parent ${initParent}, not the helper (pid ${helperPid})`;
  const parent = parentOf(payload);
  return parent === init.pid
    ? undefined
    : `${named}, whose parent is ${parent}, not its namespace's init (pid ${init.pid})`;
}

/** Our ends of the control and answer pipes: `go`, the children query, release or abandon. */
interface Control {
  go(): void;
  childless(): boolean | undefined;
  ask(kept: readonly Identity[], boundMs: number): ChildrenAnswer | undefined;
  release(): void;
  abandon(): void;
}

// The control channel (fd 4 out, fd 5 back). `release` says "release" (the helper exits);
// `abandon` only closes (EOF: its dead man's switch runs); both idempotent, and the first wins.
function controlChannel(controlWrite: number, answerRead: number): Control {
  let released = false;
  const close = (say: boolean) => {
    if (released) return;
    released = true;
    if (say) send(controlWrite, CONTROL.release);
    closeSync(controlWrite);
    closeSync(answerRead);
  };
  let query = 0;
  /** The first query not answered yet: its late answer is as good (see `Helper.ask`). */
  let unanswered = 1;
  const told = new Set<string>();
  const ask = (kept: readonly Identity[], boundMs: number): ChildrenAnswer | undefined => {
    if (released) return undefined;
    for (const id of kept) {
      const key = `${id.pid}:${id.startTime}`;
      if (told.has(key)) continue;
      if (!send(controlWrite, CONTROL.keep(id))) return undefined;
      told.add(key);
    }
    const k = ++query;
    if (!send(controlWrite, CONTROL.children(k))) return undefined;
    const answer = awaitAnswer(answerRead, unanswered, k, boundMs);
    if (answer !== undefined) unanswered = k + 1;
    return answer;
  };
  const childless = (): boolean | undefined => {
    const answer = ask([], ANSWER_TIMEOUT_MS);
    return answer === 'none' ? true : answer === 'child' ? false : undefined;
  };
  return {
    go: () => send(controlWrite, CONTROL.go),
    childless,
    ask,
    release: () => close(true),
    abandon: () => close(false),
  };
}

// One control line; false when the helper is gone (EPIPE).
function send(fd: number, line: string): boolean {
  try {
    writeSync(fd, line);
    return true;
  } catch {
    return false;
  }
}

const answers = Buffer.alloc(256);
const answerPause = new Int32Array(new SharedArrayBuffer(4));

// The helper's answer to a query from `first` to `last`, waited for up to `boundMs`; undefined
// when it is gone (EOF, an error) or slower than that (stopped).
function awaitAnswer(
  answerRead: number,
  first: number,
  last: number,
  boundMs: number,
): ChildrenAnswer | undefined {
  const deadline = performance.now() + boundMs;
  let text = '';
  for (;;) {
    try {
      const n = readSync(answerRead, answers, 0, answers.length, null);
      if (n === 0) return undefined;
      text += answers.toString('latin1', 0, n);
      const found = findAnswer(text, first, last);
      if (found) return found;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') return undefined;
    }
    if (performance.now() > deadline) return undefined;
    Atomics.wait(answerPause, 0, 0, 0.1);
  }
}

// The payload's end as the status lines after `started` tell it: `exec-failed` is kept for
// the `exit` that follows it; `exit code|signal` and `exit lost` end the wait; the pipe's EOF
// without one is `lost`. `warn` lines go to `onWarning`; malformed lines are ignored. Once the
// end is known the helper no longer holds the event loop (it stays, for the sweep, until
// released; an unended session is swept by the exit hook).
function followStatus(
  statusRead: number,
  said: StartLines,
  child: ChildProcess,
  onWarning: ((warning: HelperWarning) => void) | undefined,
): Promise<PayloadEnd> {
  return new Promise<PayloadEnd>((resolve) => {
    const socket = new Socket({ fd: statusRead, readable: true, writable: false });
    let text = said.rest;
    let failed: PayloadEnd | undefined;
    const finish = (end: PayloadEnd) => {
      socket.destroy();
      child.unref();
      resolve(failed ?? end);
    };
    const onStatus = (status: HelperStatus) => {
      switch (status.kind) {
        case 'exec-failed':
          failed = { kind: 'exec-failed', stage: status.stage, errno: errnoName(status.errno) };
          return;
        case 'exit-code':
          return finish({ kind: 'exit', exitCode: status.code, signal: null });
        case 'exit-signal':
          return finish({
            kind: 'exit',
            exitCode: null,
            signal: signalName(status.signal) ?? null,
            signalNumber: status.signal,
          });
        case 'exit-lost':
          return finish({ kind: 'lost' });
        case 'warn':
          return onWarning?.(status);
        default:
          return; // the start's lines again, or one we do not know: ignored
      }
    };
    for (const status of said.statuses) onStatus(status);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      let nl = text.indexOf('\n');
      while (nl >= 0) {
        onStatus(parseStatusLine(text.slice(0, nl)));
        text = text.slice(nl + 1);
        nl = text.indexOf('\n');
      }
    });
    socket.on('error', () => undefined);
    socket.on('close', () => finish({ kind: 'lost' }));
  });
}

// Resolves when Node has seen the helper exit.
function exitOf(child: ChildProcess): Promise<void> {
  return new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
}

/**
 * Starts the helper, which starts the payload. Throws `HelperStartError`: `unavailable` when the
 * helper cannot run here (not built, koffi missing, its own setup failed) — the caller falls
 * back to the env tag and warns; `refused` when what was asked cannot be done (a PID namespace
 * without CAP_SYS_ADMIN: the unshare(2) errno is named; extra stdio fds).
 */
export function startHelper(path: string, opts: HelperOptions): Helper {
  const stdio = stdioOf(opts.stdio); // refused before any fd is opened
  const pipes = openPipes();
  const { child, thrown } = spawnHelper(path, opts, stdio, pipes);
  const control = controlChannel(pipes.controlWrite, pipes.answerRead);
  if (child?.pid === undefined) {
    control.release();
    closeSync(pipes.statusRead);
    throw spawnFailure(path, opts, child, thrown);
  }
  try {
    opts.whileStarting?.();
  } catch (error) {
    discard(child, pipes.statusRead, control);
    throw error;
  }
  const said = awaitStarted(pipes.statusRead);
  const started = first(said.statuses, 'started')?.identity;
  // The helper's identity as it read it itself (the supervisor's procRoot may be another).
  const self = first(said.statuses, 'helper')?.identity ?? identityOf(child.pid);
  if (first(said.statuses, 'error') || !started || !self) {
    throw abortStart(child, said, pipes.statusRead, control, opts.procRoot);
  }
  // The payload waits for our go before exec, and the helper reaps nothing until then: the pid
  // is still the payload's, whatever it does next. The helper is this process's child (libuv
  // reaps it only from the event loop, not before this synchronous code returns); its init
  // waits for the payload, which waits for our go.
  const signaller = createSignaller();
  const payloadHold = signaller.hold(opts.procRoot, started);
  const helperHold = signaller.hold(opts.procRoot, self);
  const init = first(said.statuses, 'init')?.identity;
  const initHold = init && signaller.hold(opts.procRoot, init);
  // Before the go: the processes named are the helper's own, or none of them is held or used.
  const fault = parentageFault(opts.procRoot, child.pid, self, started, init, opts.pidns);
  if (fault !== undefined) {
    for (const hold of [payloadHold, helperHold, initHold]) if (hold) releaseHold(hold);
    discard(child, pipes.statusRead, control);
    throw new HelperStartError(
      'unavailable',
      `the helper ${path} is not a tether helper (${fault}): it was killed before its go, and the processes it named were left alone`,
    );
  }
  control.go(); // EPIPE: the helper is gone; its status pipe says so (`exit lost`)
  return {
    child,
    helper: self,
    init,
    payload: started,
    payloadHold,
    helperHold,
    initHold,
    end: followStatus(pipes.statusRead, said, child, opts.onWarning),
    childless: control.childless,
    ask: control.ask,
    release: control.release,
    abandon: control.abandon,
    exited: exitOf(child),
  };
}

function searchableDir(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
