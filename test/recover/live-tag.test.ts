// `tether recover` judges the liveness of a tag, not of a row: a row naming
// tag T whose recorded supervisor is dead (a retry under the same tag after a crash, a stale or
// copied row) is left alone while any live supervisor of T runs on this machine — nested under
// another `tether run` at any depth, a library session under `tether run`, its helper stopped —
// and so is an expired kept entry naming one of its processes. A session whose supervisor is
// gone, with nothing but a stale registration and an orphaned helper left, is still recovered.
// The rows are real rows of a real ledger file; the sessions are real `tether run`s and library
// sessions; ground truth is /proc (pid + start time).
import { spawn as spawnChild } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { sessionsDir } from '../../src/containment/live-session.js';
import { Ledger } from '../../src/ledger/index.js';
import { createTag } from '../../src/proc/tag.js';
import { recover } from '../../src/recover/index.js';
import { startContainer } from '../sandbox/container.js';
import { ROOT } from '../support/paths.js';
import { cmdlineOf, identityOf, isAlive, type ProcessId, readStat } from '../support/proc.js';
import { carriersOf, running } from '../support/tagged.js';
import { cleanup, describeProcess, started, tempDir, waitFor } from '../support/zoo.js';
import { beginOrphaned, recoverCli } from './support.js';

const CLI = join(ROOT, 'bin/tether.cjs');
const DIST = join(ROOT, 'dist/index.js');
const opened: Ledger[] = [];
const stopped: ProcessId[] = [];

// Continues each helper this test stopped (if that very process still runs): it can then end
// its subtree as a helper does.
function continueStopped(): void {
  for (const id of stopped.splice(0)) {
    if (!isAlive(id)) continue;
    try {
      process.kill(id.pid, 'SIGCONT');
    } catch {
      // gone meanwhile
    }
  }
}

afterEach(async () => {
  continueStopped();
  cleanup();
  for (const l of opened.splice(0)) await l.close();
});

async function ledgerAt(path = join(tempDir(), 'ledger.db')): Promise<{ ledger: Ledger; path: string }> {
  const ledger = await Ledger.open(path);
  opened.push(ledger);
  return { ledger, path };
}

/** The helper of session `tag`: a `tether-helper` carrying it. */
function helperOf(tag: string): ProcessId {
  const helper = carriersOf(tag).find((id) => readStat(id.pid)?.comm === 'tether-helper');
  if (!helper) throw new Error(`premise broken: no helper carries ${tag}`);
  return helper;
}

/** The tag a `tether run --events FILE` wrote on its first line. */
async function tagFrom(events: string): Promise<string> {
  await waitFor(
    `a tag in ${events}`,
    () => existsSync(events) && readFileSync(events, 'utf8').includes('\n'),
  );
  return JSON.parse(readFileSync(events, 'utf8').split('\n')[0] as string).tag as string;
}

/** A tree of `depth` nested `tether run`s around `payload`: the outermost identity and each level's tag. */
async function nested(depth: number, payload: string[]): Promise<{ outer: ProcessId; tags: string[] }> {
  const dir = tempDir();
  const events = Array.from({ length: depth }, (_, i) => join(dir, `events-${i}`));
  const argv = events.flatMap((e) => [process.execPath, CLI, 'run', '--no-ledger', '--events', e, '--']);
  const child = spawnChild(argv[0] as string, [...argv.slice(1), ...payload], { stdio: 'ignore' });
  const outer = identityOf(child.pid ?? 0);
  if (!outer) throw new Error('premise broken: tether run did not start');
  started.push(outer);
  const tags: string[] = [];
  for (const e of events) tags.push(await tagFrom(e));
  return { outer, tags };
}

/** Ends a tree as sessions end (SIGTERM to its outermost supervisor) and waits until nothing of `tags` runs. */
async function endTree(outer: ProcessId, tags: string[]): Promise<void> {
  continueStopped();
  process.kill(outer.pid, 'SIGTERM');
  await waitFor(
    'the nested sessions to end',
    () => !isAlive(outer) && tags.every((t) => carriersOf(t).length === 0),
    30_000,
  );
}

describe('a row naming the tag of a live nested session, its recorded supervisor dead', () => {
  it('is left alone when the session is a tether run inside a tether run (the CLI recover)', async () => {
    const marker = `881.${process.pid}`;
    const tree = await nested(2, ['sleep', marker]);
    const inner = tree.tags[1] as string;
    const victim = await running(`sleep ${marker}`, 'the inner command');
    const helper = helperOf(inner);
    const { ledger, path } = await ledgerAt();
    await beginOrphaned(ledger, inner, { command: ['sleep', marker] });
    await ledger.close();
    opened.pop();

    const r = await recoverCli(path);
    expect(isAlive(victim), `the live inner session's ${describeProcess(victim)} was signalled`).toBe(true);
    expect(isAlive(helper), `the live inner session's helper ${describeProcess(helper)} was signalled`).toBe(
      true,
    );
    const entry = r.json.sessions.find((s: { tag: string }) => s.tag === inner);
    expect(entry?.outcome, r.stderr).toBe('left-alone');
    expect(entry?.reason).toMatch(/the session is supervised/);
    expect(r.json.settled).toBe(true);
    const reopened = (await ledgerAt(path)).ledger;
    expect((await reopened.get(inner))?.state).toBe('running');
    await endTree(tree.outer, tree.tags);
  });

  it('is left alone when the session is a library session in a program under tether run, with or without its helper', async () => {
    const dir = tempDir();
    const out = join(dir, 'tags');
    const script = join(dir, 'sup.mjs');
    const plainMark = `882.${process.pid}`;
    const helpedMark = `883.${process.pid}`;
    writeFileSync(
      script,
      `const { Session } = await import(${JSON.stringify(DIST)});
const { writeFileSync } = await import('node:fs');
const plain = new Session({ containment: ['env-tag'] });
plain.spawn('sleep', [${JSON.stringify(plainMark)}], { stdio: 'ignore' });
const helped = new Session({ containment: ['env-tag', 'subreaper'] });
helped.spawn('sleep', [${JSON.stringify(helpedMark)}], { stdio: 'ignore' });
writeFileSync(${JSON.stringify(out)}, JSON.stringify([plain.tag, helped.tag]));
process.on('SIGTERM', async () => { await Promise.all([plain.end(), helped.end()]); process.exit(0); });
setInterval(() => {}, 1000);
`,
    );
    const tree = await nested(1, [process.execPath, script]);
    const tagsWritten = () => existsSync(out) && readFileSync(out, 'utf8').endsWith(']');
    await waitFor('the library sessions to write their tags', tagsWritten, 30_000);
    const [plainTag, helpedTag] = JSON.parse(readFileSync(out, 'utf8')) as [string, string];
    const plain = await running(`sleep ${plainMark}`, 'the env-tag session’s command');
    const helped = await running(`sleep ${helpedMark}`, 'the helped session’s command');
    expect(
      carriersOf(plainTag).some((id) => readStat(id.pid)?.comm === 'tether-helper'),
      'premise: the env-tag session runs without a helper (its registration is its only sign)',
    ).toBe(false);
    const { ledger } = await ledgerAt();
    await beginOrphaned(ledger, plainTag, { command: ['sleep', plainMark] });
    await beginOrphaned(ledger, helpedTag, { command: ['sleep', helpedMark] });

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(plain), `the env-tag library session's ${describeProcess(plain)} was signalled`).toBe(
      true,
    );
    expect(isAlive(helped), `the helped library session's ${describeProcess(helped)} was signalled`).toBe(
      true,
    );
    const plainEntry = result.sessions.find((s) => s.tag === plainTag);
    expect(plainEntry?.outcome).toBe('left-alone');
    expect(plainEntry?.reason).toMatch(
      /registered in .*\) is alive and holds its registration open: the session is supervised/,
    );
    expect(plainEntry?.evidence?.kind).toBe('registration');
    expect(result.sessions.find((s) => s.tag === helpedTag)?.outcome).toBe('left-alone');
    await endTree(tree.outer, [...tree.tags, plainTag, helpedTag]);
  });

  it('is left alone three deep, for the middle session and the innermost', async () => {
    const marker = `884.${process.pid}`;
    const tree = await nested(3, ['sleep', marker]);
    const [, middle, innermost] = tree.tags as [string, string, string];
    const victim = await running(`sleep ${marker}`, 'the innermost command');
    const helpers = [helperOf(middle), helperOf(innermost)];
    const { ledger } = await ledgerAt();
    await beginOrphaned(ledger, middle);
    await beginOrphaned(ledger, innermost);

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(victim), `the innermost session's ${describeProcess(victim)} was signalled`).toBe(true);
    for (const h of helpers) expect(isAlive(h), `helper ${describeProcess(h)} was signalled`).toBe(true);
    for (const tag of [middle, innermost]) {
      const entry = result.sessions.find((s) => s.tag === tag);
      expect(entry?.outcome, `${tag}: ${entry?.reason}`).toBe('left-alone');
    }
    await endTree(tree.outer, tree.tags);
  });

  it('is left alone while the inner helper is stopped (SIGSTOP), its supervisor stopped too', async () => {
    const marker = `885.${process.pid}`;
    const tree = await nested(2, ['sleep', marker]);
    const inner = tree.tags[1] as string;
    const victim = await running(`sleep ${marker}`, 'the inner command');
    const helper = helperOf(inner);
    const supervisor = identityOf(readStat(helper.pid)?.ppid ?? 0) as ProcessId;
    // The supervisor continues a stopped helper within 250 ms (src/containment/helper-pool.ts):
    // stopped first, it leaves its helper stopped for as long as this test needs.
    for (const id of [supervisor, helper]) {
      process.kill(id.pid, 'SIGSTOP');
      stopped.push(id);
      await waitFor(`pid ${id.pid} to stop`, () => readStat(id.pid)?.state === 'T');
    }
    const { ledger } = await ledgerAt();
    await beginOrphaned(ledger, inner);

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(victim), `the inner session's ${describeProcess(victim)} was signalled`).toBe(true);
    for (const id of [supervisor, helper])
      expect(readStat(id.pid)?.state, `${describeProcess(id)} was signalled (continued, or ended)`).toBe('T');
    const entry = result.sessions.find((s) => s.tag === inner);
    expect(entry?.outcome).toBe('left-alone');
    expect(entry?.reason).toMatch(/the session is supervised/);
    await endTree(tree.outer, tree.tags);
  });
});

describe("an expired kept entry naming a live nested session's process", () => {
  it('is left alone, the process running', async () => {
    const marker = `886.${process.pid}`;
    const tree = await nested(2, ['sleep', marker]);
    const inner = tree.tags[1] as string;
    const victim = await running(`sleep ${marker}`, 'the inner command');
    // The row's supervisor is alive (this process): only the kept entry's expiry acts on it.
    const { ledger } = await ledgerAt();
    await ledger.begin({
      tag: inner,
      command: ['sleep', marker],
      location: { kind: 'local' },
      kept: [{ ...victim, cmdline: `sleep ${marker}`, match: 'sleep *', owner: 'test', expiresAt: 1 }],
    });

    const result = await recover({ ledger, graceMs: 500, killAfterMs: 500 });
    expect(isAlive(victim), `the live session's ${describeProcess(victim)} was ended as "kept"`).toBe(true);
    expect(result.kept).toHaveLength(1);
    expect(result.kept[0]?.outcome).toBe('left-alone');
    expect(result.kept[0]?.reason).toMatch(/the session is supervised/);
    expect((await ledger.get(inner))?.kept.map((k) => k.pid)).toEqual([victim.pid]);
    await endTree(tree.outer, tree.tags);
  });
});

describe('a nested session whose supervisor died', () => {
  it('is recovered: its stale registration and its helper adopted by the outer helper are no supervisor', async () => {
    const dir = tempDir();
    const events = join(dir, 'events');
    const marker = `887.${process.pid}`;
    const keep = `888.${process.pid}`;
    // The outer payload stays (a shell exec'ing sleep): the outer session does not end and sweep.
    const tree = await nested(1, [
      'sh',
      '-c',
      `"$0" "$1" run --no-ledger --events "$2" -- sleep ${marker} & exec sleep ${keep}`,
      process.execPath,
      CLI,
      events,
    ]);
    const inner = await tagFrom(events);
    const victim = await running(`sleep ${marker}`, 'the inner command');
    await running(`sleep ${keep}`, 'the outer command');
    const helper = helperOf(inner);
    const supervisor = identityOf(readStat(helper.pid)?.ppid ?? 0) as ProcessId;
    expect(cmdlineOf(supervisor.pid), 'premise: the inner helper runs under the inner tether run').toContain(
      `run --no-ledger --events ${events}`,
    );
    const registration = () =>
      readdirSync(sessionsDir()).some((n) => n.includes(`.${supervisor.pid}.${supervisor.startTime}.`));
    expect(registration(), 'premise: the inner supervisor registered its session').toBe(true);
    // Stopped, its dead man's switch cannot run; then its supervisor dies without an end.
    process.kill(helper.pid, 'SIGSTOP');
    stopped.push(helper);
    await waitFor('the inner helper to stop', () => readStat(helper.pid)?.state === 'T');
    process.kill(supervisor.pid, 'SIGKILL');
    await waitFor('the inner supervisor to die', () => !isAlive(supervisor));
    const outerHelper = helperOf(tree.tags[0] as string);
    await waitFor(
      'the outer helper to adopt the inner one',
      () => readStat(helper.pid)?.ppid === outerHelper.pid,
    );
    expect(registration(), 'premise: the dead supervisor left its registration').toBe(true);
    const { ledger } = await ledgerAt();
    await beginOrphaned(ledger, inner, { command: ['sleep', marker] });

    const result = await recover({ ledger, graceMs: 1000, killAfterMs: 1000 });
    const entry = result.sessions.find((s) => s.tag === inner);
    expect(entry?.outcome, entry?.reason).toBe('recovered');
    expect(isAlive(victim), `the dead session's ${describeProcess(victim)} survived recover`).toBe(false);
    expect(isAlive(helper), `the dead session's orphaned helper ${describeProcess(helper)} survived`).toBe(
      false,
    );
    expect(isAlive(outerHelper), 'the outer session’s helper was signalled').toBe(true);
    await endTree(tree.outer, [...tree.tags, inner]);
  });
});

describe('a sandbox row naming the tag of a live tether sandbox exec on this machine', () => {
  it('is left alone: the call registered its tag, and nothing is run through the channel', async () => {
    const container = await startContainer(300);
    try {
      const tag = createTag().name; // a retry under the same tag, as --tag allows
      const marker = `889.${process.pid}`;
      const client = spawnChild(
        process.execPath,
        [CLI, 'sandbox', 'exec', '--via', container.prefix.join(' '), '--tag', tag, '--', 'sleep', marker],
        { stdio: 'ignore' },
      );
      const caller = identityOf(client.pid ?? 0);
      if (!caller) throw new Error('premise broken: tether sandbox exec did not start');
      started.push(caller);
      const victim = await running(`sleep ${marker}`, 'the sandbox command');
      const { ledger } = await ledgerAt();
      await beginOrphaned(ledger, tag, {
        command: ['sleep', marker],
        location: { kind: 'sandbox', channel: container.prefix },
      });

      const result = await recover({ ledger, graceMs: 500, killAfterMs: 500, channelBudgetMs: 5000 });
      expect(isAlive(victim), `the live sandbox command ${describeProcess(victim)} was signalled`).toBe(true);
      const entry = result.sessions.find((s) => s.tag === tag);
      expect(entry?.outcome).toBe('left-alone');
      expect(entry?.reason).toMatch(
        new RegExp(`supervisor pid ${caller.pid} \\(registered in .*\\) is alive`),
      );
      expect((await ledger.get(tag))?.state).toBe('running');
      process.kill(caller.pid, 'SIGTERM'); // the call's cancel: its own sweep ends the command
      await waitFor('the sandbox call to end', () => !isAlive(victim) && !isAlive(caller), 30_000);
    } finally {
      await container.stop();
    }
  });
});
