// Helpers of the containment tests: the zoo's runShape with SpawnOptions of the test's own
// (containment, above all), and ground truth read straight from /proc and the cgroup tree.
//
// Sessions start through src/ (runShape), as in the zoo: from src/ too the library finds the
// helper at dist/native/linux-<arch>/tether-helper (built by globalSetup), and problemsOf fails a run that
// warns NO_HELPER.
import { readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { helperFile } from '../../src/containment/prebuilt.js';
import type { SpawnOptions } from '../../src/index.js';
import { ROOT } from '../support/paths.js';
import { cmdlineOf, environOf, hasEntry, pids, ppidOf, readStat, stateOf } from '../support/proc.js';
import { type Recorded, runShape, type Shape, type ShapeRun } from '../support/zoo.js';

/** The helper binary `npm run build` makes for this machine (what /proc/<pid>/exe of a helper points to). */
export const HELPER_EXE = join(ROOT, 'dist', helperFile(process.arch));

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

/** True while `pid` exists and is not a zombie (of any kind). */
function running(pid: number): boolean {
  const state = stateOf(pid);
  return state !== 'gone' && state !== 'Z';
}

/** A tether helper (or the init of its PID namespace, a fork of it): never a session member. */
export function isHelper(pid: number): boolean {
  // A helper started before a rebuild runs a binary renamed over since: "PATH (deleted)".
  return exeOf(pid).replace(/ \(deleted\)$/, '') === helperExe();
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
      .filter(running);
  } catch {
    return [];
  }
}

/** Every live pid whose environ holds `entry` exactly (ground truth for a tag's carriers). */
export function carriersOf(entry: string): number[] {
  const out: number[] = [];
  for (const pid of pids()) {
    if (pid === process.pid || !running(pid)) continue;
    if (hasEntry(environOf(pid), entry)) out.push(pid);
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
  for (const pid of pids()) {
    const stat = readStat(pid);
    if (!stat || stat.state === 'Z') continue;
    children.set(stat.ppid, [...(children.get(stat.ppid) ?? []), pid]);
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
  /** The session cgroup the payload was in at READY (none without the cgroup layer). */
  cgroupAtReady?: string;
}

/**
 * The zoo's runShape (test/support/zoo.ts) with `extra` merged into the session's options, and
 * the payload's cgroup taken at READY.
 */
export async function runContained(
  shape: Shape,
  ctx: { port?: number; graceMs?: number; storm?: number } = {},
  extra: SpawnOptions = {},
): Promise<ContainedRun> {
  let cgroupAtReady: string | undefined;
  const run = await runShape(shape, {
    ...ctx,
    options: extra,
    atReady: (payload) => {
      if (payload) cgroupAtReady = cgroupDirOf(payload.pid);
    },
  });
  return { ...run, cgroupAtReady };
}
