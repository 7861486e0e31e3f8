// Lost streams (decisions.md D13): the exec client is killed at 120 points — 80 random ones and
// 10 each before the command starts, after its first line, after its last byte but before the
// completion line, and after the completion line but before the client's exit. By default a deterministic sample of them runs (every kind, the random ones
// spread over their whole range); TETHER_TEST_FULL=1 (`npm run stress`) runs all 120.
// Each call is either a proven end carrying the whole output, or an ExecStatusUnknownError after
// a sweep; and the command's processes are gone, by ground truth read from the host's /proc.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import { counted, sample, spread } from '../support/full.js';
import {
  aliveOnHost,
  type Container,
  type Cut,
  lossyChannel,
  startContainer,
  taggedOnHost,
} from './container.js';
import { prng } from './prng.js';

const LINES = 25;
// A command that leaves a process in its own POSIX session and writes LINES lines over ~0.4 s.
const COMMAND = [
  'sh',
  '-c',
  `setsid sleep 40 </dev/null >/dev/null 2>&1 & i=0; while [ $i -lt ${LINES} ]; do echo "line $i"; i=$((i+1)); sleep 0.01; done`,
];
const FULL = Array.from({ length: LINES }, (_, i) => `line ${i}\n`).join('');

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
});
afterAll(async () => {
  await box?.stop();
});

interface Outcome {
  cut: string;
  kind: 'proven' | 'unknown';
  stopped: number;
}

async function one(cut: Cut, label: string): Promise<Outcome> {
  const tag = createTag().name;
  const channel = lossyChannel(box.channel, cut);
  // Ground truth: the tagged processes as the host sees them, recorded while the call runs.
  const seen = new Map<string, { pid: number; startTime: number; cmdline: string }>();
  const watch = setInterval(() => {
    for (const p of taggedOnHost(tag)) seen.set(`${p.pid}:${p.startTime}`, p);
  }, 15);
  let outcome: Outcome;
  try {
    const r = await sandbox.exec(channel, COMMAND, { tag, sweep: { graceMs: 2000, killAfterMs: 1000 } });
    expect(r.ok, `${label}: a proven end that is not a success: ${JSON.stringify(r)}`).toBe(true);
    expect(r.stdout.toString(), `${label}: a success carrying partial output`).toBe(FULL);
    outcome = { cut: label, kind: 'proven', stopped: 0 };
    // A proven end sweeps nothing (decisions.md D13): the test cleans up what the command left.
    await sandbox.sweep(box.channel, tag, { graceMs: 1000, killAfterMs: 1000 });
  } catch (error) {
    expect(
      error,
      `${label}: neither a proven end nor an unknown end: ${(error as Error).message}`,
    ).toBeInstanceOf(sandbox.ExecStatusUnknownError);
    const e = error as InstanceType<typeof sandbox.ExecStatusUnknownError>;
    expect(e.code).toBe('EXEC_STATUS_UNKNOWN');
    expect(e.report.ok).toBe(true);
    outcome = { cut: label, kind: 'unknown', stopped: e.report.stopped.length };
  } finally {
    clearInterval(watch);
  }
  for (const p of taggedOnHost(tag)) seen.set(`${p.pid}:${p.startTime}`, p);
  const alive = [...seen.values()].filter(aliveOnHost);
  expect(alive, `${label}: the command's processes outlived the call: ${JSON.stringify(alive)}`).toEqual([]);
  return outcome;
}

// The full set: 80 random cut points in 0–600 ms, and 10 of each fixed kind.
const ALL = 120;
// The sample: 12 of the random ones spread over their range (sorted: early, mid-output, late),
// 2 of each fixed kind.
const RANDOM = sample(12, 80);
const EACH = sample(2, 10);
const RAN = RANDOM + 4 * EACH;

describe('a lost exec stream', () => {
  it(`is never a success with partial output, and the command is gone, over ${counted(RAN, ALL, 'cut points')}`, {
    timeout: 170_000,
  }, async () => {
    const random = prng(0x7e7e4);
    const ms80 = Array.from({ length: 80 }, () => Math.floor(random() * 600));
    // At full count, in the order drawn; sampled, spread over the sorted values.
    const sorted = [...ms80].sort((a, b) => a - b);
    const msCuts = RANDOM >= 80 ? ms80 : spread(sorted, RANDOM);
    const cuts: [Cut, string][] = msCuts.map((ms) => [{ ms }, `cut at ${ms} ms`]);
    for (let i = 0; i < EACH; i++) cuts.push([{ ms: 0 }, 'cut before the start']);
    for (let i = 0; i < EACH; i++) cuts.push([{ after: 'line 0\n' }, 'cut after the first line']);
    for (let i = 0; i < EACH; i++) {
      cuts.push([{ after: `line ${LINES - 1}\n` }, 'cut after the last line, before the completion line']);
    }
    // The random cuts come after the line only where the call ends within 600 ms, which a loaded
    // machine does not promise: these do on any machine.
    for (let i = 0; i < EACH; i++) cuts.push([{ afterEnd: true }, 'cut after the completion line']);
    expect(cuts.length).toBe(RAN);
    const outcomes: Outcome[] = [];
    // Two at a time: each has its own tag, and the sweeps find only their own.
    for (let i = 0; i < cuts.length; i += 2) {
      const batch = cuts.slice(i, i + 2).map(([cut, label]) => one(cut, label));
      outcomes.push(...(await Promise.all(batch)));
    }
    const unknown = outcomes.filter((o) => o.kind === 'unknown');
    const lastLine = outcomes.filter((o) => o.cut.startsWith('cut after the last line'));
    expect(
      lastLine.every((o) => o.kind === 'unknown'),
      'premise broken: a cut before the line was a proven end',
    ).toBe(true);
    const afterEnd = outcomes.filter((o) => o.cut === 'cut after the completion line');
    expect(
      afterEnd.every((o) => o.kind === 'proven'),
      'a cut after the completion line was not a proven end',
    ).toBe(true);
    // The premise's floor (30 unknown of 120) in proportion to the cut
    // points run; the proven ends are at least the cuts after the line, asserted above.
    expect(unknown.length, 'premise broken: no cut point lost the line').toBeGreaterThan((30 * RAN) / ALL);
    // The leftover (setsid sleep 40) started in every run that got past its first line.
    expect(
      unknown.some((o) => o.stopped > 0),
      'premise broken: no sweep stopped anything',
    ).toBe(true);
    console.log(
      `cuts: ${outcomes.length}, unknown ends: ${unknown.length}, proven: ${outcomes.length - unknown.length}, sweeps that stopped something: ${unknown.filter((o) => o.stopped > 0).length}`,
    );
  });
});
