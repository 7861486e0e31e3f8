// Declared services: a session's sweep leaves a process matching a `keep` glob running, with its
// descendants, names it in `report.kept`, and stops everything else (ground truth from /proc).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type KeptRecord, type SessionOptions, session } from '../../src/index.js';
import { BUILD } from '../support/paths.js';
import { childrenOf, identityOf, isAlive, type ProcessId } from '../support/proc.js';
import { makeTestCgroup, noTestCgroup } from '../support/test-cgroup.js';
import { cleanup, readPidfile, started, tempDir, waitFor } from '../support/zoo.js';

afterEach(() => cleanup());

const FAST = { graceMs: 300, killAfterMs: 1000, outputCapMs: 300 } as const;
const HOUR = 3_600_000;

interface Started {
  /** The server: a setsid'd `sh` whose cmdline holds the marker, and its `sleep` (a worker). */
  server: ProcessId;
  worker: ProcessId;
  /** A setsid'd leftover that matches nothing. */
  other: ProcessId;
  /** A setsid'd leftover that ignores SIGTERM (only with `stubborn`). */
  stubborn?: ProcessId;
}

/**
 * Runs a payload that starts, each in its own POSIX session, a "server" (`sh -c 'sleep 1000; :
 * keepme-<marker>'`: its child `sleep` matches nothing) and a leftover, then exits; ends the
 * session and returns the report and the identities (all pushed to `started` for cleanup).
 */
async function runPayload(marker: string, options: SessionOptions, stubborn = false) {
  const dir = tempDir();
  const file = (name: string) => join(dir, name);
  const script = [
    `setsid sh -c 'echo $$ > ${file('server')}; sleep 1000; : keepme-${marker}' </dev/null >/dev/null 2>&1 &`,
    `setsid sh -c 'echo $$ > ${file('other')}; exec sleep 1000' </dev/null >/dev/null 2>&1 &`,
    stubborn
      ? `setsid sh -c 'trap "" TERM; echo $$ > ${file('stubborn')}; while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 &`
      : '',
    `while [ ! -s ${file('server')} ] || [ ! -s ${file('other')} ]${stubborn ? ` || [ ! -s ${file('stubborn')} ]` : ''}; do sleep 0.01; done`,
  ].join('\n');
  const s = session({ ...FAST, ...options });
  const proc = s.spawn('sh', ['-c', script], { stdio: 'ignore' });
  const pidIn = (name: string) => Number(readFileSync(file(name), 'latin1').trim());
  const identity = (pid: number) => {
    const id = identityOf(pid);
    if (!id) throw new Error(`pid ${pid} was gone before the sweep`);
    started.push(id);
    return id;
  };
  const exit = await proc.exited;
  expect(exit.exitCode).toBe(0);
  const server = identity(pidIn('server'));
  await waitFor('the server to start its worker', () => childrenOf(server.pid).length === 1);
  const worker = identity((childrenOf(server.pid)[0] as { pid: number }).pid);
  const other = identity(pidIn('other'));
  const ids: Started = { server, worker, other };
  if (stubborn) ids.stubborn = identity(pidIn('stubborn'));
  const before = Date.now();
  const report = await s.end();
  const after = Date.now();
  return { report, ids, before, after };
}

function keptEntry(kept: KeptRecord[], id: ProcessId): KeptRecord | undefined {
  return kept.find((k) => k.pid === id.pid && k.startTime === id.startTime);
}

describe('keep', () => {
  it('leaves a matching server and its workers running, stops the rest, and reports them as kept', async () => {
    const marker = Math.random().toString(16).slice(2);
    const keep = [{ match: `*keepme-${marker}*`, ttlMs: 2 * HOUR, owner: 'test@keep' }];
    const { report, ids, before, after } = await runPayload(marker, { keep });

    // Ground truth: the leftover is gone, the server and its worker still run.
    expect(isAlive(ids.other)).toBe(false);
    expect(isAlive(ids.server)).toBe(true);
    expect(isAlive(ids.worker)).toBe(true);

    const server = keptEntry(report.kept, ids.server);
    expect(server).toMatchObject({ match: keep[0]?.match, owner: 'test@keep', signals: [], endedBy: null });
    expect(server?.keptWith).toBeUndefined();
    expect(server?.expiresAt).toBeGreaterThanOrEqual(before + 2 * HOUR);
    expect(server?.expiresAt).toBeLessThanOrEqual(after + 2 * HOUR);
    // The worker matches nothing: it is kept as part of the service it belongs to.
    const worker = keptEntry(report.kept, ids.worker);
    expect(worker).toMatchObject({ match: keep[0]?.match, owner: 'test@keep', keptWith: ids.server.pid });
    expect(worker?.expiresAt).toBe(server?.expiresAt);
    expect(report.kept).toHaveLength(2);

    // What matched nothing and descends from no kept process was stopped.
    expect(report.stopped.some((p) => p.pid === ids.other.pid && p.startTime === ids.other.startTime)).toBe(
      true,
    );
    expect(report.stopped.some((p) => p.pid === ids.server.pid || p.pid === ids.worker.pid)).toBe(false);
    // Only kept processes left: the sweep is complete and ok, with a proof.
    expect(report).toMatchObject({ complete: true, ok: true, survivors: [] });
    expect(report.proof).not.toBe('none');
    // With a session cgroup, the kept ones left it and it is gone.
    if (report.cgroup) {
      expect(existsSync(report.cgroup)).toBe(false);
      const own = readFileSync(`/proc/${ids.server.pid}/cgroup`, 'latin1');
      expect(own).not.toContain(report.cgroup.split('/').at(-1));
    }
  });

  it('keeps nothing without a keep entry', async () => {
    const marker = Math.random().toString(16).slice(2);
    const { report, ids } = await runPayload(marker, {});
    expect(isAlive(ids.server)).toBe(false);
    expect(isAlive(ids.worker)).toBe(false);
    expect(isAlive(ids.other)).toBe(false);
    expect(report.kept).toEqual([]);
    expect(report.ok).toBe(true);
  });

  it('keeps the server through the KILL phase (cgroup.kill) a stubborn leftover brings', async () => {
    const marker = Math.random().toString(16).slice(2);
    const keep = [{ match: `*keepme-${marker}*`, ttlMs: 60_000, owner: 'test@keep' }];
    const { report, ids } = await runPayload(marker, { keep }, true);
    expect(report.phases.map((p) => p.signal)).toEqual(['SIGTERM', 'SIGKILL']);
    expect(isAlive(ids.stubborn as ProcessId)).toBe(false);
    expect(isAlive(ids.other)).toBe(false);
    expect(isAlive(ids.server)).toBe(true);
    expect(isAlive(ids.worker)).toBe(true);
    expect(report.kept.map((k) => k.pid).sort()).toEqual([ids.server.pid, ids.worker.pid].sort());
    expect(report.ok).toBe(true);
  });

  it('keeps with the env tag alone', async () => {
    const marker = Math.random().toString(16).slice(2);
    const keep = [{ match: `*keepme-${marker}*`, ttlMs: 60_000, owner: 'test@keep' }];
    const { report, ids } = await runPayload(marker, { keep, containment: ['env-tag'] });
    expect(report.layers).toEqual(['env-tag']);
    expect(isAlive(ids.other)).toBe(false);
    expect(isAlive(ids.server)).toBe(true);
    expect(isAlive(ids.worker)).toBe(true);
    expect(report.kept).toHaveLength(2);
    expect(report).toMatchObject({ complete: true, ok: true, proof: 'two-empty-scans' });
  });

  it("does not disable the helper's word: with the helper and no cgroup, its answer (the kept ones left out) proves the end", async () => {
    const marker = Math.random().toString(16).slice(2);
    const keep = [{ match: `*keepme-${marker}*`, ttlMs: 60_000, owner: 'test@keep' }];
    const { report, ids } = await runPayload(marker, { keep, containment: ['env-tag', 'subreaper'] });
    expect(report.layers).toEqual(['env-tag', 'subreaper']);
    expect(isAlive(ids.other)).toBe(false);
    expect(isAlive(ids.server)).toBe(true);
    expect(report.kept).toHaveLength(2);
    expect(report, JSON.stringify(report.phases)).toMatchObject({
      complete: true,
      ok: true,
      proof: 'helper-childless',
    });
  });

  it.skipIf(noTestCgroup !== undefined)(
    `never proves the end while a hopping loop beside the kept service runs, though it left the session cgroup${noTestCgroup ? ` (skipped: ${noTestCgroup})` : ''}`,
    async () => {
      // The loop (a new generation every 0.5 ms, TERM ignored) moves itself into a cgroup of the
      // test's: the session cgroup then says `populated 0`, but the loop is still the helper's.
      const marker = Math.random().toString(16).slice(2);
      const keep = [{ match: `*keepme-${marker}*`, ttlMs: 60_000, owner: 'test@keep' }];
      const cg = makeTestCgroup();
      const dir = tempDir();
      const pidfile = join(dir, 'loop');
      try {
        const s = session({ ...FAST, keep });
        const script = [
          `setsid sh -c 'echo $$ > ${join(dir, 'server')}; sleep 1000; : keepme-${marker}' </dev/null >/dev/null 2>&1 &`,
          `(echo 0 > ${cg.dir}/cgroup.procs && exec ${BUILD}/zoo-fork-exit ${pidfile} 500 30000) </dev/null >/dev/null 2>&1 &`,
          `while [ ! -s ${join(dir, 'server')} ] || [ ! -s ${pidfile} ]; do sleep 0.01; done`,
        ].join('\n');
        const proc = s.spawn('sh', ['-c', script], { stdio: 'ignore' });
        expect((await proc.exited).exitCode).toBe(0);
        const server = identityOf(Number(readFileSync(join(dir, 'server'), 'latin1').trim()));
        if (!server) throw new Error('premise broken: the server is gone');
        started.push(server);
        await waitFor('the server to start its worker', () => childrenOf(server.pid).length === 1);
        const worker = identityOf((childrenOf(server.pid)[0] as { pid: number }).pid);
        if (worker) started.push(worker);
        await waitFor('the loop to hop', () => readPidfile(pidfile).length > 20, 10_000);
        expect(cg.populated(), 'premise broken: the loop is not in the test cgroup').toBe(true);
        const report = await s.end();
        const running = cg.populated();
        const said = JSON.stringify({
          ok: report.ok,
          complete: report.complete,
          proof: report.proof,
          warnings: report.warnings,
          survivors: report.survivors,
          phases: report.phases,
        });
        expect(isAlive(server), 'the kept server was ended').toBe(true);
        expect(keptEntry(report.kept, server), said).toBeDefined();
        if (running) {
          expect(report.proof, `the loop runs on in ${cg.dir}, yet: ${said}`).toBe('none');
          expect(report.ok, said).toBe(false);
          // Why, in the report: processes still appearing at the KILL phase's last look — one
          // that vanished before its signal, or one found only there, KILLed and watched die
          // (src/sweep/run.ts settleLastLook; before it, that one was named a survivor and no
          // UNSETTLED said: the whole suite at 777c8e7, once).
          expect(
            report.warnings.map((w) => w.code),
            said,
          ).toContain('UNSETTLED');
        } else {
          // The sweep ended the loop: its first scan found nothing and the session cgroup was
          // empty, but the helper's word (the loop is its child) kept the phase going.
          const rounds = report.phases.reduce((n, p) => n + p.rounds, 0);
          expect(rounds, `proved at the first scan: ${said}`).toBeGreaterThan(1);
        }
      } finally {
        await cg.end();
      }
    },
    30_000,
  );

  it('refuses a bad rule, naming the field', () => {
    const bad: [unknown, RegExp][] = [
      [[{ match: 'redis[', ttlMs: 1, owner: 'o' }], /keep\[0\]\.match/],
      [
        [
          { match: 'a', ttlMs: 1, owner: 'o' },
          { match: 'x(', ttlMs: 1, owner: 'o' },
        ],
        /keep\[1\]\.match/,
      ],
      [[{ match: '**', ttlMs: 1, owner: 'o' }], /keep\[0\]\.match.*every command line/],
      [[{ match: 'a', ttlMs: 0, owner: 'o' }], /keep\[0\]\.ttlMs/],
      [[{ match: 'a', ttlMs: Number.POSITIVE_INFINITY, owner: 'o' }], /keep\[0\]\.ttlMs/],
      [[{ match: 'a', ttlMs: 1, owner: ' ' }], /keep\[0\]\.owner/],
      [[{ match: 'a', ttlMs: 1 }], /keep\[0\]\.owner/],
      ['redis', /invalid keep:/],
    ];
    for (const [keep, message] of bad) {
      expect(() => session({ keep: keep as SessionOptions['keep'] })).toThrow(
        expect.objectContaining({ code: 'INVALID_OPTION', message: expect.stringMatching(message) }),
      );
    }
    expect(() =>
      session({ keep: [{ match: 'a*', ttlMs: 1, owner: 'o' }], containment: ['env-tag', 'pid-namespace'] }),
    ).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION', message: expect.stringMatching(/pid-namespace/) }),
    );
  });
});
