// What a tick does with its verdict (src/guard/decide.ts): stops the targets with the sweep's own
// loop (TERM → grace → KILL, each signal through a pidfd held since the process was found), or in
// a dry run lists them; each process stopped, not stopped or that would be, in the tick's result
// and one log line.

import { identityKey } from '../proc/identity.js';
import type { SessionTag } from '../proc/tag.js';
import { sweep } from '../sweep/loop.js';
import type { ProcessRecord } from '../sweep/report.js';
import type { Decision } from './decide.js';
import type { GuardSettings } from './options.js';
import { forLog, logLine } from './tick-log.js';
import type { GuardProcess, TickResult } from './tick-result.js';

/**
 * Stops `decision.toStop` (nothing in a dry run: `result.wouldStop` lists them) and fills
 * `result.stopped`, `survivors`, the sweep's warnings and `complete`. `tag` names the guard's
 * sweeps in their events and reports. Must be called in the task `decide` ran in (no await
 * between): the sweep's first round takes the decision's walk.
 */
export async function stopChosen(
  settings: GuardSettings,
  decision: Decision,
  result: TickResult,
  tag: SessionTag,
): Promise<void> {
  const { snapshot, toStop, reasons, cmdline } = decision;
  if (result.dryRun) {
    for (const id of toStop) {
      const stat = snapshot.processes.get(id.pid);
      if (!stat) continue;
      const p: GuardProcess = {
        pid: id.pid,
        startTime: id.startTime,
        ppid: stat.ppid,
        comm: stat.comm,
        cmdline: forLog(cmdline(id.pid)),
        reason: reasons.get(identityKey(id)) ?? '',
        signals: [],
        endedBy: null,
      };
      result.wouldStop.push(p);
      settings.log(logLine('would stop', p));
    }
    return;
  }
  if (toStop.length === 0) return;
  const stopSet = new Set(toStop.map((id) => id.pid));
  const report = await sweep({
    tag,
    procRoot: settings.procRoot,
    graceMs: settings.graceMs,
    killAfterMs: settings.killAfterMs,
    members: toStop,
    // Everything else the walk saw is never reached through a target's descendants.
    spare: [...snapshot.processes.keys()].filter((pid) => !stopSet.has(pid)),
    layers: ['guard'],
    ...(settings.signaller ? { signaller: settings.signaller } : {}),
  });
  result.warnings.push(...report.warnings);
  result.complete = report.complete;
  const described = (r: ProcessRecord): GuardProcess => ({
    pid: r.pid,
    startTime: r.startTime,
    ppid: r.ppid,
    comm: r.comm,
    cmdline: forLog(r.cmdline),
    reason:
      reasons.get(identityKey(r)) ??
      `a descendant of pid ${r.via ?? r.ppid}, which was being stopped (it appeared during the tick)`,
    signals: r.signals,
    endedBy: r.endedBy,
  });
  for (const r of report.stopped) {
    const p = described(r);
    result.stopped.push(p);
    settings.log(logLine('stopped', p));
  }
  for (const r of report.survivors) {
    const p = described(r);
    result.survivors.push(p);
    settings.log(logLine(`could not stop (${r.reason})`, p));
  }
}
