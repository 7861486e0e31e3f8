// `tether sandbox run` in a busybox-only container (no coreutils; `setsid` is busybox's applet)
// at the ends busybox-root.test.ts does not reach: the command failing, SIGINT, SIGTERM and
// SIGHUP to the CLI, and its exec client dying. Each time a setsid'd leftover and a
// double-forked one are started in the container; ground truth is the host's /proc: their
// pid + start time gone.
import type { ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { childrenOf, cmdlineOf, identityOf, isAlive, type ProcessId } from '../support/proc.js';
import { suiteResource } from '../support/suite-resource.js';
import { tetherToEnd } from '../support/tether-child.js';
import { missing, tool } from '../support/tools.js';
import { aliveOnHost, sleep, startBusyboxContainer, taggedOnHost } from './container.js';

// A machine without busybox skips this file, named (test/support/tools.ts probed it).
const noBusybox = missing('busybox');
const box = suiteResource(() => startBusyboxContainer(tool('busybox').path as string, 300), noBusybox !== '');

const SWEEP = { graceMs: 1000, killAfterMs: 1000 };
const PHASES = ['-k', '1s', '--kill-budget', '1s'];

type Seen = { pid: number; startTime: number; cmdline: string };

// Leaves `setsid sleep S` (busybox's applet: its own POSIX session) and `sleep S+1` double-forked
// (the container init's child), both carrying the tag, says `ready`, then runs `tail`.
function leaving(s: number, tail: string): string[] {
  return [
    'sh',
    '-c',
    `setsid sleep ${s} </dev/null >/dev/null 2>&1 & (sleep ${s + 1} </dev/null >/dev/null 2>&1 &); echo ready; ${tail}`,
  ];
}

// The two leftovers as the host sees them, once both run (generous: a busy machine).
async function leftovers(tag: string, s: number): Promise<Seen[]> {
  const want = [`sleep ${s}`, `sleep ${s + 1}`];
  for (const until = Date.now() + 30_000; Date.now() < until; await sleep(20)) {
    const found = taggedOnHost(tag).filter((p) => want.includes(p.cmdline));
    if (found.length === 2) return found;
  }
  throw new Error(
    `premise broken: the leftovers of ${tag} never both ran (${JSON.stringify(taggedOnHost(tag))})`,
  );
}

// Every tagged process seen is gone (pid + start time); the report names both leftovers once.
function expectAllGone(tag: string, seen: Seen[], report: SweepReport | undefined, s: number): void {
  const survived = seen.filter(aliveOnHost);
  expect(survived, `survived the end: ${survived.map((p) => `${p.pid} ${p.cmdline}`).join(', ')}`).toEqual(
    [],
  );
  expect(taggedOnHost(tag), 'a process carrying the tag still runs (host /proc)').toEqual([]);
  expect(report?.stopped.map((p) => p.cmdline)).toEqual(
    expect.arrayContaining([`sleep ${s}`, `sleep ${s + 1}`]),
  );
  const named = new Set(report?.stopped.map((p) => `${p.pid}:${p.startTime}`));
  expect(report?.stopped.length, 'a process named twice').toBe(named.size);
}

// `tether sandbox run --via <the busybox container> --tag TAG --json … -- CMD`: its status, its
// output and its end as JSON; `onReady(child)` once its stdout holds `ready`. Bounded: SIGKILLed
// after 60 s (the status is then null).
async function tetherRun(
  tag: string,
  command: string[],
  onReady?: (child: ChildProcess) => void,
): Promise<{ status: number | null; stdout: string; stderr: string; end: Record<string, unknown> }> {
  const r = await tetherToEnd(
    ['sandbox', 'run', '--via', box.prefix.join(' '), '--tag', tag, ...PHASES, '--json', '--', ...command],
    { onReady, killAfterMs: 60_000 },
  );
  let end: Record<string, unknown> = {};
  try {
    end = JSON.parse(r.stderr.trim().split('\n').at(-1) as string);
  } catch {
    // no JSON end: the assertions on status name stderr
  }
  return { ...r, end };
}

// The exec client tether started for the command: its child `nsenter …`, by pid + start time.
function execClientOf(tether: ChildProcess): ProcessId | undefined {
  const nsenter = childrenOf(tether.pid as number).filter((c) => cmdlineOf(c.pid).startsWith('nsenter '));
  return nsenter.length === 1 ? identityOf((nsenter[0] as { pid: number }).pid) : undefined;
}

// After a test: whatever still carries the tag is swept through the real channel (none expected).
async function cleanup(tag: string): Promise<void> {
  if (taggedOnHost(tag).length) await sandbox.sweep(box.channel, tag, SWEEP);
}

describe.skipIf(noBusybox !== '')(
  `tether sandbox run in a busybox-only container (${tool('busybox').kind ?? 'no'} busybox)${noBusybox ? ` (skipped: ${noBusybox})` : ''}`,
  () => {
    it("premise: no coreutils, and setsid is busybox's applet", async () => {
      const r = await sandbox.exec(box.channel, [
        'sh',
        '-c',
        'readlink /bin/cat; readlink /bin/setsid; test -e /usr/bin/setsid || echo none',
      ]);
      expect(r.stdout.toString()).toBe('busybox\nbusybox\nnone\n');
    });

    it("the command fails: its status, the setsid'd and double-forked leftovers gone and named", async () => {
      const tag = createTag();
      try {
        const watch = leftovers(tag.name, 31);
        const r = await tetherRun(tag.name, leaving(31, 'sleep 1; exit 7'));
        const seen = await watch;
        expect([r.status, r.stdout], r.stderr).toEqual([7, 'ready\n']);
        expect([r.end.tag, r.end.exitCode, r.end.status, r.end.ok]).toEqual([tag.name, 7, 7, false]);
        expectAllGone(tag.name, seen, r.end.report as SweepReport, 31);
      } finally {
        await cleanup(tag.name);
      }
    }, 90_000);

    // tether run's status for an ending signal is CMD's (docs/cli.md): here the session's sweep
    // ends the command with TERM and its line still arrives — 143 for both (docs/sandbox.md).
    it.each([
      ['SIGINT', 33],
      ['SIGTERM', 35],
      ['SIGHUP', 39],
    ] as const)(
      '%s to tether: the session is swept, the status 143, every process of it gone',
      async (signal, s) => {
        const tag = createTag();
        try {
          let seen: Seen[] = [];
          let premise = 'premise broken: the session never ran';
          const r = await tetherRun(tag.name, leaving(s, 'sleep 60'), (child) => {
            leftovers(tag.name, s).then(
              (found) => {
                seen = [...found, ...taggedOnHost(tag.name)]; // the wrapper, sh and its sleep 60 too
                child.kill(signal);
              },
              (e: Error) => (premise = e.message),
            );
          });
          expect(seen.length, `${premise}; ${r.stderr}`).toBeGreaterThanOrEqual(4);
          expect(r.status, r.stderr).toBe(143);
          expect([r.end.tag, r.end.exitCode, r.end.isCanceled]).toEqual([tag.name, 143, true]);
          expectAllGone(tag.name, seen, r.end.report as SweepReport, s);
        } finally {
          await cleanup(tag.name);
        }
      },
      90_000,
    );

    it('its exec client dying: the unknown end is swept (125), every process of the session gone', async () => {
      const tag = createTag();
      let client: ProcessId | undefined;
      try {
        let seen: Seen[] = [];
        let premise = 'premise broken: the session never ran';
        const r = await tetherRun(tag.name, leaving(37, 'sleep 60'), (child) => {
          leftovers(tag.name, 37).then(
            (found) => {
              seen = [...found, ...taggedOnHost(tag.name)];
              client = execClientOf(child);
              // Only the nsenter tether started, and only while it is that process (start time).
              if (client && isAlive(client)) process.kill(client.pid, 'SIGKILL');
            },
            (e: Error) => (premise = e.message),
          );
        });
        expect(seen.length, `${premise}; ${r.stderr}`).toBeGreaterThanOrEqual(4);
        expect(client, `premise broken: no single nsenter client under tether; ${r.stderr}`).toBeDefined();
        expect(r.status, r.stderr).toBe(125);
        expect([r.end.tag, r.end.exitCode, (r.end.error as { code?: string })?.code]).toEqual([
          tag.name,
          null,
          'EXEC_STATUS_UNKNOWN',
        ]);
        expectAllGone(tag.name, seen, r.end.report as SweepReport, 37);
      } finally {
        if (client && isAlive(client)) process.kill(client.pid, 'SIGKILL');
        await cleanup(tag.name);
      }
    }, 90_000);
  },
);
