// What a sandbox call says when the channel, the sweep or the caller fails it.
import { describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { suiteResource } from '../support/suite-resource.js';
import { aliveOnHost, lossyChannel, sleep, startContainer, taggedOnHost } from './container.js';

const box = suiteResource(() => startContainer(300));

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
// A pid that names no process: nsenter cannot open its namespaces, as a pod already gone.
const GONE = sandbox.commandChannel(['nsenter', '-t', '2147483646', '-a']);

describe('a channel that cannot connect', () => {
  it('is retried, backing off, then named in a CHANNEL_UNREACHABLE error', async () => {
    const retries: number[] = [];
    const started = performance.now();
    const error = await sandbox
      .sweep(GONE, createTag(), { ...SWEEP, budgetMs: 2500, onRetry: (n) => retries.push(n) })
      .catch((e: Error) => e);
    expect((error as { code?: string }).code).toBe('CHANNEL_UNREACHABLE');
    expect((error as Error).message).toMatch(/could not reach nsenter -t 2147483646 -a in \d+ attempts/);
    expect((error as Error).message).toMatch(/exited with status 1: nsenter/);
    expect(retries.length, 'premise broken: no retry').toBeGreaterThanOrEqual(2);
    expect(performance.now() - started).toBeLessThan(4000);
  });

  it('a client that cannot start is unreachable too', async () => {
    const channel = sandbox.commandChannel(['/nonexistent/docker', 'exec', '-i', 'x']);
    const error = await sandbox.sweep(channel, createTag(), { budgetMs: 600 }).catch((e: Error) => e);
    expect((error as { code?: string }).code).toBe('CHANNEL_UNREACHABLE');
    expect((error as Error).message).toMatch(/could not start: spawn \/nonexistent\/docker ENOENT/);
  });

  it('an exec through it ends as an ambiguous effect: its end is unknown and no sweep could settle it', async () => {
    // A client that takes the stream in and exits 0 without a byte, as a cut one may: not a
    // client that failed before the wrapper started (test/sandbox/unstarted.test.ts).
    const silent = sandbox.commandChannel(['sh', '-c', 'cat >/dev/null']);
    const error = await sandbox
      .exec(silent, ['true'], { sweep: { ...SWEEP, budgetMs: 800 } })
      .catch((e: Error) => e);
    expect((error as { code?: string }).code).toBe('AMBIGUOUS_EFFECT');
    expect(sandbox.isAmbiguousEffect(error)).toBe(true);
    expect(((error as Error).cause as { code?: string }).code).toBe('CHANNEL_UNREACHABLE');
  });
});

describe('a client that cannot start', () => {
  it('runs nothing, sweeps nothing, and says so', async () => {
    const channel = sandbox.commandChannel(['/nonexistent/docker', 'exec', '-i', 'x']);
    const error = await sandbox.exec(channel, ['true']).catch((e: Error) => e);
    expect((error as { code?: string }).code).toBe('CHANNEL_UNREACHABLE');
    expect((error as Error).message).toMatch(/was not run in \/nonexistent\/docker exec -i x: .*ENOENT/);
  });
});

describe('a leftover holding the stream after the line', () => {
  it('holds the call at most 2 s: a proven success, the client ended by tether', async () => {
    // A client that waits for EOF on the command's stdout (as some exec clients do).
    const channel = sandbox.commandChannel(['sh', '-c', '"$@" | cat', 'client', ...box.prefix]);
    const tag = createTag();
    // Timed from the command's own clock just before its last output (its line follows its exit),
    // not from the call's start: the client's start through nsenter is no part of the hold, yet it
    // is what a loaded machine stretches, and it ate into the old bound (4.5 s from the start).
    // Beside six busy loops: 2.0–2.3 s from the output to the end. Without the cap the call ends
    // with the sleep, 8 s after the line.
    const r = await sandbox.exec(channel, ['sh', '-c', 'sleep 8 & date +%s%N >&2; echo hi'], { tag });
    const stamp = /^(\d+)$/m.exec(r.stderr.toString())?.[1];
    if (!stamp) throw new Error(`premise broken: no clock reading on stderr: ${r.stderr}`);
    const ms = Date.now() - Number(BigInt(stamp) / 1_000_000n);
    expect([r.ok, r.exitCode, r.clientStatus, r.stdout.toString()]).toEqual([true, 0, null, 'hi\n']);
    expect(ms, 'premise broken: nothing held the stream').toBeGreaterThan(1900);
    expect(ms, "ms from the command's last output to the call's end").toBeLessThan(4500);
    await sandbox.sweep(box.channel, tag, SWEEP);
    expect(taggedOnHost(tag.name).filter(aliveOnHost)).toEqual([]);
  });
});

describe('a sweep started from inside the session it sweeps', () => {
  it('never signals itself, its subshells or its children', async () => {
    const tag = createTag();
    await sandbox.exec(box.channel, ['sh', '-c', 'setsid sleep 51 </dev/null >/dev/null 2>&1 &'], { tag });
    // The sweep's own environment holds the tag: its forks show it until they exec. (Its snapshot
    // is taken by builtins alone, with no child alive; leaving out its subtree is a second guard.)
    const inside = sandbox.commandChannel([...box.prefix, 'env', tag.entry]);
    const report = await sandbox.sweep(inside, tag, SWEEP);
    expect([report.ok, report.stopped.map((p) => p.cmdline)]).toEqual([true, ['sleep 51']]);
    expect(taggedOnHost(tag.name).filter(aliveOnHost)).toEqual([]);
  });
});

describe('a cut sweep program', () => {
  it('is a SWEEP_CUT error naming what it signalled, never a sweep that found nothing', async () => {
    const tag = createTag();
    await sandbox.exec(box.channel, ['sh', '-c', 'setsid sleep 46 </dev/null >/dev/null 2>&1 &'], { tag });
    const left = taggedOnHost(tag.name);
    expect(left.length, 'premise broken: no leftover').toBe(1);
    // The stream is lost right after the program said it signalled the leftover.
    const cut = lossyChannel(box.channel, { after: ' TERM\n' });
    const error = await sandbox.sweep(cut, tag, SWEEP).catch((e: Error) => e);
    expect((error as { code?: string }).code).toBe('SWEEP_CUT');
    const e = error as InstanceType<typeof sandbox.SandboxError>;
    expect(e.report?.complete).toBe(false);
    expect(e.unsettled.map((p) => p.cmdline)).toEqual(['sleep 46']);
    expect(e.message).toMatch(
      /found and not seen gone \(signalled or not yet: each record.s `signals` says\): pid \d+ \(sleep 46\)/,
    );
    // The program itself ran on in the container (a lost stream does not stop it).
    for (let i = 0; i < 50 && left.some(aliveOnHost); i++) await sleep(20);
    expect(left.filter(aliveOnHost)).toEqual([]);
  });

  it('an output cut before its first line is the channel not reaching the target: retried', async () => {
    let calls = 0;
    const flaky: sandbox.ExecChannel = {
      describe: 'flaky',
      exec(argv) {
        calls += 1;
        // Cut at the first bytes the client relays, before any is delivered: a 0 ms timer raced
        // the sweep's header (nsenter prints it within 1–2 ms here), and lost about half the time.
        return (calls === 1 ? lossyChannel(box.channel, { after: '' }) : box.channel).exec(argv);
      },
    };
    const report = await sandbox.sweep(flaky, createTag(), { ...SWEEP, budgetMs: 5000 });
    expect([report.ok, calls]).toEqual([true, 2]);
  });
});

describe('a cancel', () => {
  it('sweeps the session in the container before ending the client: the command ends proven, its leftover stopped', async () => {
    const tag = createTag();
    const abort = new AbortController();
    const call = sandbox.exec(
      box.channel,
      ['sh', '-c', 'setsid sleep 47 </dev/null >/dev/null 2>&1 & echo up; sleep 30'],
      {
        tag,
        signal: abort.signal,
        sweep: SWEEP,
        // reject: false — a cancelled proven end rejects by default (CANCELLED).
        reject: false,
      },
    );
    let left: ReturnType<typeof taggedOnHost> = [];
    for (let i = 0; i < 100 && left.length < 3; i++) {
      await sleep(20);
      left = taggedOnHost(tag.name);
    }
    const started = performance.now();
    abort.abort();
    const r = await call;
    expect(performance.now() - started).toBeLessThan(5000);
    expect([r.cancelled, r.ok, r.exitCode, r.stdout.toString()]).toEqual([true, false, 143, 'up\n']);
    expect([r.isCanceled, r.failed, r.timedOut]).toEqual([true, true, false]);
    expect(r.report?.stopped.map((p) => p.cmdline).sort()).toEqual(
      expect.arrayContaining(['sleep 30', 'sleep 47']),
    );
    expect(left.filter(aliveOnHost)).toEqual([]);
  });
});
