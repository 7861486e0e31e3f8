// Exit paths: however a session ends, its leftovers are swept (and the report says so).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CommandError,
  type Identity,
  SpawnError,
  type SpawnOptions,
  type Subprocess,
  type SweepReport,
  session,
  spawn,
  type TetherEvent,
} from '../../src/index.js';
import { runNode } from '../support/node.js';
import { BUILD, FIXTURES, ROOT } from '../support/paths.js';
import { cmdlineOf, environOf, hasEntry, identityOf, isAlive } from '../support/proc.js';
import {
  cleanup,
  describeProcess,
  type Recorded,
  readPidfile,
  started,
  tempDir,
  waitFor,
} from '../support/zoo.js';

afterEach(() => cleanup());

const FAST = { graceMs: 300, killAfterMs: 1000, outputCapMs: 300 } as const;

function pidfileIn(dir = tempDir()): string {
  return join(dir, 'pids');
}

/** Waits for READY in `pidfile` and takes the identity of every recorded process. */
async function recordedIn(pidfile: string, timeoutMs = 20_000): Promise<Recorded[]> {
  await waitFor(
    `READY in ${pidfile}`,
    () => {
      try {
        return /^READY$/m.test(readFileSync(pidfile, 'latin1'));
      } catch {
        return false;
      }
    },
    timeoutMs,
  );
  return readPidfile(pidfile).map((line) => {
    const identity = identityOf(line.pid);
    if (!identity) throw new Error(`${line.label} pid ${line.pid} was gone before the sweep`);
    started.push(identity);
    return { label: line.label, identity, cmdline: cmdlineOf(line.pid) };
  });
}

function survivors(recorded: Recorded[], how: string): string[] {
  return recorded
    .filter((r) => isAlive(r.identity))
    .map(
      (r) =>
        `survivor ${r.label} ${describeProcess(r.identity, r.cmdline)}: should have been found as ${how}`,
    );
}

function listed(stopped: { pid: number; startTime: number }[], recorded: Recorded[]): string[] {
  return recorded
    .filter((r) => !stopped.some((s) => s.pid === r.identity.pid && s.startTime === r.identity.startTime))
    .map((r) => `${r.label} ${describeProcess(r.identity, r.cmdline)} is not in report.stopped`);
}

function fixture(name: string): string {
  return join(FIXTURES, name);
}

/** Runs nohup.sh as a session and returns it once the fixture is READY. */
async function startNohup(options: SpawnOptions = {}) {
  const pidfile = pidfileIn();
  const sub = spawn('sh', [fixture('nohup.sh'), pidfile], { ...FAST, ...options });
  const recorded = await recordedIn(pidfile);
  const payload = sub.pid === undefined ? undefined : identityOf(sub.pid);
  return { sub, recorded, payload };
}

/**
 * Runs node/unreadable.mjs as uid 65534 with `containment`: its payload leaves a same-uid
 * non-dumpable orphan. Checks that the fixture recorded it and exited 0 as uid 65534; returns
 * the orphan (its pid joins `started`) and the sweep's report.
 */
async function runUnreadable(containment: 'env-tag' | 'auto') {
  const pidfile = pidfileIn(tempDir(0o777));
  const node = runNode([join(FIXTURES, 'node/unreadable.mjs'), pidfile, BUILD, containment], { uid: 65534 });
  const out = await node.done;
  const nd = readPidfile(pidfile).find((l) => l.label === 'nondumpable');
  expect(nd, `the fixture recorded its non-dumpable process (stderr: ${out.stderr})`).toBeDefined();
  const pid = nd?.pid ?? 0;
  const identity = { pid, startTime: nd?.startTime ?? -1 };
  started.push(identity);
  expect(out.code, out.stderr).toBe(0);
  const { uid, report } = JSON.parse(out.stdout) as { uid: number; report: SweepReport };
  expect(uid).toBe(65534);
  return { nd, pid, identity, report };
}

// A failed command rejects (reject: true, the default): its CommandError, with the code expected.
async function rejection(sub: Subprocess, code: string): Promise<CommandError & { report: SweepReport }> {
  const error = await sub.result.then(
    (r) => r,
    (e: unknown) => e,
  );
  expect(error, `the command resolved instead of rejecting with ${code}`).toBeInstanceOf(CommandError);
  expect((error as CommandError).code).toBe(code);
  return error as CommandError & { report: SweepReport };
}

describe('every exit path sweeps the session', () => {
  it('sweeps the leftovers of a payload that exits 0 and reports success', async () => {
    const { sub, recorded } = await startNohup();
    sub.stdin?.end();
    const result = await sub;
    expect(result.exitCode).toBe(0);
    expect(result.failed).toBe(false);
    expect(survivors(recorded, 'a carrier after a clean exit')).toEqual([]);
    expect(listed(result.report.stopped, recorded)).toEqual([]);
    expect(result.report.ok).toBe(true);
  });

  it('sweeps the leftovers of a payload that exits 3 and rejects with COMMAND_FAILED', async () => {
    const { sub, recorded } = await startNohup({ env: { ...process.env, ZOO_EXIT: '3' } });
    sub.stdin?.end();
    const result = await rejection(sub, 'COMMAND_FAILED');
    expect(result.exitCode).toBe(3);
    expect(result.failed).toBe(true);
    expect(survivors(recorded, 'a carrier after a failed exit')).toEqual([]);
    expect(listed(result.report.stopped, recorded)).toEqual([]);
  });

  it('rejects with SpawnError carrying a report when the command does not exist (ENOENT)', async () => {
    const sub = spawn('/nonexistent/zoo-no-such-command', [], FAST);
    const error = await sub.result.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(SpawnError);
    const spawnError = error as SpawnError;
    expect(spawnError.code).toBe('SPAWN_FAILED');
    expect((spawnError.cause as NodeJS.ErrnoException).code).toBe('ENOENT');
    expect(spawnError.report.complete).toBe(true);
    expect(spawnError.report.stopped).toEqual([]);
  });

  it('stops the payload and its leftovers when the AbortSignal fires', async () => {
    const ac = new AbortController();
    const { sub, recorded, payload } = await startNohup({ signal: ac.signal });
    ac.abort();
    const result = await rejection(sub, 'CANCELLED');
    expect(result.isCanceled).toBe(true);
    expect(result.failed).toBe(true);
    expect(payload && isAlive(payload), 'the payload itself is gone').toBeFalsy();
    expect(survivors(recorded, 'a carrier, swept on abort')).toEqual([]);
    expect(listed(result.report.stopped, recorded)).toEqual([]);
  });

  it('stops the payload and its leftovers when the timeout expires', async () => {
    const { sub, recorded, payload } = await startNohup({ timeout: 3000 });
    const result = await rejection(sub, 'TIMED_OUT');
    expect(result.timedOut).toBe(true);
    expect(result.failed).toBe(true);
    expect(payload && isAlive(payload), 'the payload itself is gone').toBeFalsy();
    expect(survivors(recorded, 'a carrier, swept on timeout')).toEqual([]);
  });

  it('sweeps when an exception leaves an `await using` block', async () => {
    let recorded: Recorded[] = [];
    let payload: Identity | undefined;
    const body = async () => {
      const pidfile = pidfileIn();
      await using sub = spawn('sh', [fixture('nohup.sh'), pidfile], FAST);
      payload = sub.pid === undefined ? undefined : identityOf(sub.pid);
      recorded = await recordedIn(pidfile);
      throw new Error('boom inside await using');
    };
    await expect(body()).rejects.toThrow('boom inside await using');
    expect(recorded.length).toBeGreaterThan(0);
    expect(payload && isAlive(payload), 'the payload itself is gone').toBeFalsy();
    expect(survivors(recorded, 'a carrier, swept by [Symbol.asyncDispose]')).toEqual([]);
  });

  it("stops a Node program's leftovers when it calls process.exit() (the exit hook's sync sweep)", async () => {
    const pidfile = pidfileIn();
    const node = runNode([join(FIXTURES, 'node/exit-hook.mjs'), pidfile]);
    const recorded = await recordedIn(pidfile);
    writeFileSync(`${pidfile}.go`, '');
    const out = await node.done;
    expect(out.code, out.stderr).toBe(0);
    expect(survivors(recorded, 'a carrier, swept synchronously by the exit hook')).toEqual([]);
  });

  it("stops an inner session's leftovers, which carry both tags, when the outer session ends", async () => {
    const pidfile = pidfileIn();
    const ac = new AbortController();
    const outer = spawn(process.execPath, [join(FIXTURES, 'node/nested.mjs'), pidfile], {
      ...FAST,
      signal: ac.signal,
    });
    let innerTag = '';
    outer.stdout?.on('data', (d: Buffer) => {
      innerTag += d.toString();
    });
    const recorded = await recordedIn(pidfile);
    await waitFor('the inner tag', () => /TETHER_SESSION_[0-9a-f]{32}/.test(innerTag), 5000);
    const inner = innerTag.trim();
    for (const r of recorded) {
      const environ = environOf(r.identity.pid);
      expect(hasEntry(environ, `${outer.tag}=1`), `${r.label} carries the outer tag`).toBe(true);
      expect(hasEntry(environ, `${inner}=1`), `${r.label} carries the inner tag`).toBe(true);
    }
    ac.abort();
    const result = await rejection(outer, 'CANCELLED');
    expect(result.isCanceled).toBe(true);
    expect(survivors(recorded, "a carrier of the outer tag (an inner session's leftover)")).toEqual([]);
    expect(listed(result.report.stopped, recorded)).toEqual([]);
  });

  it('sweeps every command of a multi-command session on end()', async () => {
    const s = session(FAST);
    const files = [pidfileIn(), pidfileIn()];
    const procs = files.map((f) => s.spawn('sh', [fixture('nohup.sh'), f]));
    const recorded = (await Promise.all(files.map((f) => recordedIn(f)))).flat();
    expect(recorded.length).toBe(2);
    for (const p of procs) p.stdin?.end();
    await Promise.all(procs.map((p) => p.exited));
    const report = await s.end();
    expect(survivors(recorded, 'a carrier of the shared session tag')).toEqual([]);
    expect(listed(report.stopped, recorded)).toEqual([]);
    expect(report.ok).toBe(true);
  });

  it('says NO_PROC and complete: false when procRoot has no procfs, never silently', async () => {
    const events: TetherEvent[] = [];
    const { sub, recorded } = await startNohup({ procRoot: '/nonexistent', onEvent: (e) => events.push(e) });
    sub.stdin?.end();
    const result = await sub;
    expect(result.report.complete).toBe(false);
    expect(result.report.ok).toBe(false);
    expect(result.report.proof).toBe('none');
    expect(result.report.warnings.map((w) => w.code)).toContain('NO_PROC');
    expect(events.some((e) => e.type === 'warning' && e.code === 'NO_PROC')).toBe(true);
    // The sweep could not look, so it signalled nothing itself; the helper was not released but
    // left to end its own subtree (its dead man's switch), and the report says so.
    expect(result.report.warnings.map((w) => w.code)).toContain('HELPER_SWEPT');
    expect(result.report.stopped).toEqual([]);
    expect(survivors(recorded, 'a leftover of a session whose sweep could not run')).toEqual([]);
  });

  it('env tag alone: lists a same-uid non-dumpable orphan as unreadable and leaves it running (supervisor as uid 65534)', async () => {
    const { pid, identity, report } = await runUnreadable('env-tag');
    expect(isAlive(identity), `non-dumpable pid ${pid} is left running`).toBe(true);
    expect(
      report.unreadable.map((u) => u.pid),
      JSON.stringify(report),
    ).toContain(pid);
    expect(report.unreadable.find((u) => u.pid === pid)?.uid).toBe(65534);
    expect(report.stopped.some((s) => s.pid === pid)).toBe(false);
  });

  it('default containment: the helper stops a non-dumpable orphan the env tag cannot read (supervisor as uid 65534)', async () => {
    const { nd, pid, identity, report } = await runUnreadable('auto');
    // Not root: no cgroup here, but the helper needs no privilege; the orphan is its descendant.
    expect(report.layers).toEqual(['env-tag', 'subreaper']);
    expect(report.notes.join(' '), 'the cgroup layer says why it is off').toMatch(/cgroup/);
    expect(nd?.startTime, 'the fixture recorded its start time').toBeGreaterThan(0);
    expect(isAlive(identity), `non-dumpable pid ${pid} survived the helper layer`).toBe(false);
    const rec = report.stopped.find((s) => s.pid === pid);
    expect(rec?.foundBy, JSON.stringify(report)).toBe('subreaper');
    expect(report.unreadable.map((u) => u.pid)).not.toContain(pid);
    expect(report.ok).toBe(true);
  });
});

void ROOT;
