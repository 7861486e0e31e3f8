// One orphaned session swept where it runs, and the state that sweep proves.

import { TetherError } from '../errors.js';
import type { SessionState } from '../ledger/types.js';
import { removeCgroup, runsInside } from '../proc/cgroup.js';
import { commandChannel, SandboxError, sweep as sandboxSweep } from '../sandbox/index.js';
import { keptAt } from '../sweep/keep.js';
import { sweep } from '../sweep/loop.js';
import type { SweepReport } from '../sweep/report.js';
import { keptSubtrees } from './kept.js';
import type { Plan } from './plan.js';

/** How long a sandbox session's sweep may try to reach its target, ms (retries included). */
export const CHANNEL_BUDGET_MS = 30_000;

/** A sweep's verdict: the state to record, the report, and the error an unproven end is. */
export interface SweepOutcome {
  state: Extract<SessionState, 'recovered' | 'parked' | 'ambiguous'>;
  report: SweepReport | null;
  error: TetherError | null;
  reason?: string;
}

interface SweepSettings {
  graceMs?: number;
  killAfterMs?: number;
  channelBudgetMs?: number;
  procRoot?: string;
  now: number;
}

/**
 * Sweeps the session of `plan`: `recovered` when the report proves every process gone
 * (`ok`), `ambiguous` when it does not (survivors: `SURVIVORS`; an incomplete or cut sweep:
 * `SWEEP_INCOMPLETE` / `SWEEP_CUT`), `parked` when its processes cannot be reached from here
 * (a channel that never reached its target: `CHANNEL_UNREACHABLE`; another machine).
 */
export async function sweepSession(plan: Plan, settings: SweepSettings): Promise<SweepOutcome> {
  const tag = plan.record.tag;
  if (plan.kind === 'unreachable') return { state: 'parked', report: null, error: null, reason: plan.reason };
  if (plan.kind === 'sandbox') return sweepThroughChannel(plan.channel, tag, settings);
  // Locally: the tag's carriers and their descendants, the leftover cgroup's processes, and
  // never a kept process whose TTL has not passed (it and what it started are spared).
  const spare = keptSubtrees(keptAt(plan.record.kept, settings.now), settings.procRoot);
  // cgroup.kill would end a kept process with the rest: with one left to run, the cgroup's
  // processes are not taken as a whole.
  const cgroup = spare.length === 0 ? plan.cgroup : undefined;
  const outside = cgroup ? !runsInside(cgroup.path, settings.procRoot) : false;
  const report = await sweep({
    tag,
    procRoot: settings.procRoot,
    graceMs: settings.graceMs,
    killAfterMs: settings.killAfterMs,
    spare,
    ...(cgroup ? { cgroup, layers: ['env-tag', 'cgroup'], outsideCgroup: outside } : {}),
  });
  // A cgroup emptied by the sweep is removed, as `tether sweep --tag` does.
  if (cgroup && report.ok && outside && !removeCgroup(cgroup.path))
    report.notes.push(`cgroup: ${cgroup.path} could not be removed`);
  return verdict(report, tag);
}

// A sandbox session: the sweep program through its recorded channel.
async function sweepThroughChannel(
  channel: string[],
  tag: string,
  settings: SweepSettings,
): Promise<SweepOutcome> {
  try {
    const report = await sandboxSweep(commandChannel(channel), tag, {
      graceMs: settings.graceMs,
      killAfterMs: settings.killAfterMs,
      budgetMs: settings.channelBudgetMs ?? CHANNEL_BUDGET_MS,
    });
    return verdict(report, tag);
  } catch (error) {
    if (error instanceof SandboxError && error.code === 'CHANNEL_UNREACHABLE')
      // The pod may be gone, or only the path to it: named, never guessed.
      return { state: 'parked', report: null, error, reason: error.message };
    if (error instanceof SandboxError && error.code === 'SWEEP_CUT')
      return { state: 'ambiguous', report: error.report ?? null, error, reason: error.message };
    throw error;
  }
}

// `recovered` on a proven end; else `ambiguous`, with the error that says why.
function verdict(report: SweepReport, tag: string): SweepOutcome {
  if (report.ok) return { state: 'recovered', report, error: null };
  const survivors = report.survivors.length > 0;
  const why = survivors
    ? `${report.survivors.length} process(es) survived the sweep: ${report.survivors.map((p) => `pid ${p.pid} (${p.cmdline || p.comm})`).join(', ')}`
    : `the sweep did not finish: ${report.warnings.map((w) => w.message).join('; ') || 'no proof'}`;
  const error = new TetherError(survivors ? 'SURVIVORS' : 'SWEEP_INCOMPLETE', why, { tag, report });
  return { state: 'ambiguous', report, error, reason: why };
}
