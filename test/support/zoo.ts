// Helpers of the leak zoo: run a fixture as a session, take ground truth, start decoys.
import { type ChildProcess, spawn as spawnChild } from 'node:child_process';
import { chmodSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Identity, type Result, type SpawnOptions, spawn } from '../../src/index.js';
import type { ProcessRecord } from '../../src/sweep/report.js';
import { BUILD, FIXTURES } from './paths.js';
import { cmdlineOf, environOf, hasEntry, identityOf, isAlive } from './proc.js';
import { testDir } from './temp.js';

export type FoundBy = ProcessRecord['foundBy'];

/** A process a fixture started, with its identity taken while it ran. */
export interface Recorded {
  label: string;
  identity: Identity;
  cmdline: string;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export function tempDir(mode?: number): string {
  const dir = testDir('tether-zoo-');
  if (mode !== undefined) chmodSync(dir, mode);
  return dir;
}

/** Lines of a pidfile: "<pid> <label>" or "<pid> <starttime> <label>"; READY is skipped. */
export function readPidfile(path: string): { pid: number; startTime?: number; label: string }[] {
  let text = '';
  try {
    text = readFileSync(path, 'latin1');
  } catch {
    return [];
  }
  const out: { pid: number; startTime?: number; label: string }[] = [];
  for (const line of text.split('\n')) {
    const parts = line.trim().split(/\s+/);
    if (!parts[0] || !/^\d+$/.test(parts[0])) continue;
    if (parts.length >= 3 && /^\d+$/.test(parts[1] ?? '')) {
      out.push({ pid: Number(parts[0]), startTime: Number(parts[1]), label: parts.slice(2).join(' ') });
    } else {
      out.push({ pid: Number(parts[0]), label: parts.slice(1).join(' ') });
    }
  }
  return out;
}

export async function waitFor(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

/** Sends SIGKILL to `id` if that very process is still alive (never to anything else). */
export function killIfAlive(id: Identity): void {
  if (id.pid > 1 && isAlive(id)) {
    try {
      process.kill(id.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/** A process started by the test that must survive a sweep. */
export interface Decoy {
  label: string;
  identity: Identity;
  child?: ChildProcess;
}

export function describeProcess(id: Identity, cmdline = cmdlineOf(id.pid)): string {
  return `pid ${id.pid} (start ${id.startTime}) "${cmdline}"`;
}

/** Starts a `sleep` with `env` and waits until its environ shows `entry`. */
export async function startSleeper(label: string, env: NodeJS.ProcessEnv, entry: string): Promise<Decoy> {
  const child = spawnChild('sleep', ['1000'], { env, stdio: 'ignore' });
  const pid = child.pid;
  if (pid === undefined) throw new Error(`decoy ${label} did not start`);
  const identity = identityOf(pid);
  if (!identity) throw new Error(`decoy ${label} vanished at once`);
  await waitFor(`decoy ${label} to exec`, () => hasEntry(environOf(pid), entry), 5000);
  return { label, identity, child };
}

/** The per-session decoys: another session's tag, `NAME=10`, and `NAME_X=1`. */
export async function startTagDecoys(tagName: string): Promise<Decoy[]> {
  const other = `TETHER_SESSION_${'0123456789abcdef'.repeat(2)}`;
  const base = { PATH: process.env.PATH };
  return Promise.all([
    startSleeper("another session's tag", { ...base, [other]: '1' }, `${other}=1`),
    startSleeper('same name with =10', { ...base, [tagName]: '10' }, `${tagName}=10`),
    startSleeper('prefix-sharing name _X', { ...base, [`${tagName}_X`]: '1' }, `${tagName}_X=1`),
  ]);
}

/** A TCP server started before any session; payloads connect to it with zoo-connect. */
export async function startServer(): Promise<{ decoy: Decoy; port: number }> {
  const code = `const s=require('net').createServer(c=>{c.on('data',()=>c.end('ok\\n'));c.on('error',()=>{})});
s.listen(0,'127.0.0.1',()=>console.log(s.address().port));`;
  const child = spawnChild(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('decoy server did not start')), 10_000);
    child.stdout?.once('data', (d: Buffer) => {
      clearTimeout(timer);
      resolve(Number(d.toString().trim()));
    });
  });
  const identity = identityOf(child.pid ?? 0);
  if (!identity) throw new Error('decoy server vanished');
  return { decoy: { label: 'TCP server the payload connected to', identity, child }, port };
}

/** The decoys a test file starts before its sessions: the TCP server and the test runner itself. */
export interface FileDecoys {
  server: { decoy: Decoy; port: number };
  /** The test worker and its parent (the main vitest process). */
  runner: Decoy[];
}

/** Starts the TCP server decoy and takes the test runner's identities (a test file's beforeAll). */
export async function startFileDecoys(): Promise<FileDecoys> {
  const server = await startServer();
  const self = identityOf(process.pid);
  const parent = identityOf(process.ppid);
  const runner = [
    ...(self ? [{ label: 'the test runner (worker)', identity: self }] : []),
    ...(parent ? [{ label: 'the test runner (main)', identity: parent }] : []),
  ];
  return { server, runner };
}

/** One leak shape: a fixture script and what the sweep must do with what it started. */
export interface Shape {
  name: string;
  script: string;
  /**
   * How each label's processes should be found (checked against report.stopped); default
   * `carrier` or `descendant`, or any layer with `anyLayer` (several layers were on, and which
   * saw a process first depends on timing: a process mid-exec has no readable environ).
   */
  foundBy?: Record<string, FoundBy[]>;
  anyLayer?: boolean;
  /** Why the sweep must find them: printed with a survivor. */
  how: string;
  graceMs?: number;
  /** The signal that must have ended a label's processes, by the report. */
  endedBy?: Record<string, 'SIGTERM' | 'SIGKILL' | 'exited'>;
  env?: NodeJS.ProcessEnv;
  /** A check on the recorded processes right after READY (that the fixture built its shape). */
  verify?: (recorded: Recorded[], tagEntry: string) => void;
}

export interface ShapeRun {
  shape: Shape;
  result: Result;
  recorded: Recorded[];
  decoys: Decoy[];
  stderr: string;
  tagName: string;
  /** The payload (pid + start time), taken as it started. */
  payload?: Identity;
}

/** Everything the tests started, killed in afterEach / afterAll. */
export const started: Identity[] = [];

/**
 * Runs a fixture as a session, starts the tag decoys, waits for READY, takes every recorded
 * process's identity, verifies the shape, closes the payload's stdin and awaits the sweep.
 * `ctx.options` are merged into the session's options (all but `env`, which is the zoo's);
 * `ctx.atReady` is called at READY, while the session still runs.
 */
export async function runShape(
  shape: Shape,
  ctx: {
    port?: number;
    killAfterMs?: number;
    graceMs?: number;
    storm?: number;
    options?: SpawnOptions;
    atReady?: (payload: Identity | undefined) => void;
  } = {},
): Promise<ShapeRun> {
  const dir = tempDir();
  const pidfile = join(dir, 'pids');
  const options: SpawnOptions = {
    graceMs: shape.graceMs ?? ctx.graceMs ?? 300,
    killAfterMs: ctx.killAfterMs ?? 1000,
    outputCapMs: 300,
    ...ctx.options,
    env: {
      ...process.env,
      ...shape.env,
      ZOO_BUILD: BUILD,
      ZOO_NODE: process.execPath,
      ZOO_PORT: ctx.port === undefined ? '' : String(ctx.port),
      ...(ctx.storm === undefined ? {} : { ZOO_STORM_MS: String(ctx.storm) }),
    },
  };
  const sub = spawn('sh', [join(FIXTURES, shape.script), pidfile], options);
  const payload = sub.pid === undefined ? undefined : identityOf(sub.pid);
  let stderr = '';
  sub.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  sub.stdout?.on('data', () => undefined);
  const decoys = await startTagDecoys(sub.tag);
  for (const d of decoys) started.push(d.identity);
  const recorded: Recorded[] = [];
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
    ctx.atReady?.(payload);
    for (const line of readPidfile(pidfile)) {
      const identity =
        line.startTime !== undefined ? { pid: line.pid, startTime: line.startTime } : identityOf(line.pid);
      if (!identity || !isAlive(identity))
        throw new Error(`fixture ${shape.script}: ${line.label} pid ${line.pid} was gone before the sweep`);
      started.push(identity);
      recorded.push({ label: line.label, identity, cmdline: cmdlineOf(line.pid) });
    }
    shape.verify?.(recorded, `${sub.tag}=1`);
  } finally {
    sub.stdin?.end();
  }
  const result = await sub;
  // Processes that recorded themselves after READY (the storm's children).
  const known = new Set(recorded.map((r) => `${r.identity.pid}:${r.identity.startTime}`));
  for (const line of readPidfile(pidfile)) {
    if (line.startTime === undefined || known.has(`${line.pid}:${line.startTime}`)) continue;
    known.add(`${line.pid}:${line.startTime}`);
    const identity = { pid: line.pid, startTime: line.startTime };
    started.push(identity);
    recorded.push({ label: line.label, identity, cmdline: '(recorded itself during the sweep)' });
  }
  return { shape, result, recorded, decoys, stderr, tagName: sub.tag, payload };
}

/** Problems with a run, each a sentence naming the process; empty when all is well. */
export function problemsOf(run: ShapeRun, extraDecoys: Decoy[] = []): string[] {
  const problems: string[] = [];
  const { report } = run.result;
  const at = `[${run.shape.name}, ${run.tagName}]`;
  for (const r of run.recorded) {
    if (isAlive(r.identity)) {
      problems.push(
        `${at} survivor ${r.label} ${describeProcess(r.identity, r.cmdline)} is still alive; it should have been found as ${run.shape.how}`,
      );
    }
  }
  for (const d of [...run.decoys, ...extraDecoys]) {
    if (!isAlive(d.identity))
      problems.push(`${at} decoy "${d.label}" ${describeProcess(d.identity)} was killed`);
    if (report.stopped.some((s) => s.pid === d.identity.pid && s.startTime === d.identity.startTime)) {
      problems.push(`${at} decoy "${d.label}" pid ${d.identity.pid} is listed as stopped`);
    }
  }
  for (const r of run.recorded) {
    const rec = report.stopped.find((s) => s.pid === r.identity.pid && s.startTime === r.identity.startTime);
    if (!rec) {
      // What the sweep did see, to tell a process it never found from one listed under another
      // identity (the report's own ends, its phases and warnings).
      const seen = report.stopped.map((s) => `${s.pid}:${s.startTime}<${s.ppid} ${s.comm} ${s.foundBy}`);
      problems.push(
        `${at} ${r.label} ${describeProcess(r.identity, r.cmdline)} is not listed in report.stopped (${isAlive(r.identity) ? 'alive' : 'gone'} now; stopped: [${seen.join(', ')}]; phases: ${JSON.stringify(report.phases)}; warnings: ${JSON.stringify(report.warnings)})`,
      );
      continue;
    }
    const ended = run.shape.endedBy?.[r.label];
    if (ended && rec.endedBy !== ended) {
      problems.push(
        `${at} ${r.label} pid ${r.identity.pid} ended by ${rec.endedBy} (signals ${rec.signals.join(',')}), expected ${ended}`,
      );
    }
    const allowed: FoundBy[] =
      run.shape.foundBy?.[r.label] ??
      (run.shape.anyLayer ? ['carrier', 'descendant', 'subreaper', 'cgroup'] : ['carrier', 'descendant']);
    if (!allowed.includes(rec.foundBy)) {
      problems.push(
        `${at} ${r.label} pid ${r.identity.pid} listed with foundBy ${rec.foundBy}${rec.via === undefined ? '' : ` via ${rec.via}`}, expected ${allowed.join(' or ')}; payload ${run.payload?.pid}, stopped: ${report.stopped.map((s) => `${s.pid}<${s.ppid} ${s.comm} ${s.foundBy}`).join(', ')}`,
      );
    }
  }
  if (report.survivors.length) {
    problems.push(`${at} report lists survivors: ${JSON.stringify(report.survivors)}`);
  }
  if (!report.complete || !report.ok)
    problems.push(`${at} report not complete/ok: ${JSON.stringify(report.warnings)}`);
  // The zoo runs with the default containment: a missing helper is a broken premise, not a pass.
  const noHelper = report.warnings.find((w) => w.code === 'NO_HELPER');
  if (noHelper) problems.push(`${at} ran without the helper: ${noHelper.message}`);
  return problems;
}

export function cleanup(extra: Decoy[] = []): void {
  for (const id of started.splice(0)) killIfAlive(id);
  for (const d of extra) killIfAlive(d.identity);
}
