// tether sweep --tag NAME [-k/--kill-after 5s] [--kill-budget 3s] [--json]: sweep one tag now — its
// carriers, their descendants, and its session cgroup if one is left.
import { findSessionCgroup, removeCgroup, runsInside } from '../proc/cgroup.js';
import { parseTag } from '../proc/tag.js';
import { sweep } from '../sweep/loop.js';
import { EXIT_SWEEP_FAILED } from './exit-codes.js';
import { type PhaseFlags, phaseBudgets } from './phases.js';
import { progressLine } from './progress.js';
import { renderReport } from './render.js';

/**
 * Sweeps every process carrying `flags.tag`, and every process in the session's cgroup when
 * one is left (its supervisor died); removes that cgroup once empty. Exit status 1 when it left
 * a survivor or could not finish.
 */
export async function sweepCommand(flags: PhaseFlags & { tag: string; json?: boolean }): Promise<void> {
  const tag = parseTag(flags.tag);
  const { graceMs, killAfterMs } = phaseBudgets(flags);
  const progress = progressLine(process.stderr);
  const cgroup = findSessionCgroup(tag.name);
  const report = await sweep({
    tag,
    graceMs,
    killAfterMs,
    onProgress: progress.update,
    ...(cgroup ? { cgroup, layers: ['env-tag', 'cgroup'] } : {}),
  });
  if (cgroup && report.ok && !runsInside(cgroup.path) && !removeCgroup(cgroup.path)) {
    report.notes.push(`cgroup: ${cgroup.path} could not be removed`);
  }
  progress.clear();
  if (flags.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  else process.stderr.write(`${renderReport(report).join('\n')}\n`);
  if (!report.ok) process.exitCode = EXIT_SWEEP_FAILED;
}
