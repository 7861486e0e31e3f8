// The report's text says what its JSON says (src/cli/render.ts): over every shape a report can
// take — clean, stopped, survivors, unreadable, kept, unsettled, not run — "nothing left
// running" is printed only when nothing is left and the end is proven, and each process and
// warning the JSON names is in the text. A pure renderer: tested on built reports.
import { describe, expect, it } from 'vitest';
import { nothingLeft, notSeenLines, renderReport, seconds } from '../../src/cli/render.js';
import type {
  KeptRecord,
  ProcessRecord,
  SurvivorRecord,
  SweepReport,
  UnreadableRecord,
} from '../../src/sweep/report.js';

const proc = (pid: number, extra: Partial<ProcessRecord> = {}): ProcessRecord => ({
  pid,
  startTime: 1000 + pid,
  ppid: 1,
  uid: 0,
  comm: `c${pid}`,
  cmdline: `cmd-${pid} --flag`,
  foundBy: 'carrier',
  signals: ['SIGTERM'],
  endedBy: 'SIGTERM',
  ...extra,
});
const survivor = (pid: number): SurvivorRecord => ({
  ...proc(pid, { signals: ['SIGTERM', 'SIGKILL'], endedBy: null }),
  reason: 'survived-kill',
});
const unreadable = (pid: number): UnreadableRecord => ({
  pid,
  startTime: 1000 + pid,
  uid: 0,
  comm: `u${pid}`,
  cmdline: `unread-${pid}`,
  reason: 'denied',
});
const kept = (pid: number): KeptRecord => ({
  ...proc(pid, { signals: [], endedBy: null }),
  match: 'redis-server *',
  owner: 'ops',
  expiresAt: Date.UTC(2030, 0, 1),
});

function report(over: Partial<SweepReport>): SweepReport {
  return {
    version: 1,
    tag: 'TETHER_SESSION_0123456789abcdef0123456789abcdef',
    complete: true,
    ok: true,
    layers: ['env-tag', 'subreaper', 'cgroup'],
    notes: [],
    cgroup: null,
    signalling: 'pidfd',
    proof: 'populated-0',
    stopped: [],
    survivors: [],
    kept: [],
    unreadable: [],
    warnings: [],
    phases: [],
    timings: { startedAt: '2026-01-01T00:00:00.000Z', durationMs: 12, scans: 1, scanMs: 1 },
    ...over,
  };
}

const UNSETTLED = {
  code: 'UNSETTLED' as const,
  message: 'the helper (pid 77) did not answer: nothing proves the session gone',
};

const PROOF_TEXT: Record<SweepReport['proof'], string> = {
  'two-empty-scans': 'two empty scans',
  'populated-0': 'cgroup populated 0',
  'helper-childless': 'helper has no child left',
  'verified-empty': 'empty after the KILL phase',
  none: 'no proof',
};

/** Every shape, with whether nothing is left running, by proof (`nothingLeft`). */
const SHAPES: [name: string, report: SweepReport, nothingLeft: boolean][] = [
  ['clean, proven by the cgroup', report({}), true],
  ['clean, proven by two empty scans', report({ proof: 'two-empty-scans', layers: ['env-tag'] }), true],
  ['stopped leftovers', report({ stopped: [proc(10), proc(11)] }), true],
  ['a survivor', report({ ok: false, proof: 'none', survivors: [survivor(20)] }), false],
  [
    'stopped and a survivor',
    report({ ok: false, proof: 'none', stopped: [proc(12)], survivors: [survivor(21)] }),
    false,
  ],
  ['an unreadable process', report({ proof: 'two-empty-scans', unreadable: [unreadable(30)] }), false],
  ['a kept service', report({ kept: [kept(40)] }), false],
  ['unsettled', report({ complete: false, ok: false, proof: 'none', warnings: [UNSETTLED] }), false],
  [
    'complete but no proof (the KILL budget ran out)',
    report({ proof: 'none', ok: true, warnings: [] }),
    false,
  ],
  [
    'not run (no /proc)',
    report({
      complete: false,
      ok: false,
      proof: 'none',
      timings: { startedAt: '2026-01-01T00:00:00.000Z', durationMs: 0, scans: 0, scanMs: 0 },
      warnings: [{ code: 'NO_PROC', message: 'the sweep cannot run: /proc is not mounted' }],
    }),
    false,
  ],
];

describe('renderReport', () => {
  for (const [name, r, empty] of SHAPES) {
    it(`${name}: ${empty ? 'nothing is' : 'something may be'} left running, and the text names what the JSON names`, () => {
      const text = renderReport(r).join('\n');
      expect(nothingLeft(r)).toBe(empty);
      // (With processes stopped, their table says so instead.)
      expect(text.includes('nothing left running'), text).toBe(empty && r.stopped.length === 0);
      for (const p of r.stopped) expect(text).toMatch(new RegExp(`^\\s+${p.pid}\\s`, 'm'));
      // What was stopped is the session's — its leftovers, or the command itself when a timeout or
      // a signal ended it: never called "left running" by the session.
      if (r.stopped.length)
        expect(text).toContain(
          `tether: stopped ${r.stopped.length} process${r.stopped.length === 1 ? '' : 'es'} of the session:\n`,
        );
      if (r.survivors.length > 0) expect(text).toMatch(/error: \d+ process(es)? still running after SIGKILL/);
      for (const p of r.survivors) expect(text).toContain(p.cmdline);
      for (const p of r.unreadable) expect(text).toContain(`${p.pid} ${p.cmdline}`);
      for (const p of r.kept) expect(text).toContain(p.cmdline);
      for (const w of r.warnings) expect(text).toContain(`warning: ${w.message}`);
      expect(text).toContain(r.complete ? 'sweep finished' : 'sweep did not finish');
      expect(text).toContain(`, ${PROOF_TEXT[r.proof]};`);
    });
  }
});

// How each find is named in the FOUND BY column: a process named to the sweep by pid and start
// time (`given`: the guard's targets, a sandbox session's helpers) is no carrier of the env tag.
describe('renderReport: FOUND BY', () => {
  const found = (p: ProcessRecord): string => {
    const line = renderReport(report({ stopped: [p] })).find((l) => new RegExp(`^\\s+${p.pid}\\s`).test(l));
    return (line ?? '').split(/\s{2,}/)[2] ?? '';
  };

  it('names each layer as what found the process', () => {
    expect(found(proc(50))).toBe('carrier (env tag)');
    expect(found(proc(51, { foundBy: 'descendant', via: 50 }))).toBe('descendant of 50');
    expect(found(proc(52, { foundBy: 'subreaper', via: 9 }))).toBe('subreaper (helper)');
    expect(found(proc(53, { foundBy: 'cgroup' }))).toBe('cgroup');
  });

  it('a given find is named by identity, not as a carrier of the env tag', () => {
    expect(found(proc(54, { foundBy: 'given' }))).toBe('named by identity');
  });
});

describe('renderReport: whose pids', () => {
  it("a sandbox sweep's tables say their pids are the container's", () => {
    const head = (r: SweepReport) => renderReport(r).find((l) => /^\s*(CONTAINER )?PID\s/.test(l)) ?? '';
    expect(head(report({ stopped: [proc(50)] }))).toMatch(/^\s*PID\s/);
    expect(head(report({ stopped: [proc(50)], layers: ['env-tag', 'sandbox'] }))).toMatch(
      /^\s*CONTAINER PID\s/,
    );
  });
});

describe('not seen: lines', () => {
  it('say a short blind spot whole, a long one by its headline, and where the whole text is', () => {
    const short = 'short things are not seen: because';
    const long = `long things are not seen: ${'because '.repeat(30)}`;
    expect(notSeenLines([short])).toEqual([`not seen: ${short}`]);
    expect(notSeenLines([short, long])).toEqual([
      `not seen: ${short}`,
      'not seen: long things are not seen',
      '(not seen, in full: --json\'s report.blindSpots; docs/sandbox.md and docs/sweep.md, "What escapes this")',
    ]);
    // In the report's lines too; the report itself keeps every text whole.
    const text = renderReport(report({ blindSpots: [long] })).join('\n');
    expect(text).toContain('tether: not seen: long things are not seen\n');
    expect(text).not.toContain('because because');
  });
});

describe('seconds', () => {
  it('says ms as seconds, at most three decimals, no trailing zeros', () => {
    expect([2_000, 1_500, 250, 1, 1_800_000].map(seconds)).toEqual([
      '2 s',
      '1.5 s',
      '0.25 s',
      '0.001 s',
      '1800 s',
    ]);
  });
});
