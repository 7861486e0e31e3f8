// The helper's own dead man's switch takes the session's grace (docs/sandbox.md, "An agent
// session under the pushed helper"): TERMed by the session's sweep, the helper ends its subtree
// itself, and with its fixed 5 s it KILLed a TERM-ignoring leftover while the sweep's longer
// TERM phase was still giving it its grace — the session ended at 5.6 s for a 12 s grace, and
// the report said SIGTERM ended it. Ground truth: this machine's /proc (the `env` channel).
import { afterEach, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { aliveOnHost, sleep, taggedOnHost } from './container.js';

const channel = sandbox.commandChannel(['env']);
const tags: string[] = [];
afterEach(async () => {
  for (const tag of tags.splice(0))
    if (taggedOnHost(tag).length) await sandbox.sweep(channel, tag, { graceMs: 200, killAfterMs: 1000 });
});

function phasesOf(report: SweepReport): string {
  return report.phases.map((p) => `${p.signal} ${p.endedBy} after ${p.rounds} rounds`).join(', ');
}

describe('the helper’s switch and the session’s grace', () => {
  it('a grace over 5 s is honoured: the TERM-ignoring leftover is KILLed by the sweep, after the grace', async () => {
    const tag = createTag();
    tags.push(tag.name);
    const graceMs = 6500;
    const script = 'setsid sh -c "trap \\"\\" TERM; sleep 300.5091; :" & echo up';
    const started = performance.now();
    const r = await sandbox.run(channel, ['sh', '-c', script], {
      tag,
      sweep: { graceMs, killAfterMs: 2000 },
      helper: true,
      reject: false,
    });
    const tookMs = performance.now() - started;
    expect(r.stdout, 'premise broken: the command did not run').toBe('up\n');
    expect(r.report.notes.join('\n'), 'premise broken: the command did not run under the helper').toMatch(
      /the commands ran under the helper/,
    );
    const leftover = r.report.stopped.find((p) => p.cmdline.includes('300.5091'));
    expect(
      leftover,
      `the leftover was not among the stopped: ${JSON.stringify(r.report.stopped)}`,
    ).toBeDefined();
    if (leftover) for (let i = 0; i < 50 && aliveOnHost(leftover); i++) await sleep(20);
    expect(taggedOnHost(tag.name), 'a tagged process outlived the session').toEqual([]);
    const term = r.report.phases[0]?.durationMs ?? 0;
    expect(
      term,
      `the TERM phase ended after ${Math.round(term)} ms, before its ${graceMs} ms grace (phases: ${phasesOf(r.report)}; the call took ${Math.round(tookMs)} ms)`,
    ).toBeGreaterThanOrEqual(graceMs - 100);
    expect(
      r.report.phases.map((p) => p.signal),
      `the report named the wrong signal (phases: ${phasesOf(r.report)})`,
    ).toEqual(['SIGTERM', 'SIGKILL']);
  }, 30_000);
});
