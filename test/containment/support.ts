// Helpers of the containment tests: the zoo's runShape with SpawnOptions of the test's own
// (containment, above all), and ground truth read straight from /proc and the cgroup tree.
//
// Sessions are started through the built library (dist/index.js, built by globalSetup), as a
// user runs it: its default helper path is dist/native/tether-helper. (Run from src/, as
// vitest imports it, the default path points at src/native/, where no helper is: every session
// would fall back to the env tag with a NO_HELPER warning.)
import { spawn as spawnChild } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { type Identity, identityOf, isAlive, type SpawnOptions, spawn } from '../../dist/index.js';
import { BUILD, ROOT } from '../support/paths.js';
import {
  cmdlineOf,
  environOf,
  hasEntry,
  type Recorded,
  readPidfile,
  type Shape,
  type ShapeRun,
  started,
  startTagDecoys,
  tempDir,
  waitFor,
} from '../support/zoo.js';

/** The helper binary `npm run build` makes (what /proc/<pid>/exe of a helper points to). */
export const HELPER_EXE = join(ROOT, 'dist/native/tether-helper');

function helperExe(): string {
  try {
    return realpathSync(HELPER_EXE);
  } catch {
    return HELPER_EXE;
  }
}

export function exeOf(pid: number): string {
  try {
    return readlinkSync(`/proc/${pid}/exe`);
  } catch {
    return '';
  }
}

/** Fields after the comm of /proc/<pid>/stat (index 0 = state, 1 = ppid, 19 = start time). */
function statFields(pid: number): string[] | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return text.slice(text.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

export function ppidOf(pid: number): number {
  return Number(statFields(pid)?.[1] ?? 0);
}

/** A tether helper (or the init of its PID namespace, a fork of it): never a session member. */
export function isHelper(pid: number): boolean {
  return exeOf(pid) === helperExe();
}

/** The ancestors of `pid`, nearest first, up to (not including) PID 1. */
export function ancestorsOf(pid: number): number[] {
  const out: number[] = [];
  for (let p = ppidOf(pid); p > 1 && out.length < 512; p = ppidOf(p)) out.push(p);
  return out;
}

/**
 * Why the env tag alone would find this process (empty when it cannot): it carries `entry`, or
 * one of its live ancestors other than a helper does (the sweep's `descendant` find).
 */
export function tagFinds(pid: number, entry: string): string[] {
  const why: string[] = [];
  if (hasEntry(environOf(pid), entry)) why.push(`pid ${pid} carries ${entry}`);
  for (const a of ancestorsOf(pid)) {
    if (isHelper(a)) continue;
    if (hasEntry(environOf(a), entry))
      why.push(`pid ${pid} has a live carrier ancestor ${a} "${cmdlineOf(a)}"`);
  }
  return why;
}

/**
 * A Shape's `verify`: the premise that the env tag alone cannot find these processes — none
 * carries the tag and none has a live carrier ancestor (polled up to 2 s, for an exec or a
 * parent's exit still under way).
 */
export function escapesTheTag(recorded: Recorded[], entry: string): void {
  let why: string[] = [];
  for (let i = 0; i < 200; i++) {
    why = recorded.flatMap((r) => tagFinds(r.identity.pid, entry));
    if (why.length === 0) return;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
  }
  throw new Error(`fixture premise broken: the env tag alone would find these: ${why.join('; ')}`);
}

/** Where the cgroup v2 hierarchy is mounted, from /proc/self/mountinfo. */
export function cgroup2Mount(): string | undefined {
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [left, right] = line.split(' - ');
    const f = left?.split(' ');
    if (right?.startsWith('cgroup2 ') && f?.[3] === '/') return f[4];
  }
  return undefined;
}

/** The v2 cgroup directory a process is in (from /proc/<pid>/cgroup), or undefined. */
export function cgroupDirOf(pid: number): string | undefined {
  const mount = cgroup2Mount();
  try {
    const line = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('0::'));
    return mount && line ? join(mount, line.slice(3)) : undefined;
  } catch {
    return undefined;
  }
}

/** Live (non-zombie) pids listed in a cgroup's cgroup.procs; [] when it is gone. */
export function cgroupProcs(dir: string): number[] {
  try {
    return readFileSync(join(dir, 'cgroup.procs'), 'latin1')
      .split('\n')
      .filter(Boolean)
      .map(Number)
      .filter((pid) => (statFields(pid)?.[0] ?? 'Z') !== 'Z');
  } catch {
    return [];
  }
}

/** Every live pid whose environ holds `entry` exactly (ground truth for a tag's carriers). */
export function carriersOf(entry: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    if ((statFields(Number(name))?.[0] ?? 'Z') === 'Z') continue;
    if (hasEntry(environOf(Number(name)), entry)) out.push(Number(name));
  }
  return out;
}

/**
 * Live processes under this test worker (a subreaper: every orphan of what the tests started
 * lands here), zombies excluded. The suite guard sees only tagged processes; this sees the
 * tagless leftovers these tests are about. Descriptions, for an assertion message.
 */
export function liveDescendantsOfWorker(): string[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const f = statFields(Number(name));
    if (!f || f[0] === 'Z') continue;
    const ppid = Number(f[1]);
    children.set(ppid, [...(children.get(ppid) ?? []), Number(name)]);
  }
  const out: string[] = [];
  const queue = [...(children.get(process.pid) ?? [])];
  for (let pid = queue.pop(); pid !== undefined; pid = queue.pop()) {
    out.push(`pid ${pid} "${cmdlineOf(pid)}"`);
    queue.push(...(children.get(pid) ?? []));
  }
  return out;
}

/** Waits up to 3 s for the worker's subtree to empty; returns what is left. */
export async function workerSubtreeLeft(): Promise<string[]> {
  let left = liveDescendantsOfWorker();
  for (let i = 0; i < 150 && left.length > 0; i++) {
    await new Promise((r) => setTimeout(r, 20));
    left = liveDescendantsOfWorker();
  }
  return left;
}

export interface ContainedRun extends ShapeRun {
  /** The payload (pid + start time), as tether reported it. */
  payload?: Identity;
  /** The session cgroup the payload was in at READY (none without the cgroup layer). */
  cgroupAtReady?: string;
}

/**
 * The zoo's runShape (test/support/zoo.ts) with `options` merged into the session's: runs a
 * fixture as a session, starts the tag decoys, waits for READY, takes every recorded process's
 * identity, verifies the shape, closes the payload's stdin and awaits the sweep.
 */
export async function runContained(
  shape: Shape,
  ctx: { port?: number; graceMs?: number; storm?: number } = {},
  extra: SpawnOptions = {},
): Promise<ContainedRun> {
  const dir = tempDir();
  const pidfile = join(dir, 'pids');
  const options: SpawnOptions = {
    graceMs: shape.graceMs ?? ctx.graceMs ?? 300,
    killAfterMs: 1000,
    outputCapMs: 300,
    ...extra,
    env: {
      ...process.env,
      ...shape.env,
      ZOO_BUILD: BUILD,
      ZOO_NODE: process.execPath,
      ZOO_PORT: ctx.port === undefined ? '' : String(ctx.port),
      ...(ctx.storm === undefined ? {} : { ZOO_STORM_MS: String(ctx.storm) }),
    },
  };
  const sub = spawn('sh', [join(ROOT, 'test/fixtures', shape.script), pidfile], options);
  const payload = sub.pid === undefined ? undefined : identityOf(sub.pid);
  let stderr = '';
  sub.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  sub.stdout?.on('data', () => undefined);
  const decoys = await startTagDecoys(sub.tag.name);
  for (const d of decoys) started.push(d.identity);
  const recorded: Recorded[] = [];
  let cgroupAtReady: string | undefined;
  try {
    await waitFor(
      `${shape.script} to say READY (stderr: ${stderr})`,
      () => {
        try {
          return /^READY$/m.test(readFileSync(pidfile, 'latin1'));
        } catch {
          return false;
        }
      },
      20_000,
    );
    if (payload) cgroupAtReady = cgroupDirOf(payload.pid);
    for (const line of readPidfile(pidfile)) {
      const identity =
        line.startTime !== undefined ? { pid: line.pid, startTime: line.startTime } : identityOf(line.pid);
      if (!identity || !isAlive(identity))
        throw new Error(`fixture ${shape.script}: ${line.label} pid ${line.pid} was gone before the sweep`);
      started.push(identity);
      recorded.push({ label: line.label, identity, cmdline: cmdlineOf(line.pid) });
    }
    shape.verify?.(recorded, `${sub.tag.name}=1`);
  } finally {
    sub.stdin?.end();
  }
  const result = await sub;
  const known = new Set(recorded.map((r) => `${r.identity.pid}:${r.identity.startTime}`));
  for (const line of readPidfile(pidfile)) {
    if (line.startTime === undefined || known.has(`${line.pid}:${line.startTime}`)) continue;
    known.add(`${line.pid}:${line.startTime}`);
    const identity = { pid: line.pid, startTime: line.startTime };
    started.push(identity);
    recorded.push({ label: line.label, identity, cmdline: '(recorded itself during the sweep)' });
  }
  return { shape, result, recorded, decoys, stderr, tagName: sub.tag.name, payload, cgroupAtReady };
}

/** Runs `node ARGS` (as `uid` through setpriv when given), bounded at 30 s; its pid joins `started`. */
export function runNode(args: string[], opts: { uid?: number; env?: NodeJS.ProcessEnv } = {}) {
  const argv =
    opts.uid === undefined
      ? [process.execPath, ...args]
      : [
          'setpriv',
          `--reuid=${opts.uid}`,
          `--regid=${opts.uid}`,
          '--clear-groups',
          process.execPath,
          ...args,
        ];
  const child = spawnChild(argv[0] as string, argv.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: opts.env ?? process.env,
  });
  const id = child.pid === undefined ? undefined : identityOf(child.pid);
  if (id) started.push(id);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`node ${args.join(' ')} did not exit in 30 s: ${stderr}`));
    }, 30_000);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
  return {
    child,
    done,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
  };
}
