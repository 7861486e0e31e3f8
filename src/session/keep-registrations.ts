// Kept services under a guard (docs/sweep.md, "After the session"): once the session has ended, a
// kept process is an orphan carrying a dead session's tag, and a `tether guard` whose target holds
// it would stop it once older than its --min-age, whatever its TTL — the guard reads no ledger.
// So the end writes a guard registration for each kept process (pid, start time, the keep's
// expiry) where the guard reads them (src/containment/guard-registrations.ts): its `registered`
// rule spares the process and its descendants until the keep expires, and the next tick after
// that stops it like any orphan. Written whether or not a guard runs: nothing tells.
import { addRegistrationsSync, stateDir } from '../containment/guard-registrations.js';
import { keptAt } from '../sweep/keep.js';
import type { SweepReport } from '../sweep/report.js';

/**
 * Registers `report.kept` (each unexpired at `now`, ms since the epoch) with the guard of
 * `stateDir(env)` until its `expiresAt`. Synchronous: the end runs in the `exit` hook too. A
 * registration that cannot be written (no state directory it may create, a file there it cannot
 * read or replace) is a note of the report, never a failure. Returns `report`.
 */
export function registerKept(
  report: SweepReport,
  env: NodeJS.ProcessEnv = process.env,
  now = Date.now(),
): SweepReport {
  const kept = keptAt(report.kept, now);
  if (kept.length === 0) return report;
  const dir = stateDir(env);
  try {
    addRegistrationsSync(
      dir,
      kept.map(({ pid, startTime, expiresAt }) => ({ pid, startTime, expiresAt })),
      now,
    );
  } catch (error) {
    report.notes.push(
      `kept: pid ${kept.map((k) => k.pid).join(', ')} not registered with the guard (${(error as Error).message}): a tether guard whose target holds ${kept.length === 1 ? 'it' : 'them'} stops ${kept.length === 1 ? 'it' : 'them'} once older than its --min-age, whatever the TTL (set TETHER_GUARD_STATE to the guard's state directory, or run tether guard allow --ttl)`,
    );
  }
  return report;
}
