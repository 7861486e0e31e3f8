// The sweep's report, built from what a run kept (src/sweep/run.ts): every process found is
// stopped (seen gone) or a survivor (alive at the end); the proof is the last phase's end, when
// the sweep was complete (docs/report.md).
import type { SessionTag } from '../proc/tag.js';
import {
  ENV_TAG_BLIND_SPOT,
  type KeptRecord,
  type PhaseRecord,
  type ProcessRecord,
  type Proof,
  REPORT_VERSION,
  type SurvivorRecord,
  type SweepReport,
  type SweepWarning,
  type UnreadableRecord,
} from './report.js';
import type { SignalMechanism } from './signal.js';
import type { SweepOptions } from './sweep-options.js';

/** What a run kept that its report is built from: src/sweep/run.ts's `SweepRun` is one. */
export interface ReportSource {
  readonly tag: SessionTag;
  readonly opts: Pick<SweepOptions, 'layers' | 'blindSpots' | 'notes' | 'cgroup'>;
  /** Every process found, by identity key: seen gone (`alive` false) or alive at the end. */
  readonly tracked: ReadonlyMap<string, { record: ProcessRecord; alive: boolean; denied: boolean }>;
  /** The session's own spawns: swept like the rest, never listed as stopped. */
  readonly spawnKeys: ReadonlySet<string>;
  readonly kept: { records(): KeptRecord[] };
  readonly unreadable: ReadonlyMap<string, UnreadableRecord>;
  readonly phases: PhaseRecord[];
  readonly warnings: SweepWarning[];
  readonly notes: readonly string[];
  readonly complete: boolean;
  readonly signaller: { readonly mechanism: SignalMechanism };
  /** `performance.now()` at the start (ms), and the same moment as an ISO date. */
  readonly started: number;
  readonly startedAt: string;
  readonly scans: number;
  readonly scanMs: number;
}

/**
 * The `SweepReport` of a run that has ended: its timings run up to now (ms). The session's own
 * spawns are swept like the rest but never listed as stopped. Pure: events and holds are the
 * run's (`SweepRun.report`).
 */
export function buildReport(run: ReportSource): SweepReport {
  const stopped: ProcessRecord[] = [];
  const survivors: SurvivorRecord[] = [];
  for (const [key, t] of run.tracked) {
    if (t.alive) survivors.push({ ...t.record, reason: t.denied ? 'denied' : 'survived-kill' });
    else if (!run.spawnKeys.has(key)) stopped.push(t.record);
  }
  // A kept process that ended by itself before the sweep did is no longer kept: not listed.
  const last = run.phases.at(-1);
  const ended = last?.endedBy;
  const proof: Proof =
    run.complete && ended !== undefined && ended !== 'budget' && ended !== 'scan-failed' ? ended : 'none';
  const layers = run.opts.layers ?? ['env-tag'];
  // The env tag alone (no helper, cgroup or PID namespace beside it) cannot see an env-cleared
  // double fork: the report says so, and never "nothing left running" (src/cli/render.ts). What
  // the caller knows no layer sees (a privileged command) comes after.
  const blindSpots = [
    ...(layers.every((l) => l === 'env-tag') ? [ENV_TAG_BLIND_SPOT] : []),
    ...(run.opts.blindSpots ?? []),
  ];
  return {
    version: REPORT_VERSION,
    tag: run.tag.name,
    complete: run.complete,
    ok: run.complete && survivors.length === 0,
    layers,
    ...(blindSpots.length ? { blindSpots } : {}),
    notes: [...(run.opts.notes ?? []), ...run.notes],
    cgroup: run.opts.cgroup?.path ?? null,
    signalling: run.signaller.mechanism,
    proof,
    stopped,
    survivors,
    kept: run.kept.records(),
    unreadable: [...run.unreadable.values()],
    warnings: run.warnings,
    phases: run.phases,
    timings: {
      startedAt: run.startedAt,
      durationMs: performance.now() - run.started,
      scans: run.scans,
      scanMs: run.scanMs,
    },
  };
}
