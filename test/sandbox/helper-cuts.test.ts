// Lost streams under the helper that holds the nonce (docs/sandbox.md, "The helper holds the
// nonce"): the exec client of a `sandbox.run` command is killed at random points and at fixed
// ones — before the command starts, after its first line, after its last byte but before the
// helper's end line. Each run is a proven success carrying the whole output or an
// EXEC_STATUS_UNKNOWN; and at the session's end every process of the command is gone — those
// that carry the tag, the helper among them, and an env-cleared double fork, which only the
// helper holds — by ground truth read from the host's /proc.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/channel.js';
import {
  aliveOnHost,
  type Container,
  type Cut,
  lossyChannel,
  sleepersIn,
  startContainer,
  taggedOnHost,
} from './container.js';
import { prng } from './prng.js';

const LINES = 25;
const FULL = Array.from({ length: LINES }, (_, i) => `line ${i}\n`).join('');
// A setsid leftover (tagged), an env-cleared double fork (untagged: `sleep S`), then LINES lines.
function command(s: number): string[] {
  return [
    'sh',
    '-c',
    `setsid sleep 40 </dev/null >/dev/null 2>&1 & env -i /bin/sh -c 'setsid sleep ${s} </dev/null >/dev/null 2>&1 &'; i=0; while [ $i -lt ${LINES} ]; do echo "line $i"; i=$((i+1)); sleep 0.01; done`,
  ];
}

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
});
afterAll(async () => {
  await box?.stop();
});

// The wrapper's exec loses its stream at the cut; the push and the sweeps go through untouched.
function cutWrapper(cut: Cut): ExecChannel {
  const lossy = lossyChannel(box.channel, cut);
  return {
    describe: lossy.describe,
    exec: (argv) => (argv.includes('tether-wrap') ? lossy.exec(argv) : box.channel.exec(argv)),
  };
}

let next = 5100 + Math.floor(Math.random() * 800);

async function one(cut: Cut, label: string): Promise<'proven' | 'unknown'> {
  const tag = createTag().name;
  const s = next++;
  const seen = new Map<string, { pid: number; startTime: number; cmdline: string }>();
  const look = () => {
    for (const p of [...taggedOnHost(tag), ...sleepersIn(box, s)]) seen.set(`${p.pid}:${p.startTime}`, p);
  };
  const watch = setInterval(look, 15);
  let kind: 'proven' | 'unknown';
  try {
    const r = await sandbox.run(cutWrapper(cut), command(s), {
      tag,
      helper: true,
      sweep: { graceMs: 2000, killAfterMs: 1000 },
    });
    expect(r.ok, `${label}: a proven end that is not a success`).toBe(true);
    expect(r.stdout, `${label}: a success carrying partial output`).toBe(FULL);
    expect(r.blindSpots, `${label}: the end line is not the helper's`).toEqual([]);
    kind = 'proven';
  } catch (error) {
    const e = error as Error & { code?: string };
    expect(e.code, `${label}: neither a proven end nor an unknown end: ${e.message}`).toBe(
      'EXEC_STATUS_UNKNOWN',
    );
    kind = 'unknown';
  } finally {
    clearInterval(watch);
  }
  look();
  let alive = [...seen.values()].filter(aliveOnHost);
  for (let i = 0; i < 100 && alive.length; i++) {
    await new Promise((r) => setTimeout(r, 20)); // a last KILL may still be on its way
    alive = alive.filter(aliveOnHost);
  }
  expect(alive, `${label}: the command's processes outlived the session: ${JSON.stringify(alive)}`).toEqual(
    [],
  );
  return kind;
}

describe('lost streams under the helper that holds the nonce', () => {
  it('each cut is a whole success or an unknown end, and the session leaves nothing (14 cuts)', async () => {
    const random = prng(37);
    const cuts: [Cut, string][] = [
      ...Array.from({ length: 8 }, (_, i): [Cut, string] => {
        const ms = Math.floor(random() * 600);
        return [{ ms }, `random ${i}: ${ms} ms`];
      }),
      [{ ms: 0 }, 'at once'],
      [{ ms: 5 }, 'before the command starts'],
      [{ after: 'line 0\n' }, 'after the first line'],
      [{ after: 'line 0\n' }, 'after the first line, again'],
      [{ after: `line ${LINES - 1}\n` }, 'after the last line, before the end line'],
      [{ after: `line ${LINES - 1}\n` }, 'after the last line, again'],
    ];
    const kinds = [];
    for (const [cut, label] of cuts) kinds.push(await one(cut, label));
    // Premise: the cuts reached both ends of the range.
    expect(kinds, `premise broken: no unknown end among the cuts (${kinds.join(', ')})`).toContain('unknown');
  }, 120_000);
});
