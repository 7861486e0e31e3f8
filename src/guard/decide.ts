// Who a tick stops (docs/guard.md, "The allowlist"): the tick's walk of the target, the evidence
// the rules judge it by (the init's service, live sessions, registrations, patterns, ages), and
// for each target no rule spares — itself or an ancestor — why it is stopped.
import { readSessionRegistrations } from '../containment/live-session.js';
import { readCmdline, readCmdlines } from '../proc/details.js';
import { CLOCK_TICKS_PER_SECOND, type Identity, identityKey, ticksNow } from '../proc/identity.js';
import type { Snapshot } from '../proc/snapshot.js';
import { keptAt } from '../sweep/keep.js';
import { sharedSnapshot } from '../sweep/shared-walk.js';
import {
  type AllowContext,
  ancestorsIn,
  asksPattern,
  findLiveSessions,
  keysOf,
  verdicts,
} from './allowlist.js';
import { findInitService, type InitService } from './init-service.js';
import type { GuardSettings } from './options.js';
import { listTargets } from './targets.js';
import type { TickInputs } from './tick-inputs.js';
import type { TickResult } from './tick-result.js';

/** A tick's verdict: the walk it was made on, what to stop and why, and what sessions claim. */
export interface Decision {
  snapshot: Snapshot;
  /** The targets no rule spares, in the walk's order. */
  toStop: Identity[];
  /** Why each of `toStop` is stopped, by `identityKey`. */
  reasons: Map<string, string>;
  /** The tags some live session may still use (its empty cgroup is not removed). */
  claimed: ReadonlySet<string>;
  /** A process's cmdline, read once (`''` when gone). */
  cmdline: (pid: number) => string;
}

/**
 * Walks the target (one walk, shared with the sweep that starts in this same task: no await
 * between this and the sweep, src/sweep/shared-walk.ts), judges each target by the allowlist's
 * rules, and fills `result`'s target counts, `init`, `spared` and warnings. Throws what the walk
 * throws (`NO_PROC`, an fd limit).
 */
export function decide(settings: GuardSettings, inputs: TickInputs, result: TickResult): Decision {
  const snapshot = sharedSnapshot(settings.procRoot, undefined);
  const listed = listTargets(settings.target, snapshot);
  result.target.processes = listed.pids.length;
  result.target.hidden = listed.hidden;
  const cmdlines = new Map<number, string>();
  const cmdline = (pid: number) => {
    let c = cmdlines.get(pid);
    if (c === undefined) {
      c = readCmdline(settings.procRoot, pid) ?? '';
      cmdlines.set(pid, c);
    }
    return c;
  };
  const { ctx, init } = allowContext(settings, inputs, snapshot, listed.pids, cmdline, result);
  // The cmdlines the pattern rule will test, read in one batch (one native call when it is
  // there); any other (an ancestor's, a helper's, a log line's) is read when first asked.
  const unread = listed.pids.filter((pid) => {
    const stat = snapshot.processes.get(pid);
    return stat !== undefined && !cmdlines.has(pid) && asksPattern(stat, ctx);
  });
  const read = readCmdlines(settings.procRoot, unread);
  for (let i = 0; i < unread.length; i++) cmdlines.set(unread[i] as number, read[i] ?? '');
  const sparedBy = verdicts(ctx);
  const toStop: Identity[] = [];
  const reasons = new Map<string, string>();
  const where = settings.target.kind === 'cgroup' ? 'in the target cgroup' : 'in the PID namespace';
  for (const pid of listed.pids) {
    const spared = sparedBy(pid);
    if (spared) {
      result.spared[spared.rule] += 1;
      continue;
    }
    const stat = snapshot.processes.get(pid);
    if (!stat || pid <= 1 || pid === ctx.self) continue; // never: the rules spare them; belt and braces
    const id = { pid, startTime: stat.startTime };
    toStop.push(id);
    const ageS = (ctx.nowTicks - stat.startTime) / CLOCK_TICKS_PER_SECOND;
    reasons.set(
      identityKey(id),
      `${notTheService(init, stat.ppid)}no rule spares it or an ancestor (ppid ${stat.ppid}, ${ageS.toFixed(1)} s old, ${where})`,
    );
  }
  return { snapshot, toStop, reasons, claimed: ctx.sessions.claimed, cmdline };
}

// The evidence the rules judge this tick's walk by (src/guard/allowlist.ts), and the init's
// service; warns in `result` of an init whose service is ambiguous and of a live session judged
// on a weak bound.
function allowContext(
  settings: GuardSettings,
  inputs: TickInputs,
  snapshot: Snapshot,
  targets: readonly number[],
  cmdline: (pid: number) => string,
  result: TickResult,
): { ctx: AllowContext; init: InitService | undefined } {
  const self = process.pid;
  // The guard as PID 1 (src/guard/init.ts) knows the service it started by identity: its word.
  const init = findInitService(snapshot, self === 1 ? (settings.protect ?? []) : undefined);
  result.init = init ?? null;
  if (init?.ambiguity !== undefined) {
    result.warnings.push({ code: 'INIT_SERVICE_AMBIGUOUS', message: init.ambiguity });
  }
  const now = Date.now();
  const ctx: AllowContext = {
    snapshot,
    self,
    ancestors: new Set(ancestorsIn(snapshot, self)),
    spareDescendants: settings.spareDescendants,
    protect: keysOf(settings.protect ?? []),
    initServices: keysOf(init?.services ?? []),
    target: new Set(targets),
    sessions: findLiveSessions(snapshot, cmdline, readSessionRegistrations(settings.sessionsDir)),
    registered: keysOf(keptAt(inputs.entries, now)),
    patterns: inputs.patterns,
    nowTicks: ticksNow(settings.procRoot),
    minAgeTicks: Math.ceil((settings.minAgeMs / 1000) * CLOCK_TICKS_PER_SECOND),
    cmdline,
  };
  if (ctx.sessions.weak.size > 0)
    result.warnings.push({
      code: 'LIVE_SESSION_WEAK_BOUND',
      message: `live session ${[...ctx.sessions.weak].sort().join(', ')} judged on its oldest member's start: its tag carries no begin (an older tether drew it) or its supervisor runs in another time namespace whose offset this guard cannot read, so a sign a leftover made before it started a younger member would pass`,
    });
  return { ctx, init };
}

// A child of an init that is not its service: an orphan reparented to the init, said so.
function notTheService(init: InitService | undefined, ppid: number): string {
  if (ppid !== 1 || init === undefined) return '';
  const service = init.by === 'argv' ? init.services[0] : undefined;
  if (service !== undefined) {
    return `a child of PID 1 (${init.name}) that is not its service (pid ${service.pid}, which runs the command ${init.name} was given, ${JSON.stringify(init.command)}): an orphan reparented to the init; `;
  }
  return init.by === 'ambiguous' && init.mark !== undefined
    ? `a child of PID 1 (${init.name}) that ${init.name} did not start (it is not ${init.mark}): an orphan reparented to the init; `
    : '';
}
