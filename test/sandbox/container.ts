// A real container for the sandbox tests: a PID and mount namespace made by
// `unshare --pid --mount --fork --mount-proc`, whose init is a bounded sleep loop (it reaps the
// orphans reparented to it), entered through `nsenter -t INIT -a` — a real exec channel.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, expect } from 'vitest';
import { readElf } from '../../src/containment/elf.js';
import { sessionsDir } from '../../src/containment/live-session.js';
import { sandbox } from '../../src/index.js';
import {
  type ClientExit,
  commandChannel,
  type ExecChannel,
  type ExecClient,
} from '../../src/sandbox/index.js';
import { callRequest, endLine, verifies } from '../../src/sandbox/resident.js';
import { IN_CALL_BLIND_SPOT } from '../../src/sandbox/session-helper.js';
import { ENV_TAG_BLIND_SPOT } from '../../src/sweep/report.js';
import {
  childrenOf,
  cmdlineOf,
  environOfAnyThread,
  hasEntry,
  isAlive,
  isDeadZombie,
  type ProcessId,
  pids,
  readStat,
  type Stat,
} from '../support/proc.js';
import { testDir } from '../support/temp.js';

export interface Container {
  /** The host pid of the container's init. */
  init: number;
  prefix: string[];
  channel: ExecChannel;
  stop(): Promise<void>;
}

/** The four shells every program runs under (docs/sandbox.md). */
export const SHELLS: [name: string, argv: string[]][] = [
  ['dash', ['dash']],
  ['bash --posix', ['bash', '--posix']],
  ['busybox sh', ['busybox', 'sh']],
  ['mksh', ['mksh']],
];

/**
 * Mounts a fresh tmpfs (`mode=1777`, 16 MiB, source `name`) on the container's /tmp, in its own
 * mount namespace (the host's /tmp is never touched): the helper is pushed there.
 */
export function privateTmp(box: Container, name: string): void {
  execFileSync(
    'nsenter',
    ['-t', String(box.init), '-m', 'mount', '-t', 'tmpfs', '-o', 'mode=1777,size=16m', name, '/tmp'],
    { timeout: 10_000 },
  );
}

/**
 * The processes whose cmdline is `sleep S` in the container's PID namespace, as the host sees
 * them (pid and start time): a command's leftover, found by its unique argument.
 */
export function sleepersIn(box: Container, s: number): { pid: number; startTime: number; cmdline: string }[] {
  const ns = readlinkSync(`/proc/${box.init}/ns/pid`);
  const found = [];
  for (const pid of pids()) {
    if (cmdlineOf(pid) !== `sleep ${s}`) continue;
    try {
      if (readlinkSync(`/proc/${pid}/ns/pid`) !== ns) continue;
    } catch {
      continue;
    }
    const stat = readStat(pid);
    if (stat) found.push({ pid, startTime: stat.startTime, cmdline: `sleep ${s}` });
  }
  return found;
}

/**
 * The first of `sleepersIn(box, s)`, polled for up to 10 s (a double fork starts a moment after
 * its command); throws with the container's process tree when it never ran.
 */
export async function doubleForked(box: Container, s: number): Promise<{ pid: number; startTime: number }> {
  for (let i = 0; i < 500; i++) {
    const [first] = sleepersIn(box, s);
    if (first) return { pid: first.pid, startTime: first.startTime };
    await sleep(20);
  }
  const tree = execFileSync('nsenter', ['-t', String(box.init), '-a', 'ps', '-eo', 'pid,ppid,stat,args'], {
    encoding: 'utf8',
  });
  throw new Error(`premise broken: the double fork sleep ${s} never ran in the container:\n${tree}`);
}

// The cgroup2 mount the container sees (it shares the host's cgroup namespace): its mount point and
// whether the container's root may write it. Empty when there is none.
export function cgroup2Of(box: Container): { mount: string; writable: boolean } | undefined {
  const info = readFileSync(`/proc/${box.init}/mountinfo`, 'utf8');
  for (const line of info.split('\n')) {
    const [before, after] = line.split(' - ');
    if (!after?.startsWith('cgroup2 ')) continue;
    const fields = (before ?? '').split(' ');
    return { mount: fields[4] ?? '', writable: (fields[5] ?? '').split(',').includes('rw') };
  }
  return undefined;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * A root holding busybox alone (and, for a dynamic busybox, the libraries it links; a static one,
 * Debian's busybox-static, links none): every tool the programs call is a busybox applet — no
 * coreutils, no GNU grep. `busybox` is its path on the host (test/support/tools.ts found it).
 * Returns the root's directory.
 */
export function busyboxRoot(busybox: string): string {
  const root = testDir('tether-busybox-root-');
  for (const d of ['bin', 'proc', 'tmp']) mkdirSync(join(root, d), { recursive: true });
  copyFileSync(busybox, join(root, 'bin/busybox'));
  chmodSync(join(root, 'bin/busybox'), 0o755);
  chmodSync(join(root, 'tmp'), 0o1777);
  // Every OCI container has /dev/null (the programs redirect to it).
  mkdirSync(join(root, 'dev'));
  execFileSync('mknod', ['-m', '666', join(root, 'dev/null'), 'c', '1', '3'], { timeout: 10_000 });
  // ldd refuses a static executable ("not a dynamic executable", status 1): ask only of a dynamic one.
  const elf = readElf(busybox);
  if (elf.kind !== 'elf')
    throw new Error(`premise broken: ${busybox} is not an ELF executable (${elf.kind})`);
  if (elf.dynamic) {
    const ldd = execFileSync('ldd', [busybox], { encoding: 'utf8', timeout: 10_000 });
    for (const m of ldd.matchAll(/(\/\S+\.so[.\d]*)/g)) {
      const lib = m[1] as string;
      const into = join(root, lib.replace(/^\/usr/, ''));
      mkdirSync(dirname(into), { recursive: true });
      copyFileSync(lib, into);
    }
  }
  const applets = execFileSync(busybox, ['--list'], { encoding: 'utf8', timeout: 10_000 });
  for (const applet of applets.split('\n')) {
    if (applet && applet !== 'busybox') symlinkSync('busybox', join(root, 'bin', applet));
  }
  return root;
}

/** A container chrooted in a root that holds busybox alone (`busyboxRoot`); `root` is that root. */
export interface BusyboxContainer extends Container {
  root: string;
}

/**
 * Starts a container in a fresh busybox-only root made from `busybox` (a path on the host), its
 * init living at most `lifetimeS` seconds; its `stop` also removes the root.
 */
export async function startBusyboxContainer(busybox: string, lifetimeS: number): Promise<BusyboxContainer> {
  const root = busyboxRoot(busybox);
  const box = await startContainer(lifetimeS, root);
  return {
    ...box,
    root,
    async stop() {
      await box.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/**
 * Starts a container whose init lives at most `lifetimeS` seconds; with `root`, chrooted there
 * (the channel then enters that root too).
 */
export async function startContainer(lifetimeS = 600, root?: string): Promise<Container> {
  const loops = lifetimeS * 4;
  const child: ChildProcess = spawn(
    'unshare',
    [
      '--pid',
      '--mount',
      '--fork',
      '--mount-proc', // with --root, inside the new root
      ...(root ? [`--root=${root}`] : []),
      '--kill-child',
      root ? '/bin/sh' : 'sh',
      '-c',
      `i=0; while [ $i -lt ${loops} ]; do sleep 0.25; i=$((i+1)); done`,
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  let init = 0;
  for (let i = 0; i < 100 && !init; i++) {
    try {
      const kids = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim();
      if (kids) init = Number(kids.split(' ')[0]);
    } catch {
      // not yet
    }
    if (!init) await sleep(20);
  }
  if (!init) {
    child.kill('SIGKILL');
    throw new Error('premise broken: the container init did not start');
  }
  const prefix = ['nsenter', '-t', String(init), '-a', ...(root ? ['-r', '-w'] : [])];
  const initStart = readStat(init)?.startTime;
  // The init itself is gone or a zombie (its namespaces released), or its pid another process's.
  const initEnded = () => {
    const stat = readStat(init);
    return !stat || isDeadZombie(stat) || stat.startTime !== initStart;
  };
  return {
    init,
    prefix,
    channel: commandChannel(prefix),
    async stop() {
      child.kill('SIGKILL'); // --kill-child: the init dies, the kernel kills the namespace
      await Promise.race([exited, sleep(5000)]);
      // unshare's end is not the init's: its parent-death signal is delivered a moment later (on
      // a loaded machine, long enough for a channel to reach the namespace still). Stopped means
      // the namespace can no longer be entered.
      for (let i = 0; i < 250 && !initEnded(); i++) await sleep(20);
    },
  };
}

/** Identities of live processes (not dead zombies) whose environ holds `TAG=1`, read from the host's /proc. */
export function taggedOnHost(tag: string): { pid: number; startTime: number; cmdline: string }[] {
  const entry = `${tag}=1`;
  const found: { pid: number; startTime: number; cmdline: string }[] = [];
  for (const pid of pids()) {
    const stat = readStat(pid);
    if (!stat || isDeadZombie(stat)) continue;
    if (!hasEntry(environOfAnyThread(pid), entry)) continue; // '' when gone or unreadable
    found.push({ pid, startTime: stat.startTime, cmdline: cmdlineOf(pid) });
  }
  return found;
}

/**
 * Removes the live-session registration a SIGKILLed supervisor of `tag` left (the next
 * registration anywhere would prune it, its supervisor gone): it was the test's own.
 */
export function dropRegistrations(tag: string): void {
  const hex = tag.replace('TETHER_SESSION_', '');
  try {
    for (const name of readdirSync(sessionsDir()))
      if (name.startsWith(`${hex}.`)) rmSync(join(sessionsDir(), name), { force: true });
  } catch {
    // no directory: nothing registered
  }
}

/** True while the process with this identity exists on the host (a dead zombie does not count). */
export function aliveOnHost(id: { pid: number; startTime: number }): boolean {
  return isAlive(id);
}

/** When to lose the stream of the first exec: after `ms`, or as soon as stdout holds `after`. */
export interface Cut {
  ms?: number;
  after?: string;
  /** Deliver the completion line whole (through its newline), then lose the stream before the client's exit. */
  afterEnd?: true;
  /** Forward at most this many stdin bytes, then close stdin and lose the stream. */
  stdinBytes?: number;
}

/**
 * A channel whose first exec loses its stream at the cut: the client is killed, our ends of its
 * streams are closed, and the exit reads as status 0 — as client-go reads a stream lost behind
 * it (decisions.md D13). Later execs (the sweep) go through `inner` untouched.
 */
export function lossyChannel(inner: ExecChannel, cut: Cut): ExecChannel & { cutAt: () => number | null } {
  let used = false;
  let cutAt: number | null = null;
  return {
    describe: `${inner.describe} (lossy)`,
    cutAt: () => cutAt,
    exec(argv) {
      if (used) return inner.exec(argv);
      used = true;
      const real = inner.exec(argv);
      const stdout = new PassThrough();
      const stderr = new PassThrough();
      const stdin = new PassThrough();
      const started = performance.now();
      let lost = false;
      let finished = false;
      let resolveExit: (e: ClientExit) => void = () => {};
      const exited = new Promise<ClientExit>((r) => (resolveExit = r));
      let seen = '';
      const lose = () => {
        if (lost || finished) return;
        lost = true;
        cutAt = performance.now() - started;
        clearTimeout(timer);
        real.kill();
        stdout.end();
        stderr.end();
        resolveExit({ status: 0, signal: null });
      };
      const timer = cut.ms === undefined ? undefined : setTimeout(lose, cut.ms);
      real.stdout.on('data', (c: Buffer) => {
        if (lost) return;
        if (cut.after !== undefined || cut.afterEnd) {
          seen += c.toString('latin1');
          const line = seen.indexOf('tether-end ');
          const at =
            cut.after !== undefined ? seen.indexOf(cut.after) : line < 0 ? -1 : seen.indexOf('\n', line);
          const marker = cut.after !== undefined ? cut.after.length : 1;
          if (at >= 0) {
            // Deliver up to the marker's end, then lose the rest (the completion line, or after it).
            const keep = c.length - (seen.length - (at + marker));
            if (keep > 0) stdout.write(c.subarray(0, keep));
            lose();
            return;
          }
        }
        stdout.write(c);
      });
      real.stderr.on('data', (c: Buffer) => {
        if (!lost) stderr.write(c);
      });
      let sent = 0;
      stdin.on('data', (c: Buffer) => {
        if (lost) return;
        if (cut.stdinBytes !== undefined && sent + c.length >= cut.stdinBytes) {
          real.stdin.write(c.subarray(0, cut.stdinBytes - sent));
          sent = cut.stdinBytes;
          real.stdin.end();
          setTimeout(lose, 50);
          return;
        }
        sent += c.length;
        real.stdin.write(c);
      });
      stdin.on('end', () => {
        if (!lost) real.stdin.end();
      });
      let realStreams = 0;
      const realClosed = () => {
        if (++realStreams === 2 && !lost) {
          stdout.end();
          stderr.end();
        }
      };
      real.stdout.once('close', realClosed);
      real.stderr.once('close', realClosed);
      void real.exited.then((e) => {
        if (lost) return;
        clearTimeout(timer);
        finished = true;
        resolveExit(e);
      });
      const client: ExecClient = {
        stdin,
        stdout,
        stderr,
        exited,
        kill: () => lose(),
      };
      return client;
    },
  };
}

/**
 * `lossyChannel` for the command's exec only (the wrapper's: its argv holds `tether-wrap`): the
 * helper's push before it and the sweeps after it go through `inner` untouched.
 */
export function lossyWrapper(inner: ExecChannel, cut: Cut): ExecChannel & { cutAt: () => number | null } {
  const lossy = lossyChannel(inner, cut);
  return {
    describe: lossy.describe,
    cutAt: lossy.cutAt,
    exec: (argv) => (argv.includes('tether-wrap') ? lossy.exec(argv) : inner.exec(argv)),
  };
}

/**
 * setpriv's options that drop CAP_SYS_PTRACE from the bounding and inheritable sets: a container
 * whose commands run as root without it, as Docker's and Kubernetes' default capability sets.
 */
/** A channel prefix's tail that runs the exec as uid and gid 65534, no supplementary groups. */
export const AS_NOBODY = ['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups', '--'];

/**
 * A container for the tests of one describe block whose calls run as uid 65534 (`AS_NOBODY`),
 * with a /tmp of its own (`privateTmp`, named NAME-PID): started in beforeAll and handed to `use`,
 * stopped in afterAll. `inBox(path)` is a path of the container as the host reaches it;
 * `read(path)` its text, '' when it is absent.
 */
export function asNobodyIn(
  name: string,
  use: (box: Container, channel: ExecChannel) => void,
  lifetimeS = 240,
): { inBox: (path: string) => string; read: (path: string) => string } {
  let box: Container | undefined;
  beforeAll(async () => {
    box = await startContainer(lifetimeS);
    privateTmp(box, `${name}-${process.pid}`);
    use(box, commandChannel([...box.prefix, ...AS_NOBODY]));
  });
  afterAll(async () => {
    await box?.stop();
  });
  const inBox = (path: string) => `/proc/${box?.init}/root${path}`;
  return { inBox, read: (path) => (existsSync(inBox(path)) ? readFileSync(inBox(path), 'utf8') : '') };
}

/**
 * Makes `call` until a leftover that takes calls only in a window (test/fixtures/c/resident-mitm.c
 * swaps its socket in for up to 800 ms of each of the server's seconds) says in its log, read by
 * `log`, that it took one — at most `max` times. `taken` is that call's outcome, `honest` the
 * earlier ones' (they reached the server itself); `taken` undefined when none was taken.
 */
export async function untilTaken<T>(
  log: () => string,
  call: () => Promise<T>,
  max = 8,
): Promise<{ taken?: T; honest: T[] }> {
  const honest: T[] = [];
  const count = () => (log().match(/call taken after/g) ?? []).length;
  for (let i = 0; i < max; i++) {
    const before = count();
    const outcome = await call();
    for (let j = 0; j < 20 && count() === before; j++) await sleep(50);
    if (count() > before) return { taken: outcome, honest };
    honest.push(outcome);
  }
  return { honest };
}

export const DROP_PTRACE = ['--bounding-set', '-sys_ptrace', '--inh-caps', '-sys_ptrace'];

/** The argv that enters `box` as root without CAP_SYS_PTRACE (DROP_PTRACE), for a channel. */
export function noPtrace(box: Container): string[] {
  return [...box.prefix, 'setpriv', ...DROP_PTRACE, '--'];
}

/**
 * `argv` as a channel whose execs find first on PATH each of `tools` (default `sha256sum`) as a
 * script that waits `ms` before it runs the real one (in the container's /tmp,
 * `/tmp/tether-slow-hash/`; the container's /tmp should be its own: `privateTmp`): the window a
 * busy machine gives a process racing the helper's checks, made wide enough that a test of that
 * race reaches its premise on any machine. A root exec keeps PATH as it is (prelude.sh: root can
 * write every directory of it).
 */
export function slowHashing(box: Container, argv: string[], ms: number, tools = ['sha256sum']): ExecChannel {
  const dir = join('/proc', String(box.init), 'root/tmp/tether-slow-hash');
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  for (const tool of tools) {
    const real = [`/usr/bin/${tool}`, `/bin/${tool}`].find((p) => existsSync(p)) ?? tool;
    writeFileSync(join(dir, tool), `#!/bin/sh\nsleep ${(ms / 1000).toFixed(3)}\nexec ${real} "$@"\n`, {
      mode: 0o755,
    });
  }
  return commandChannel([...argv, 'env', 'PATH=/tmp/tether-slow-hash:/usr/local/bin:/usr/bin:/bin']);
}

/**
 * The argv of a command that starts a python3 leftover in a session of its own (setsid, its
 * streams /dev/null) and exits 0 once the leftover's log `log` (a path in the container) says
 * `ready`, 9 after 10 s: the leftover runs `script.code` (with `-c`, its log path its argument)
 * or the file `script.file` (a SCRIPT_KIT script, which keeps its log beside itself).
 */
export function startsLeftover(
  python: string,
  log: string,
  script: { code: string } | { file: string },
): string[] {
  const launch = 'code' in script ? `setsid "$0" -c "$1" ${log}` : `setsid "$0" ${script.file}`;
  return [
    'sh',
    '-c',
    `${launch} </dev/null >/dev/null 2>&1 &
     for i in $(seq 200); do grep -q ready ${log} 2>/dev/null && exit 0; sleep 0.05; done; exit 9`,
    python,
    ...('code' in script ? [script.code] : []),
  ];
}

/**
 * Python 3 readers of /proc for the scripts of the helper's replays (SCRIPT_KIT and the
 * `SWAPPER`s of helper-sweep.test.ts and wrap-swap.test.ts): argv(PID) (its cmdline's words, []
 * once gone), state(PID) (the letter after the last ')' of its stat, None once gone), ppid(PID).
 */
export const PROC_KIT = `def argv(p):
    try:
        with open(f'/proc/{p}/cmdline', 'rb') as f: return f.read().split(b'\\0')
    except OSError: return []
def state(p):
    try:
        with open(f'/proc/{p}/stat') as f: s = f.read()
        return s[s.rindex(')') + 2]
    except OSError: return None
def ppid(p):
    with open(f'/proc/{p}/stat') as f: s = f.read()
    return int(s[s.rindex(')') + 2:].split()[1])
`;

/**
 * The start of a python3 script that rewrites the pushed helper around its checks (the
 * `#!`-script swaps of helper-sweep.test.ts and wrap-swap.test.ts), run from its own file in the
 * container's /tmp: TERM ignored; ME, its path, and LOG and REAL beside it (its log, the real
 * helper's bytes); SHEBANG, the line that makes the helper's file run ME; PROC_KIT's readers;
 * hasher_of(SHELL, END), a `sha256sum` child of SHELL and its stdout held open for writing (SHELL
 * then waits on it); rewrite(SHELL, DATA), the helper's file through /proc/SHELL/fd/9;
 * script_after_first_hash(SHELL, END), the leftover's move: every process that executes the
 * helper KILLed, SHELL's first hash held, and once it is done the file made this script (its
 * bytes kept in REAL), logged `script after N tries`.
 */
export const SCRIPT_KIT = `import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
ME = os.path.abspath(__file__)
LOG = ME[:-3] + '.log'
REAL = ME[:-3] + '.real'
log = open(LOG, 'a', buffering=1)
SHEBANG = f'#!{sys.executable} {ME}\\n'.encode()
${PROC_KIT}def hasher_of(shell, end):
    while time.time() < end:
        try: kids = open(f'/proc/{shell}/task/{shell}/children').read().split()
        except OSError: return None, None
        for k in kids:
            if int(k) != os.getpid() and any(x.endswith(b'sha256sum') for x in argv(k)):
                try: return int(k), os.open(f'/proc/{k}/fd/1', os.O_WRONLY)
                except OSError: return None, None
        time.sleep(0.0005)
    return None, None
def rewrite(shell, data):
    for i in range(2000):
        try:
            fd = os.open(f'/proc/{shell}/fd/9', os.O_WRONLY | os.O_TRUNC); os.write(fd, data); os.close(fd); return i
        except OSError: time.sleep(0.001)
    return -1
def script_after_first_hash(shell, end):
    for d in os.listdir('/proc'):
        a = argv(d) if d.isdigit() else []
        if a and a[0].endswith(b'/fd/9') and (b'--wrap' in a or b'--await' in a):
            try: os.kill(int(d), signal.SIGKILL)
            except OSError: pass
    hasher, hold = hasher_of(shell, end)
    if hasher is None:
        log.write('no first hash\\n'); sys.exit()
    while state(hasher) not in (None, 'Z'): time.sleep(0.0005)
    open(REAL, 'wb').write(open(f'/proc/{shell}/fd/9', 'rb').read())
    log.write(f'script after {rewrite(shell, SHEBANG)} tries\\n')
    os.close(hold)
    time.sleep(30)
`;

/** What one exec through a channel gave: its stdout's bytes, its stderr, the client's status. */
export interface ExecRan {
  stdout: Buffer;
  stderr: string;
  status: number | null;
}

/** One exec of `argv` through `channel`, `input` on its stdin, to its exit and its streams' close. */
export async function execOnce(
  channel: ExecChannel,
  argv: string[],
  input: string | Buffer,
): Promise<ExecRan> {
  const client = channel.exec(argv);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  client.stdout.on('data', (b: Buffer) => out.push(b));
  client.stderr.on('data', (b: Buffer) => err.push(b));
  const closed = Promise.all([
    new Promise((r) => client.stdout.once('close', r)),
    new Promise((r) => client.stderr.once('close', r)),
  ]);
  client.stdin.end(input);
  const exit = await client.exited;
  await closed;
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString(), status: exit.status };
}

/**
 * One `run` call of `sh -c SCRIPT` straight to a resident server (`HELPER --call DIR`, the request
 * under `key`, an empty stdin): the command's status (the line's; the client's without one), the output before the end line, and whether
 * that line verifies and is the server's for this call (its empty stdin taken to its end, or not
 * yet when the command ended first).
 */
export async function residentCall(
  channel: ExecChannel,
  server: { key: Buffer; helper: string; dir: string },
  script: string,
): Promise<{ status: number | null; out: string; verified: boolean }> {
  const nonce = randomBytes(16).toString('hex');
  const tag = randomBytes(16).toString('hex');
  const ran = await execOnce(
    channel,
    [server.helper, '--call', server.dir],
    callRequest(server.key, nonce, tag, ['sh', '-c', script]),
  );
  const stdout = ran.stdout.toString('latin1');
  const at = stdout.lastIndexOf(`tether-end ${nonce} `);
  const line = at >= 0 ? stdout.slice(at).replace(/\n$/, '') : '';
  // The command's status is the line's: the client is let go (exit 0) once its stdin has ended,
  // while the command runs (native/helper-serve.c, call_release). Without a line, the client's.
  const said = /^tether-end [0-9a-f]{32} exit (\d{1,3}) /.exec(line);
  const status = said ? Number(said[1]) : ran.status;
  return {
    status,
    out: at >= 0 ? stdout.slice(0, at) : stdout,
    verified:
      at >= 0 &&
      verifies(server.key, line) &&
      [true, false].some(
        (ended) => line === endLine(server.key, nonce, status ?? -1, Buffer.alloc(0), ended),
      ),
  };
}

/**
 * The host pids of the processes in the PID namespace of the container whose init is `init` (host
 * pid), each with its pid in the container (the last of its status's NSpid); none once `init` is
 * gone. Processes that end during the walk are left out.
 */
export function processesIn(init: number): { pid: number; nsPid: number }[] {
  let ns: string;
  try {
    ns = readlinkSync(`/proc/${init}/ns/pid`);
  } catch {
    return [];
  }
  const found: { pid: number; nsPid: number }[] = [];
  for (const pid of pids()) {
    try {
      if (readlinkSync(`/proc/${pid}/ns/pid`) !== ns) continue;
      const ids = /^NSpid:\s+(.*)$/m
        .exec(readFileSync(`/proc/${pid}/status`, 'latin1'))?.[1]
        ?.trim()
        .split(/\s+/);
      if (ids) found.push({ pid, nsPid: Number(ids[ids.length - 1]) });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** The host pid of the process whose pid is `nsPid` in the container whose init is `init` (`processesIn`). */
export function hostPidOf(init: number, nsPid: number): number | undefined {
  return processesIn(init).find((p) => p.nsPid === nsPid)?.pid;
}

/** The pid in the container whose init is `init` of the host's process `pid` (`processesIn`). */
export function nsPidOf(init: number, pid: number): number | undefined {
  return processesIn(init).find((p) => p.pid === pid)?.nsPid;
}

/**
 * The live resident helpers of the container whose init is `init`: its processes (`processesIn`)
 * whose comm is tether-call or tether-serve, each with its stat. What the resident tests expect to
 * be empty once a server has ended.
 */
export function helpersIn(init: number): { pid: number; nsPid: number; stat: Stat }[] {
  const found: { pid: number; nsPid: number; stat: Stat }[] = [];
  for (const p of processesIn(init)) {
    const stat = readStat(p.pid);
    if (stat && !isDeadZombie(stat) && /^tether-(call|serve)$/.test(stat.comm)) found.push({ ...p, stat });
  }
  return found;
}

/**
 * The sockets a host process holds: the links of its /proc/PID/fd that read `socket:[INODE]`. Empty
 * once it is gone; an fd closed during the walk is left out.
 */
export function socketsOf(pid: number): Set<string> {
  const out = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const link = readlinkSync(`/proc/${pid}/fd/${fd}`);
        if (link.startsWith('socket:')) out.add(link);
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    // gone
  }
  return out;
}

/**
 * The live children of a resident server (`server`, its host pid), each with its identity, comm and
 * state, and whether it holds a socket the server holds too: the listening socket, which the
 * pre-forked call child waits on and a call's child closes at once (native/helper-serve.c,
 * idle_wait). The server's sockets are read once per call.
 */
export function childrenOfServer(
  server: number,
): { id: ProcessId; comm: string; state: string; listens: boolean }[] {
  const own = socketsOf(server);
  return childrenOf(server)
    .filter((s) => !isDeadZombie(s))
    .map((s) => ({
      id: { pid: s.pid, startTime: s.startTime },
      comm: s.comm,
      state: s.state,
      listens: [...socketsOf(s.pid)].some((l) => own.has(l)),
    }));
}

/** Polls every 20 ms, for up to `ms`, until none of `ids` is alive; returns those still alive ([] when all ended). */
export async function gone(ids: ProcessId[], ms = 5000): Promise<ProcessId[]> {
  for (let i = 0; i < ms / 20 && ids.some(isAlive); i++) await sleep(20);
  return ids.filter(isAlive);
}

/**
 * What tether said of a run under attack (resident-run-break*.test.ts): the result's report (and
 * whether it names IN_CALL_BLIND_SPOT, ENV_TAG_BLIND_SPOT), or the error's code and its report, when
 * it has one.
 */
export interface Said {
  ok?: boolean;
  complete?: boolean;
  proof?: string;
  exitCode?: number | null;
  stdout?: string;
  stopped?: number;
  code?: string;
  warnings?: string[];
  inCall?: boolean;
  envTagBlind?: boolean;
  failed?: boolean;
  timedOut?: boolean;
}

/** The fields of a sweep report `said` reads. */
interface SaidReport {
  ok: boolean;
  complete: boolean;
  proof: string;
  stopped: unknown[];
  warnings: { code: string }[];
  blindSpots?: string[];
}

/** What tether said of a run (`Said`): it resolves either way. */
export async function said(
  p: Promise<{
    exitCode: number | null;
    stdout?: unknown;
    failed?: boolean;
    timedOut?: boolean;
    report: SaidReport;
  }>,
): Promise<Said> {
  try {
    const r = await p;
    return {
      failed: r.failed,
      timedOut: r.timedOut,
      inCall: (r.report.blindSpots ?? []).includes(IN_CALL_BLIND_SPOT),
      envTagBlind: (r.report.blindSpots ?? []).includes(ENV_TAG_BLIND_SPOT),
      ok: r.report.ok,
      complete: r.report.complete,
      proof: r.report.proof,
      exitCode: r.exitCode,
      stdout: String(r.stdout),
      stopped: r.report.stopped.length,
      warnings: r.report.warnings.map((w) => w.code),
    };
  } catch (e) {
    const err = e as Error & { code?: string; report?: SaidReport };
    return {
      code: err.code ?? err.message,
      ...(err.report
        ? {
            ok: err.report.ok,
            complete: err.report.complete,
            proof: err.report.proof,
            warnings: err.report.warnings.map((w) => w.code),
          }
        : {}),
    };
  }
}

/** A success tether vouches for: resolved, the report ok and complete. */
export const vouched = (s: Said) => s.code === undefined && s.ok === true && s.complete === true;

/**
 * `said` of one `sandbox.run` of `sh -c SCRIPT` through `channel` as a resident call that resolves
 * whatever the command's status (`reject: false`), with `options` (a timeout, the sweep's bounds).
 */
export function saidOfRun(
  channel: ExecChannel,
  script: string,
  options: { timeout?: number; sweep: { graceMs: number; killAfterMs: number } },
): Promise<Said> {
  return said(sandbox.run(channel, ['sh', '-c', script], { resident: true, reject: false, ...options }));
}

/** Runs `argv` in the container as root (its prefix), to its end: for the test's own processes only. */
export function inRoot(box: Container, argv: string[]): string {
  const [cmd0, ...rest] = box.prefix;
  return execFileSync(String(cmd0), [...rest, ...argv], { encoding: 'utf8', timeout: 20_000 });
}

/**
 * KILLs the test's own leftovers `sleep S` in the container from the host, by identity
 * (`sleepersIn`: never by name), and waits up to 2 s for them to be gone.
 */
export async function killSleepersIn(box: Container, s: number): Promise<void> {
  for (const p of sleepersIn(box, s)) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  for (let i = 0; i < 100 && sleepersIn(box, s).length > 0; i++) await sleep(20);
}

/**
 * The end of a break attempt that left `sleep S` leftovers: counts those still running, logs them
 * under `label` with what tether said (`r`) and `more`, KILLs them (`killSleepersIn`), and, when
 * tether vouched for the run, expects that none ran: a report is truthful when it never says ok and
 * complete while something the command started still runs.
 */
export async function checkLeftovers(
  box: Container,
  s: number,
  label: string,
  r: Said,
  more: Record<string, unknown> = {},
): Promise<void> {
  const alive = sleepersIn(box, s).length;
  console.log(label, JSON.stringify({ r, alive, ...more }));
  await killSleepersIn(box, s);
  if (vouched(r)) expect(alive).toBe(0);
}
