// One tick of the guard, in four steps: read the inputs (the allow file, the registrations),
// decide (walk the target and judge it by the allowlist), stop what no rule spares, and remove
// the empty session cgroups no session claims; then count, log and hand the result on.
import { removeUnclaimedCgroups, sessionCgroupsBelow } from '../containment/stale-cgroups.js';
import { createTag } from '../proc/tag.js';
import { decide } from './decide.js';
import type { GuardSettings } from './options.js';
import { stopChosen } from './stop.js';
import { inputReader } from './tick-inputs.js';
import { tickLogger } from './tick-log.js';
import { countTick, emptyTickResult, type GuardCounters, type TickResult } from './tick-result.js';

/**
 * The tick of a guard run by `settings`: each call runs one tick to its end and resolves with its
 * result, counted in `counters` (the caller never runs two at once). A tick that cannot walk its
 * target (no process table: NO_PROC; an fd limit: SCAN_FAILED) says so in a warning, with
 * `complete` false, and stops nothing. Never rejects; a throwing `onTick` listener is logged.
 */
export function createTick(settings: GuardSettings, counters: GuardCounters): () => Promise<TickResult> {
  const readInputs = inputReader(settings);
  const logTick = tickLogger(settings.log);
  const tag = createTag(); // names the guard's sweeps in their events and reports; carried by nothing

  // Stops what no rule spares; returns the tags some session may still use.
  const decideAndStop = async (result: TickResult): Promise<ReadonlySet<string>> => {
    // The input files first: the walk below must not wait on them.
    const inputs = await readInputs(result);
    const decision = decide(settings, inputs, result);
    await stopChosen(settings, decision, result, tag);
    return decision.claimed;
  };

  return async () => {
    const started = performance.now();
    const { dryRun, target, patternProblems } = settings;
    const result = emptyTickResult(counters.ticks + 1, dryRun, target, patternProblems);
    try {
      const claimed = await decideAndStop(result);
      removeCgroups(settings, result, claimed);
    } catch (error) {
      // No process table (NO_PROC), an fd limit: the tick says so and stops nothing.
      result.complete = false;
      const code = (error as { code?: string }).code === 'NO_PROC' ? 'NO_PROC' : 'SCAN_FAILED';
      result.warnings.push({ code, message: `the tick could not run: ${(error as Error).message}` });
    }
    result.durationMs = performance.now() - started;
    countTick(counters, result);
    logTick(result);
    try {
      settings.onTick?.(result);
    } catch (error) {
      settings.log(
        `tether guard: the onTick listener threw (${(error as Error).message}): the guard goes on`,
      );
    }
    return result;
  };
}

// Empty session cgroups under a cgroup target that no session claims (`claimed`: read in the
// tick's walk, before its stops), once older than `cgroupMinAgeMs`: a fresh session's cgroup
// is never raced away, and one a session joins meanwhile fails rmdir(2) with EBUSY and stays.
function removeCgroups(settings: GuardSettings, result: TickResult, claimed: ReadonlySet<string>): void {
  const { target } = settings;
  if (target.kind !== 'cgroup') return;
  result.cgroups = removeUnclaimedCgroups(sessionCgroupsBelow(target.path), {
    claimed: (tag) => claimed.has(tag),
    dryRun: result.dryRun,
    minAgeMs: settings.cgroupMinAgeMs,
  });
  for (const c of result.cgroups)
    settings.log(
      `tether guard: ${c.outcome === 'removed' ? 'removed' : 'would remove'} empty session cgroup ${c.path} (tag ${c.tag}, ${(c.ageMs / 1000).toFixed(1)} s old, no session claims it)`,
    );
}
