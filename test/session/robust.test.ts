// A session under a hostile caller and a starved machine: throwing listeners, bad input,
// signals to the helper, fd exhaustion at the start and at the end, notes that must not lie.
// Ground truth: a leftover's pid + start time gone from /proc, the cgroup directory gone.
import { execFileSync, spawn as spawnChild } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { HELPER_START_TIMEOUT_MS, helperPath } from '../../src/containment/helper.js';
import { type Identity, type SweepReport, session, spawn } from '../../src/index.js';
import { createSessionCgroup } from '../../src/proc/cgroup.js';
import { liveSessionCount } from '../../src/session/session.js';
import { ROOT } from '../support/paths.js';
import { identityOf, isAlive } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { kernelKeepsExitStatus } from '../support/wait-status.js';

const FAST = { graceMs: 300, killAfterMs: 1000, outputCapMs: 300 };
const DIST = join(ROOT, 'dist/index.js');
const SIGNAL = join(ROOT, 'dist/sweep/signal.js');

const started: Identity[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

/** A payload leaving one detached leftover that ignores SIGTERM; it prints the leftover's pid. */
const TERM_IGNORING_LEFTOVER = [
  '-c',
  `trap '' TERM; setsid sleep 30 & echo "$! $(cut -d' ' -f22 /proc/$!/stat)"`,
];

/** The leftover's identity, as the payload printed it ("PID START") while it ran. */
function leftoverOf(line: string): Identity {
  const [pid, startTime] = line.trim().split(' ').map(Number);
  if (!pid || pid <= 1 || !startTime) throw new Error(`premise broken: the payload printed "${line.trim()}"`);
  const id = { pid, startTime };
  started.push(id);
  return id;
}

async function withBound<T>(what: string, ms: number, p: PromiseLike<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms (it hangs)`)), ms);
  });
  try {
    return await Promise.race([p, bound]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs a Node ESM program (bounded at 30 s) and parses its last stdout line as JSON. */
function runProgram(program: string): Promise<{ out: Record<string, unknown>; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawnChild(process.execPath, ['--input-type=module', '-e', program], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      const last = stdout.trim().split('\n').at(-1) ?? '';
      try {
        resolve({ out: JSON.parse(last), stderr });
      } catch {
        reject(
          new Error(`the program exited ${code} without a JSON line; stdout: ${stdout}; stderr: ${stderr}`),
        );
      }
    });
  });
}

// Fills this process's fd table, keeping `leave` fds free (a program's prelude).
const FILL = `import { openSync, closeSync } from 'node:fs';
const held = [];
const fill = (leave) => { try { for (;;) held.push(openSync('/dev/null', 'r')); } catch {} for (let i = 0; i < leave; i++) closeSync(held.pop()); };
const free = () => { for (const fd of held.splice(0)) closeSync(fd); };`;

describe('listeners are isolated', () => {
  it('a throwing onProgress does not stop the sweep: the KILL phase ends a TERM-ignoring leftover, and the report warns LISTENER_FAILED', async () => {
    const sub = spawn('sh', TERM_IGNORING_LEFTOVER, {
      ...FAST,
      stdio: ['ignore', 'pipe', 'ignore'],
      onProgress: () => {
        throw new Error('listener bug');
      },
    });
    let out = '';
    sub.stdout?.on('data', (d) => (out += d));
    const result = await withBound('the result', 20_000, sub.result);
    const leftover = leftoverOf(out);
    expect(isAlive(leftover), `the TERM-ignoring leftover ${leftover.pid} survived the sweep`).toBe(false);
    expect(result.report.phases.map((p) => p.signal)).toContain('SIGKILL');
    const warning = result.report.warnings.find((w) => w.code === 'LISTENER_FAILED');
    expect(warning?.message).toMatch(/onProgress.*listener bug/);
  });

  it('a throwing onEvent is reported as LISTENER_FAILED, once, and the sweep still stops the leftover', async () => {
    const s = session({
      ...FAST,
      onEvent: () => {
        throw new Error('event bug');
      },
    });
    const p = s.spawn('sh', TERM_IGNORING_LEFTOVER, { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    p.stdout?.on('data', (d) => (out += d));
    await p;
    const report = await s.end();
    const leftover = leftoverOf(out);
    expect(isAlive(leftover), `the leftover ${leftover.pid} survived`).toBe(false);
    expect(report.stopped.map((r) => r.pid)).toContain(leftover.pid);
    const failed = report.warnings.filter((w) => w.code === 'LISTENER_FAILED');
    expect(failed.map((w) => w.message)).toEqual([expect.stringMatching(/onEvent.*event bug/)]);
  });
});

describe('inputs are validated', () => {
  it('E2BIG and a NUL byte reject `result` with SpawnError, never throw, and leave no session behind', async () => {
    const before = liveSessionCount();
    for (const args of [['x'.repeat(300_000)], ['a\0b']]) {
      let sub: ReturnType<typeof spawn> | undefined;
      expect(
        () => {
          sub = spawn('echo', args, FAST);
        },
        `spawn('echo', [${args[0]?.slice(0, 5)}…]) threw synchronously`,
      ).not.toThrow();
      const error = await withBound(
        'result',
        10_000,
        sub?.result.then(
          () => undefined,
          (e: unknown) => e,
        ) as Promise<unknown>,
      );
      expect((error as { code?: string })?.code).toBe('SPAWN_FAILED');
      expect((error as Error).message.length).toBeLessThan(300);
    }
    expect(liveSessionCount(), 'a failed spawn left its session in the live set').toBe(before);
  });

  it('session.spawn with a NUL byte resolves `exited` with SPAWN_FAILED naming the argument', async () => {
    const s = session(FAST);
    const r = await s.spawn('echo', ['ok', 'a\0b']);
    expect(r.error?.code).toBe('SPAWN_FAILED');
    expect(r.error?.message).toMatch(/args\[1\].*NUL/);
    await s.end();
  });

  it('a string where the argument array belongs, and other wrong types, throw INVALID_OPTION naming the option', () => {
    const cases: Array<[string, () => unknown, RegExp]> = [
      [
        'args string',
        () => spawn('echo', 'abc' as unknown as string[]),
        /invalid args: .*"abc".*array of strings/,
      ],
      ['args element', () => spawn('echo', ['a', 3 as unknown as string]), /invalid args\[1\]: number 3/],
      ['options', () => spawn('echo', [], 'x' as unknown as object), /invalid options/],
      ['env', () => spawn('echo', [], { env: 'A=1' as unknown as NodeJS.ProcessEnv }), /invalid env/],
      ['cwd', () => spawn('echo', [], { cwd: 5 as unknown as string }), /invalid cwd/],
      ['stdio', () => spawn('echo', [], { stdio: 'bogus' as 'pipe' }), /invalid stdio.*'pipe'/],
      ['session args', () => session(FAST).spawn('echo', 'abc' as unknown as string[]), /invalid args/],
    ];
    for (const [name, run, message] of cases) {
      let error: unknown;
      try {
        const sub = run() as { result?: Promise<unknown> } | undefined;
        sub?.result?.catch(() => undefined);
      } catch (e) {
        error = e;
      }
      expect((error as { code?: string })?.code, `${name}: no INVALID_OPTION`).toBe('INVALID_OPTION');
      expect((error as Error).message, name).toMatch(message);
    }
  });

  it('a 1 MiB variable in tether run\u2019s own environment gives one line on stderr and status 126, not a stack trace', () => {
    // A variable this size cannot pass an execve(2) into tether: it is set inside tether's
    // process (as a wrapper or a Node orchestrator embedding the CLI would), before main runs.
    const bin = join(ROOT, 'bin/tether.cjs');
    const program = `process.env.BIG = 'x'.repeat(1 << 20); process.argv = [process.argv[0], ${JSON.stringify(bin)}, 'run', '--', 'true']; await import(${JSON.stringify(bin)});`;
    let status = 0;
    let stderr = '';
    try {
      execFileSync(process.execPath, ['--input-type=module', '-e', program], {
        stdio: ['ignore', 'ignore', 'pipe'],
        timeout: 20_000,
      });
    } catch (error) {
      status = (error as { status: number }).status;
      stderr = String((error as { stderr: Buffer }).stderr);
    }
    expect(status, stderr).toBe(126);
    const lines = stderr.trim().split('\n');
    expect(
      lines.filter((l) => l.startsWith('tether: ')),
      stderr,
    ).toEqual([expect.stringMatching(/^tether: cannot start true: E2BIG/)]);
    expect(stderr).not.toMatch(/\n\s+at /);
  });

  it('kill(signal) reaches the command through the helper, and is false once it ended', async () => {
    // reject: false — a command killed by a signal has failed, and would reject.
    const sub = spawn('sleep', ['30'], { ...FAST, stdio: 'ignore', reject: false });
    const payload = identityOf(sub.pid ?? 0);
    if (!payload) throw new Error('premise broken: the payload is not running');
    started.push(payload);
    expect(sub.child.pid, 'premise broken: the command did not run under the helper').not.toBe(sub.pid);
    expect(sub.kill('SIGINT')).toBe(true);
    const result = await withBound('the result', 10_000, sub.result);
    expect(result.signal).toBe('SIGINT');
    expect(sub.kill('SIGINT')).toBe(false);
    expect(() => sub.kill('SIGNOPE' as NodeJS.Signals)).toThrow(/invalid signal/);
  });

  it('a helper killed by child.kill(SIGKILL) ends the session at once: await does not hang, the command is swept, HELPER_LOST', async () => {
    const sub = spawn('sleep', ['30'], { ...FAST, stdio: 'ignore', reject: false });
    const payload = identityOf(sub.pid ?? 0);
    if (!payload) throw new Error('premise broken: the payload is not running');
    started.push(payload);
    const helper = identityOf(sub.child.pid ?? 0);
    if (helper) started.push(helper);
    expect(sub.child.pid, 'premise broken: the command did not run under the helper').not.toBe(sub.pid);
    sub.child.kill('SIGKILL');
    const result = await withBound('await of the spawn', 10_000, sub.result);
    expect(isAlive(payload), `the command ${payload.pid} still runs after its helper was killed`).toBe(false);
    expect(result.exitCode).toBe(null);
    expect(result.failed).toBe(true);
    expect(result.report.warnings.map((w) => w.code)).toContain('HELPER_LOST');
  });
});

describe('every failure of a layer falls back to the next', () => {
  it('with too few fds for the helper, the report says NO_HELPER naming EMFILE (never env-tag alone in silence)', async () => {
    const program = `${FILL}
const { spawn } = await import(${JSON.stringify(DIST)});
await spawn('true'); // koffi and the helper's path are loaded while fds are free
const runs = [];
for (const leave of [0, 4, 8, 12, 16, 18, 20, 22, 24, 28, 40]) {
  fill(leave);
  let r;
  try { r = await spawn('sh', ['-c', 'setsid sleep 30 & echo $!'], { graceMs: 300, stdio: ['ignore', 'pipe', 'ignore'] }); } catch (e) { r = e; }
  free();
  runs.push({ leave, code: r.code ?? null, error: r.error?.message ?? r.message ?? null, layers: r.report.layers, warnings: r.report.warnings, stopped: r.report.stopped.length });
}
console.log(JSON.stringify({ runs }));`;
    const { out } = await runProgram(program);
    const runs = out.runs as Array<{
      leave: number;
      code: string | null;
      error: string | null;
      layers: string[];
      warnings: SweepReport['warnings'];
    }>;
    // A run refused before anything started, for want of the fds its end needs, needs no helper.
    const refused = (r: (typeof runs)[number]) => /EMFILE.*cannot be set aside/.test(r.error ?? '');
    const silent = runs.filter(
      (r) =>
        !refused(r) &&
        !r.layers.includes('subreaper') &&
        !r.warnings.some((w) => w.code === 'NO_HELPER' && /EMFILE/.test(w.message)),
    );
    expect(
      silent.map((r) => `${r.leave} fds free: layers ${r.layers}, warnings ${JSON.stringify(r.warnings)}`),
    ).toEqual([]);
    expect(
      runs.some((r) => !r.layers.includes('subreaper')),
      'premise broken: no run lacked the helper',
    ).toBe(true);
    expect(runs.at(-1)?.layers, 'premise broken: with fds free the helper runs').toContain('subreaper');
  });

  it('an explicit helper that cannot start for want of fds throws CONTAINMENT_UNAVAILABLE saying so', async () => {
    const program = `${FILL}
const { session } = await import(${JSON.stringify(DIST)});
await session().spawn('true').exited; // koffi and the helper's path are loaded while fds are free
const messages = [];
for (const leave of [0, 2, 4, 6, 8, 10, 12, 16]) {
  const s = session({ containment: ['env-tag', 'subreaper'], graceMs: 300 });
  fill(leave);
  let message = null;
  try { await s.spawn('true', [], { stdio: 'ignore' }).exited; } catch (e) { message = e.code + ': ' + e.message; }
  free();
  await s.end();
  if (message) messages.push(message);
}
console.log(JSON.stringify({ messages }));`;
    const { out } = await runProgram(program);
    const messages = out.messages as string[];
    expect(messages.length, 'premise broken: the helper started with every fd budget').toBeGreaterThan(0);
    expect(
      messages.filter(
        (m) => !/^CONTAINMENT_UNAVAILABLE: .*(EMFILE|ENFILE|fds open of this process's limit)/.test(m),
      ),
      'a helper refused for want of fds did not say so',
    ).toEqual([]);
  });

  it('a pidfd probe that met a full fd table is not remembered: once fds are free, signals go by pidfd again', async () => {
    // The first signaller of this program is created with no fd free: koffi cannot load (or
    // pidfd_open gives EMFILE) — that says nothing about the kernel.
    const program = `${FILL}
const { createSignaller } = await import(${JSON.stringify(SIGNAL)});
fill(0);
const starved = createSignaller().mechanism;
free();
console.log(JSON.stringify({ starved, freed: createSignaller().mechanism }));`;
    const { out } = await runProgram(program);
    expect(out.starved, 'premise broken: pidfd was had with no fd free').toBe('start-time-recheck');
    expect(out.freed, 'the fd-starved probe was cached: NO_PIDFD for the rest of the process').toBe('pidfd');
  });

  it('with no fd left at end(), the fds set aside at the start let the sweep run: the TERM-ignoring leftover and the cgroup are gone', async () => {
    const program = `${FILL}
const { session } = await import(${JSON.stringify(DIST)});
const s = session({ graceMs: 300, killAfterMs: 1000 });
const p = s.spawn('sh', ['-c', ${JSON.stringify(TERM_IGNORING_LEFTOVER[1])}], { stdio: ['ignore', 'pipe', 'ignore'] });
let out = '';
p.stdout.on('data', (d) => (out += d));
await p;
const [pid, startTime] = out.trim().split(' ').map(Number);
fill(0);
const report = await s.end();
free();
console.log(JSON.stringify({ pid, startTime, report }));`;
    const { out } = await runProgram(program);
    const leftover = { pid: out.pid as number, startTime: out.startTime as number };
    started.push(leftover);
    const report = out.report as SweepReport;
    expect(report.layers, 'premise broken: the session had no helper').toContain('subreaper');
    expect(isAlive(leftover), `the leftover ${leftover.pid} survived the sweep`).toBe(false);
    if (report.cgroup) expect(existsSync(report.cgroup), `the cgroup ${report.cgroup} was left`).toBe(false);
    // The session's reserve (src/session/reserve.ts) was given back to the sweep: it ran whole.
    expect(report.warnings.map((w) => w.code)).not.toContain('SCAN_FAILED');
    expect(report.warnings.map((w) => w.code)).not.toContain('NO_PROC');
    expect(report.complete, `the sweep did not run whole: ${JSON.stringify(report.warnings)}`).toBe(true);
    expect(report.stopped.map((p) => p.pid)).toContain(leftover.pid);
  });
});

describe('notes tell the truth', () => {
  it('without a procfs the cgroup note says mountinfo cannot be read, not that no cgroup v2 is mounted', async () => {
    const empty = testDir('tether-noproc-');
    const s = session({ ...FAST, procRoot: empty });
    await s.spawn('true', [], { stdio: 'ignore' });
    const report = await s.end();
    const note = report.notes.find((n) => n.startsWith('cgroup:'));
    expect(note).toMatch(/cannot read .*self\/mountinfo \(ENOENT\)/);
    expect(note).not.toMatch(/no cgroup v2 hierarchy is mounted/);
  });

  it('a read-only cgroup mount is named EROFS', () => {
    const mount = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' - '))
      .find(([l, r]) => r?.startsWith('cgroup2 ') && l?.split(' ')[3] === '/')?.[0]
      ?.split(' ')[4];
    if (!mount) throw new Error('premise broken: no cgroup v2 mount on this machine');
    expect(createSessionCgroup, 'premise').toBeTypeOf('function');
    const dir = testDir('tether-ro-');
    const script = join(dir, 'ro.sh');
    writeFileSync(
      script,
      `mount --bind ${mount} ${mount} && mount -o remount,bind,ro ${mount} || exit 99
exec ${process.execPath} --input-type=module -e "const { createSessionCgroup } = await import('${join(ROOT, 'dist/proc/cgroup.js')}'); console.log(JSON.stringify(createSessionCgroup('TETHER_SESSION_${'ab'.repeat(16)}')))"`,
    );
    const out = execFileSync('unshare', ['--mount', '--propagation', 'private', 'sh', script], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    const made = JSON.parse(out.trim()) as { note?: string };
    expect(made.note).toMatch(/EROFS/);
    expect(made.note).not.toMatch(/ENOENT/);
  });
});

/** Live processes (not zombies) whose command line holds `mark`: ground truth for a tag in argv. */
function runningWith(mark: string): Identity[] {
  const found: Identity[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (!readFileSync(`/proc/${name}/cmdline`, 'latin1').includes(mark)) continue;
      const id = identityOf(Number(name));
      if (id) found.push(id);
    } catch {
      // gone
    }
  }
  return found;
}

/** Runs `run` with TETHER_HELPER set to `path`, restoring the variable after. */
async function withHelper<T>(path: string, run: () => Promise<T>): Promise<T> {
  const before = process.env.TETHER_HELPER;
  process.env.TETHER_HELPER = path;
  try {
    return await run();
  } finally {
    if (before === undefined) delete process.env.TETHER_HELPER;
    else process.env.TETHER_HELPER = before;
  }
}

// A command run with TETHER_HELPER=path: it runs (exit 0) without the helper, the report's
// NO_HELPER warning matches `why`, and nothing appeared in the current directory (a shell that
// ran a binary's bytes as commands once wrote files there).
async function expectNoHelper(path: string, why: RegExp): Promise<void> {
  const cwdBefore = readdirSync(process.cwd()).sort();
  const result = await withHelper(path, () =>
    withBound('the result', 20_000, spawn('true', [], FAST).result),
  );
  const noHelper = result.report.warnings.find((w) => w.code === 'NO_HELPER');
  expect(noHelper?.message, `${path}: ${JSON.stringify(result.report.warnings)}`).toMatch(why);
  expect(result.exitCode).toBe(0);
  const created = readdirSync(process.cwd()).filter((f) => !cwdBefore.includes(f));
  expect(created, `${path}: the helper's start created files in the current directory`).toEqual([]);
}

describe('every option is checked before anything starts', () => {
  it('a signal that is not an AbortSignal, a non-function onEvent or onProgress, a sparse args array and an env whose getter throws are INVALID_OPTION, and nothing ran', async () => {
    const mark = `tether-unstarted-${process.pid}-${Date.now()}`;
    const dir = testDir('tether-unstarted-');
    const marker = join(dir, 'ran');
    const script = ['-c', `echo ran > ${marker}; sleep 30`, mark];
    const throwingEnv = Object.defineProperty({}, 'A', {
      enumerable: true,
      get() {
        throw new Error('the getter of A throws');
      },
    }) as NodeJS.ProcessEnv;
    // A sparse array: a hole at index 0, then the arguments (`[, 'a']`).
    const holed: string[] = [];
    script.forEach((arg, i) => {
      holed[i + 1] = arg;
    });
    if (0 in holed || holed.length !== script.length + 1) throw new Error('premise broken: no hole at 0');
    const cases: Array<[string, () => unknown, RegExp]> = [
      [
        'signal {}',
        () => spawn('sh', script, { ...FAST, signal: {} as AbortSignal }),
        /invalid signal: an object that is not an AbortSignal \(expected an AbortSignal/,
      ],
      [
        'signal "x"',
        () => spawn('sh', script, { ...FAST, signal: 'x' as unknown as AbortSignal }),
        /invalid signal/,
      ],
      [
        'onEvent',
        () => spawn('sh', script, { ...FAST, onEvent: 5 as unknown as () => void }),
        /invalid onEvent: number 5 \(expected a function/,
      ],
      [
        'onProgress',
        () => session({ ...FAST, onProgress: 'x' as unknown as () => void }),
        /invalid onProgress: the string "x"/,
      ],
      [
        'procRoot',
        () => spawn('sh', script, { ...FAST, procRoot: 7 as unknown as string }),
        /invalid procRoot/,
      ],
      ['sparse args', () => spawn('sh', holed, FAST), /invalid args\[0\]: undefined/],
      [
        'sparse session args',
        () => {
          const s = session(FAST); // the caller's own session: ended here, it ran nothing
          try {
            return s.spawn('sh', holed);
          } finally {
            s.endSync();
          }
        },
        /invalid args\[0\]/,
      ],
      [
        'env getter',
        () => spawn('sh', script, { ...FAST, env: throwingEnv }),
        /invalid env: .*the getter of A throws/,
      ],
    ];
    const before = liveSessionCount();
    for (const [name, run, message] of cases) {
      let error: unknown;
      try {
        const sub = run() as { result?: Promise<unknown> } | undefined;
        sub?.result?.catch(() => undefined);
      } catch (e) {
        error = e;
      }
      expect((error as { code?: string })?.code, `${name}: ${String(error)} is no INVALID_OPTION`).toBe(
        'INVALID_OPTION',
      );
      expect((error as Error).message, name).toMatch(message);
      expect(liveSessionCount(), `${name}: a session was left in the live set`).toBe(before);
    }
    await delay(300);
    const running = runningWith(mark);
    started.push(...running);
    expect(running, 'a command started although its options were refused').toEqual([]);
    expect(existsSync(marker), 'a command ran although its options were refused').toBe(false);
  });

  it('a signal that throws once the command has started: the command is swept before the error reaches the caller, no session is left', async () => {
    const mark = `tether-thrown-${process.pid}-${Date.now()}`;
    const dir = testDir('tether-thrown-');
    const marker = join(dir, 'ran');
    const hostile = new AbortController().signal;
    Object.defineProperty(hostile, 'addEventListener', {
      value: () => {
        throw new Error('addEventListener refuses');
      },
    });
    const before = liveSessionCount();
    expect(() =>
      spawn('sh', ['-c', `sleep 0.3; echo ran > ${marker}; sleep 30`, mark], { ...FAST, signal: hostile }),
    ).toThrow(/addEventListener refuses/);
    // The released helper (its argv holds the mark too) exits on its own a moment later.
    const commandOf = (id: Identity) => readFileSync(`/proc/${id.pid}/comm`, 'latin1').trim();
    const left = runningWith(mark).filter((id) => commandOf(id) !== 'tether-helper');
    started.push(...left);
    expect(left, 'the command outlived the spawn() that threw (the caller has no handle on it)').toEqual([]);
    expect(liveSessionCount(), 'the session was left to the exit hook').toBe(before);
    await delay(600);
    const after = runningWith(mark);
    started.push(...after);
    expect(after, 'the helper or the command still runs after spawn() threw').toEqual([]);
    expect(existsSync(marker), 'the command ran on after spawn() threw').toBe(false);
  });
});

describe('kill() takes every signal of signal(7)', () => {
  it('real-time signals by number and by name reach the command, through the helper and without it', async () => {
    const viaHelper = spawn('sleep', ['30'], { ...FAST, stdio: 'ignore', reject: false });
    const direct = spawn('sleep', ['30'], {
      ...FAST,
      stdio: 'ignore',
      containment: ['env-tag'],
      reject: false,
    });
    const named = spawn('sleep', ['30'], { ...FAST, stdio: 'ignore', reject: false });
    const ids = [viaHelper, direct, named].map((s) => identityOf(s.pid ?? 0));
    for (const id of ids) if (id) started.push(id);
    if (ids.some((id) => !id)) throw new Error('premise broken: a command is not running');
    expect(viaHelper.child.pid, 'premise broken: the command did not run under the helper').not.toBe(
      viaHelper.pid,
    );
    expect(direct.child.pid, 'premise broken: env-tag ran the command under a helper').toBe(direct.pid);
    expect(viaHelper.kill(34), 'kill(34) through the helper').toBe(true);
    expect(direct.kill('SIGRTMAX'), "kill('SIGRTMAX') without the helper").toBe(true);
    expect(named.kill('SIGRTMIN+1'), "kill('SIGRTMIN+1')").toBe(true);
    const [a, b, c] = await withBound(
      'the results',
      10_000,
      Promise.all([viaHelper.result, direct.result, named.result]),
    );
    expect(a?.signalNumber, 'the command killed by 34 reports another end').toBe(34);
    expect(c?.signalNumber, "the command killed by 'SIGRTMIN+1' reports another end").toBe(35);
    // Without the helper the end is the kernel's wait status (Node's exit event names no such
    // signal and says exit code 0): src/proc/wait-status.ts, on a kernel that keeps it.
    expect(b, 'premise broken: the direct command has no result').toBeDefined();
    if (await kernelKeepsExitStatus())
      expect(b?.signalNumber, "the direct command killed by 'SIGRTMAX' reports another end").toBe(64);
    ids.forEach((id, i) => {
      expect(id && isAlive(id), `command ${i} (pid ${id?.pid}) still runs after its real-time signal`).toBe(
        false,
      );
    });
  });

  it('0, a negative, a fractional or too high number and an unknown name are INVALID_OPTION naming the accepted signals, and nothing is sent', async () => {
    const sub = spawn('sleep', ['30'], { ...FAST, stdio: 'ignore' });
    const id = identityOf(sub.pid ?? 0);
    if (!id) throw new Error('premise broken: the command is not running');
    started.push(id);
    for (const bad of [0, -15, 1.5, 65, Number.NaN, 'SIGRTMIN-1', 'SIGRTMAX+1', 'SIGFOO', 'TERM']) {
      let error: unknown;
      try {
        sub.kill(bad as NodeJS.Signals);
      } catch (e) {
        error = e;
      }
      expect((error as { code?: string })?.code, `kill(${String(bad)}) was not refused`).toBe(
        'INVALID_OPTION',
      );
      expect((error as Error).message).toMatch(/invalid signal: .*from 1 to 64/);
    }
    expect(isAlive(id), 'a refused kill() reached the command').toBe(true);
    await sub[Symbol.asyncDispose]();
    expect(isAlive(id)).toBe(false);
  });
});

describe('a helper that does not answer', () => {
  it('a helper that never writes its started line holds the start for a bounded time, is killed, and the command runs without it (NO_HELPER names the bound)', async () => {
    const dir = testDir('tether-mute-');
    const mute = join(dir, 'mute-helper');
    writeFileSync(mute, '#!/bin/sh\nsleep 20\n', { mode: 0o755 });
    const mark = `tether-mute-${process.pid}-${Date.now()}`;
    const t0 = performance.now();
    const result = await withHelper(mute, async () => {
      const sub = spawn('echo', [mark], { ...FAST, stdio: 'ignore' });
      return withBound('the result', 30_000, sub.result);
    });
    const ms = performance.now() - t0;
    expect(ms, 'the start waited on the mute helper past its bound (the event loop was frozen)').toBeLessThan(
      HELPER_START_TIMEOUT_MS + 5000,
    );
    expect(result.exitCode, 'the command did not run without the helper').toBe(0);
    const noHelper = result.report.warnings.find((w) => w.code === 'NO_HELPER');
    expect(noHelper?.message).toMatch(
      new RegExp(`no "started" line within ${HELPER_START_TIMEOUT_MS} ms: it was killed`),
    );
    await delay(200); // Node reaps the killed helper
    const left = runningWith(mute);
    started.push(...left);
    expect(left, 'the mute helper still runs').toEqual([]);
  });

  it('a truncated helper is refused before it runs (execvp would hand it to /bin/sh); a helper that exits before any line is named by its signal', async () => {
    const dir = testDir('tether-truncated-');
    const real = helperPath();
    if (!('path' in real)) throw new Error(`premise broken: no helper (${real.reason})`);
    const truncated = join(dir, 'truncated-helper');
    writeFileSync(truncated, readFileSync(real.path).subarray(0, 100), { mode: 0o755 });
    const aborting = join(dir, 'aborting-helper');
    writeFileSync(aborting, '#!/bin/sh\nkill -ABRT $$\n', { mode: 0o755 });
    for (const [path, why] of [
      [truncated, /is a truncated ELF file \(100 bytes; its program headers end at byte \d+\)/],
      [aborting, /closed its status pipe without a line: it was killed by SIGABRT/],
    ] as const) {
      await expectNoHelper(path, why);
    }
  });

  it('an ELF file the kernel would refuse (an object file, a core dump, bad program headers) is refused before it runs', async () => {
    const dir = testDir('tether-badelf-');
    const real = helperPath();
    if (!('path' in real)) throw new Error(`premise broken: no helper (${real.reason})`);
    const helper = readFileSync(real.path);
    const patched = (name: string, patch: (b: Buffer) => void) => {
      const copy = Buffer.from(helper);
      patch(copy);
      const path = join(dir, name);
      writeFileSync(path, copy, { mode: 0o755 });
      return path;
    };
    // Each of these once reached execvp's /bin/sh fallback: shell errors on stderr, and for the
    // patched ones a file named by the binary's bytes in the current directory.
    const object = join(dir, 'helper.o');
    execFileSync('cc', ['-c', '-o', object, join(ROOT, 'native/helper.c')], { timeout: 60_000 });
    execFileSync('chmod', ['+x', object]);
    const cases: Array<[string, RegExp]> = [
      [object, /is an ELF file that is not an executable \(a relocatable object\)/],
      [
        patched('core', (b) => b.writeUInt16LE(4, 16)),
        /is an ELF file that is not an executable \(a core dump\)/,
      ],
      [
        patched('phentsize', (b) => b.writeUInt16LE(57, 54)),
        /cannot load \(\d+ program headers of 57 bytes; expected at least one of 56\)/,
      ],
      [patched('phnum', (b) => b.writeUInt16LE(0, 56)), /cannot load \(0 program headers of 56 bytes/],
    ];
    for (const [path, why] of cases) {
      await expectNoHelper(path, why);
    }
  });
});
