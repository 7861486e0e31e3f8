// The helper's proof (docs/sandbox.md, "The helper's proof"): a session whose every command ran
// under a helper that gave its identity in its start line ends its sweep on the kernel's word —
// a scan that finds nothing but those helpers, each childless by /proc/PID/task/TID/children —
// instead of two empty scans 50 ms apart. Never an early end with a live member: a leftover below
// the helper, and a tagged process outside every helper's subtree, are still found and stopped.
// Ground truth: the host's /proc (pid and start time). The library's default is the helper.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTag, sandbox } from '../../src/index.js';
import type { SweepReport } from '../../src/sweep/report.js';
import { missing } from '../support/tools.js';
import {
  aliveOnHost,
  type Container,
  privateTmp,
  SHELLS,
  sleep,
  startContainer,
  taggedOnHost,
} from './container.js';

let box: Container;
beforeAll(async () => {
  box = await startContainer(300);
  // A tmpfs of its own on the container's /tmp (its mount namespace): the helper is pushed there.
  privateTmp(box, 'tether-hp');
});
afterAll(async () => {
  await box?.stop();
});

const SWEEP = { graceMs: 2000, killAfterMs: 1000 };

async function cleanup(tag: string): Promise<void> {
  if (taggedOnHost(tag).length) await sandbox.sweep(box.channel, tag, SWEEP);
}

// Gone by its identity, polled for a moment (its last signal may still be on its way).
async function expectGone(
  p: { pid: number; startTime: number; cmdline: string },
  what: string,
): Promise<void> {
  for (let i = 0; i < 100 && aliveOnHost(p); i++) await sleep(20);
  expect(aliveOnHost(p), `${p.cmdline} (host pid ${p.pid}) survived ${what}`).toBe(false);
}

// A command whose leftover ends on its own before the session's end: its helper, not childless
// when it reaped the command (so it did not exit: "A childless end"), is childless at the sweep.
const SHORT_LEFTOVER = ['sh', '-c', 'sleep 0.3 & echo ok'];

function phasesOf(report: SweepReport): string {
  return report.phases.map((p) => `${p.signal} ${p.endedBy} after ${p.rounds} rounds`).join(', ');
}

describe('the helper’s proof ends the session’s sweep', () => {
  it('a clean end: proven at the first scan by the childless helper, which is then gone', async () => {
    const tag = createTag();
    try {
      const s = sandbox.session(box.channel, { tag, sweep: SWEEP, helper: true });
      const r = await s.spawn(SHORT_LEFTOVER);
      expect([r.exitCode, r.stdout, r.blindSpots]).toEqual([0, 'ok\n', []]);
      // Premise: the helper still runs (it held the leftover when it reaped the command).
      expect(taggedOnHost(tag.name).some((p) => /^\/proc\/\d+\/fd\/9 --wrap /.test(p.cmdline))).toBe(true);
      await until(() => !taggedOnHost(tag.name).some((p) => p.cmdline === 'sleep 0.3') || undefined);
      const report = await s.end();
      expect(report.proof, `phases: ${phasesOf(report)}`).toBe('helper-childless');
      expect(report.phases.map((p) => [p.signal, p.endedBy, p.rounds])).toEqual([
        ['SIGTERM', 'helper-childless', 1],
      ]);
      expect([report.complete, report.ok, report.timings.scans]).toEqual([true, true, 1]);
      // The helper was the one member: stopped, named in the notes, not in `stopped`.
      expect(report.stopped).toEqual([]);
      expect(report.notes.join('\n')).toMatch(/the session's helper ended with it: pid \d+/);
      expect(taggedOnHost(tag.name), 'a tagged process outlived the proven end').toEqual([]);
    } finally {
      await cleanup(tag.name);
    }
  });

  it('two commands, each under its helper: both helpers’ word is needed, and proves it', async () => {
    const tag = createTag();
    try {
      const s = sandbox.session(box.channel, { tag, sweep: SWEEP, helper: true });
      await s.spawn(SHORT_LEFTOVER);
      await s.spawn(SHORT_LEFTOVER);
      await until(() => !taggedOnHost(tag.name).some((p) => p.cmdline === 'sleep 0.3') || undefined);
      // Premise: both helpers still run, each waiting for a sweep's TERM.
      const helpers = taggedOnHost(tag.name).filter((p) => /^\/proc\/\d+\/fd\/9 --wrap /.test(p.cmdline));
      expect(helpers.length, 'premise broken: not two helpers alive before the end').toBe(2);
      const report = await s.end();
      expect(report.proof, `phases: ${phasesOf(report)}`).toBe('helper-childless');
      for (const h of helpers) await expectGone(h, 'the proven end');
    } finally {
      await cleanup(tag.name);
    }
  });

  it('a leftover below the helper: no early end; it is stopped and gone', async () => {
    const tag = createTag();
    try {
      const r = await sandbox.run(
        box.channel,
        ['sh', '-c', `env -i /bin/sh -c 'setsid sleep 7301 </dev/null >/dev/null 2>&1 &'; sleep 0.2`],
        { tag, sweep: SWEEP, helper: true },
      );
      expect(r.exitCode).toBe(0);
      const left = r.report.stopped.filter((p) => p.cmdline === 'sleep 7301');
      expect(left.length, `the double fork was not stopped: ${JSON.stringify(r.report.stopped)}`).toBe(1);
      expect(r.report.proof, 'an early end with a live member').not.toBe('helper-childless');
      expect(r.report.ok).toBe(true);
    } finally {
      await cleanup(tag.name);
    }
  });

  it('a tagged process outside every helper’s subtree: no early end; it is stopped and gone', async () => {
    const tag = createTag();
    try {
      const s = sandbox.session(box.channel, { tag, sweep: SWEEP, helper: true });
      await s.spawn(['true']);
      // A carrier of the tag that no helper holds: started by a plain exec under the same tag.
      await sandbox.exec(box.channel, ['sh', '-c', 'setsid sleep 7302 </dev/null >/dev/null 2>&1 &'], {
        tag,
      });
      const outside = await until(() => taggedOnHost(tag.name).find((p) => p.cmdline === 'sleep 7302'));
      const report = await s.end();
      // Not at the first scan, which found the carrier: the helpers' word ends a phase only once
      // nothing but them is left.
      expect(report.phases[0]?.rounds, `phases: ${phasesOf(report)}`).toBeGreaterThan(1);
      expect(report.stopped.map((p) => p.cmdline)).toContain('sleep 7302');
      await expectGone(outside, 'the session’s end');
    } finally {
      await cleanup(tag.name);
    }
  });

  it('a command on the shell (no helper for it): the sweep takes no helper’s word', async () => {
    const tag = createTag();
    try {
      const s = sandbox.session(box.channel, { tag, sweep: SWEEP, helper: true });
      await s.spawn(['true']);
      // A script over 100 KB: the helper is its subreaper, but its start line is the shell's.
      const script = `true\n#${'x'.repeat(110 * 1024)}\n`;
      const r = await s.spawn(['sh'], { script });
      expect(r.exitCode).toBe(0);
      const report = await s.end();
      expect(report.proof, `phases: ${phasesOf(report)}`).toBe('two-empty-scans');
    } finally {
      await cleanup(tag.name);
    }
  });
});

// The sweep program's new words (helpers_childless, helpers_gone) under each shell it runs in.
describe('the helpers’ proof under each shell', () => {
  for (const [name, shell] of SHELLS) {
    const noShell = missing(shell[0] as string);
    it.skipIf(noShell !== '')(
      `${name}: a clean end proven by the helper; a leftover below it still stopped${noShell ? ` (skipped: ${noShell})` : ''}`,
      async () => {
        const tag = createTag();
        try {
          // The sweep program's own proof: a helper still there, childless by the time of the sweep.
          const session = sandbox.session(box.channel, { tag, shell, sweep: SWEEP });
          await session.spawn(SHORT_LEFTOVER);
          await until(() => !taggedOnHost(tag.name).some((p) => p.cmdline === 'sleep 0.3') || undefined);
          const clean = await session.end();
          expect(clean.proof, `phases: ${phasesOf(clean)}`).toBe('helper-childless');
          expect(clean.timings.scans, 'the sweep did not end at its first scan').toBe(1);
          const left = await sandbox.run(
            box.channel,
            ['sh', '-c', 'env -i /bin/sh -c "setsid sleep 7303 </dev/null >/dev/null 2>&1 &"; sleep 0.2'],
            { tag, shell, sweep: SWEEP },
          );
          expect(left.report.stopped.map((p) => p.cmdline)).toContain('sleep 7303');
          // The helper's word may end a later round (the leftover TERMed and gone, the helper
          // childless), never the first, which found the leftover alive below it.
          const term = left.report.phases[0];
          expect(
            left.report.proof !== 'helper-childless' || (term?.rounds ?? 0) > 1,
            `an early end with a live member: ${phasesOf(left.report)}`,
          ).toBe(true);
          expect(taggedOnHost(tag.name)).toEqual([]);
        } finally {
          await cleanup(tag.name);
        }
      },
    );
  }
});

describe('the library’s default', () => {
  it('sandbox.run without `helper` runs its command under the helper, and ends on its word', async () => {
    let tag = '';
    try {
      const r = await sandbox.run(box.channel, ['true'], { sweep: SWEEP });
      tag = r.report.tag;
      // The end line is the helper's: it rests on no shell.
      expect([r.exitCode, r.blindSpots]).toEqual([0, []]);
      expect(r.report.notes.join('\n')).toContain('the commands ran under the helper /tmp/.tether/helper-');
      // Its end line said nothing was left ("A childless end"): one scan found it gone, and nothing.
      expect([r.report.proof, r.report.timings.scans]).toEqual(['helper-childless', 1]);
    } finally {
      if (tag) await cleanup(tag);
    }
  });

  it('`helper: false` is the env tag alone; anything else than a boolean is refused before anything starts', async () => {
    const tag = createTag();
    try {
      const r = await sandbox.run(box.channel, ['true'], { tag, sweep: SWEEP, helper: false });
      expect(r.report.notes.join('\n')).not.toContain('helper');
      expect(r.report.proof).toBe('two-empty-scans');
    } finally {
      await cleanup(tag.name);
    }
    expect(() => sandbox.session(box.channel, { helper: 'yes' as unknown as boolean })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    );
  });
});

async function until<T>(find: () => T | undefined): Promise<T> {
  for (let i = 0; i < 250; i++) {
    const found = find();
    if (found !== undefined) return found;
    await sleep(20);
  }
  throw new Error('premise broken: the outside carrier never ran');
}
