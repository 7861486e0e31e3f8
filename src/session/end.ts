// The session's end, after its sweep: what is released, and what is handed over when the sweep
// could not run (no process table). Each helper's dead man's switch (src/containment/helper.ts)
// ends its subtree when its control pipe closes; the cgroup is removed once empty.
import { existsSync } from 'node:fs';
import type { HelperPool } from '../containment/helper-pool.js';
import { killCgroup, removeCgroup, type SessionCgroup } from '../proc/cgroup.js';
import type { SweepReport } from '../sweep/report.js';
import type { Member } from '../sweep/scan.js';
import { type Hold, releaseHold } from '../sweep/signal.js';
import { registerKept } from './keep-registrations.js';

/** What the end works on: the session's helpers, cgroup and holds, and its sweep's budgets (ms). */
export interface EndState {
  readonly helpers: HelperPool;
  readonly cgroup: SessionCgroup | undefined;
  /** The spawns' pidfds, released (and emptied) after the sweep. */
  readonly spawnHolds: Hold[];
  /** The session's known members: cleared with their pidfds. */
  readonly known: Map<string, Member>;
  readonly graceMs: number;
  readonly killAfterMs: number;
}

/** Past the helpers' own budgets (grace + kill-after), how long a hand-over is awaited, ms. */
const HANDOVER_MARGIN_MS = 2000;

/** True when the sweep ran its phases: no scan failed, and it began at all. */
export function sweepRan(report: SweepReport): boolean {
  return report.phases.length > 0 && !report.phases.some((p) => p.endedBy === 'scan-failed');
}

// After the sweep: the helpers may go, and the cgroup is removed (a note if it cannot be).
export function release(state: EndState, report: SweepReport): SweepReport {
  for (const h of state.spawnHolds.splice(0)) releaseHold(h);
  state.known.clear(); // without their pidfds, no entry can be told from a reused pid
  for (const h of state.helpers.releaseAll()) {
    report.warnings.push({
      code: 'HELPER_STOPPED',
      message: `the helper (pid ${h.pid}) was stopped (SIGSTOP) when the session released it: sent SIGCONT${h.ended === 'killed' ? ', and SIGKILL when it had not exited after 1 s' : ', it exited'}`,
    });
  }
  if (state.cgroup && !removeCgroup(state.cgroup.path)) {
    report.notes.push(`cgroup: ${state.cgroup.path} could not be removed (still populated?)`);
  }
  return registerKept(report); // the guard spares each kept process until its keep expires
}

// The sweep could not run (no process table: NO_PROC, SCAN_FAILED, PROC_NAMESPACE): no
// helper is released unswept. Each is left to its dead man's switch (TERM, grace, KILL of its
// subtree, cgroup.kill, the cgroup removed) and awaited; then the cgroup is checked.
export async function handOver(state: EndState, report: SweepReport): Promise<SweepReport> {
  const helpers = [...state.helpers.running];
  abandonHelpers(state, report, false);
  if (helpers.length === 0) return removeCgroupAfter(state, report);
  const budget = state.graceMs + state.killAfterMs;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), budget + HANDOVER_MARGIN_MS);
  });
  const outcome = await Promise.race([Promise.all(helpers.map((h) => h.exited)), timeout]);
  clearTimeout(timer);
  for (const h of helpers) h.child.unref();
  const pids = helpers.map((h) => h.helper.pid).join(', ');
  const cgroupLeft = state.cgroup !== undefined && existsSync(state.cgroup.path);
  report.warnings.push({
    code: 'HELPER_SWEPT',
    message:
      outcome === 'timeout'
        ? `the sweep could not run: the helpers (pid ${pids}) were left to end their subtrees themselves and had not exited after ${budget + HANDOVER_MARGIN_MS} ms`
        : `the sweep could not run: the helpers (pid ${pids}) ended their subtrees themselves (TERM, grace, KILL${state.cgroup ? ', cgroup.kill' : ''}) and exited${state.cgroup ? (cgroupLeft ? `; the cgroup ${state.cgroup.path} is still there` : '; the cgroup is removed') : ''}`,
  });
  return removeCgroupAfter(state, report);
}

// The helpers are not released: closing their control pipes runs their dead man's switch.
export function abandonHelpers(state: EndState, report: SweepReport, sync = true): SweepReport {
  const helpers = state.helpers.abandonAll();
  if (sync && helpers.length > 0) {
    report.warnings.push({
      code: 'HELPER_SWEPT',
      message: `the sweep could not run: the helpers (pid ${helpers.map((h) => h.helper.pid).join(', ')}) were left to end their subtrees themselves (TERM, grace, KILL${state.cgroup ? ', cgroup.kill, the cgroup removed' : ''}) after this process exits`,
    });
  }
  if (sync) for (const h of helpers) h.child.unref();
  return report;
}

// A cgroup still there after its helpers: killed as a whole (if the sweep could not) and
// removed; a note when that fails too.
function removeCgroupAfter(state: EndState, report: SweepReport): SweepReport {
  const cgroup = state.cgroup;
  if (!cgroup || removeCgroup(cgroup.path)) return report;
  const killed = cgroup.canKill ? killCgroup(cgroup.path) : 'no cgroup.kill';
  if (killed !== true && !report.warnings.some((w) => w.code === 'CGROUP_KILL_FAILED')) {
    report.warnings.push({
      code: 'CGROUP_KILL_FAILED',
      message: `cgroup.kill of ${cgroup.path} failed (${killed}): its processes may still run`,
    });
  }
  if (!removeCgroup(cgroup.path)) {
    report.notes.push(`cgroup: ${cgroup.path} could not be removed (still populated?)`);
  }
  return report;
}
