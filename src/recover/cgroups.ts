// Session cgroups no session will use again, removed by recover (docs/ledger.md, "Recover",
// step 5): an empty `tether-<hex>` directly under `<cgroup2 mount>/tether` whose tag has no live
// session, no running (or parked) row in the ledger recovered, and that is older than a session
// needs to write its first row. The rule and the removal (rmdir(2) alone, nothing signalled) are
// src/containment/stale-cgroups.ts', shared with the guard; what claims a tag is recover's here.

import { type RemovedCgroup, removeUnclaimedCgroups } from '../containment/stale-cgroups.js';
import { listSessionCgroups } from '../proc/cgroup.js';
import { type LiveTags, readLiveTags } from './supervised.js';

/** Options of `removeStaleCgroups`. Durations in milliseconds. */
export interface StaleCgroupOptions {
  /** Tags of the ledger's running or parked rows: their cgroups are left. Default none. */
  open?: ReadonlySet<string>;
  /** The live sessions (`readLiveTags`); read now when not given. */
  live?: LiveTags;
  /** Remove nothing: name what would be removed. */
  dryRun?: boolean;
  /** The age a cgroup must reach (CGROUP_MIN_AGE_MS by default). */
  minAgeMs?: number;
  /** Milliseconds since the epoch taken as now. Default `Date.now()`. */
  now?: number;
  procRoot?: string;
}

/**
 * Removes every session cgroup directly under `<cgroup2 mount>/tether` that is empty (its
 * `cgroup.events` says `populated 0`), at least `minAgeMs` old, whose tag is not in `open`, and
 * that no live session claims: no live process carries the tag, recover does not run in it, and
 * no sign of a live supervisor of it is seen (`liveSupervisors`: a helper, a held registration, a
 * sandbox wrapper) — the rule and the removal are `removeUnclaimedCgroups`'. Returns those
 * removed (or that a dry run would remove), oldest first. Throws `NoProcError` when `live` must
 * be read and there is no process table.
 */
export function removeStaleCgroups(options: StaleCgroupOptions = {}): RemovedCgroup[] {
  const procRoot = options.procRoot ?? '/proc';
  // Read only when some cgroup is empty and old enough: most runs have none.
  let claimedTags: Set<string> | undefined;
  const claimed = (tag: string) => {
    if (options.open?.has(tag)) return true;
    if (claimedTags === undefined) {
      const live = options.live ?? readLiveTags(procRoot);
      claimedTags = new Set(live.signs.keys());
      for (const tags of live.view.carried.values()) for (const t of tags) claimedTags.add(t);
    }
    return claimedTags.has(tag);
  };
  return removeUnclaimedCgroups(listSessionCgroups(procRoot), {
    claimed,
    ...(options.dryRun === undefined ? {} : { dryRun: options.dryRun }),
    ...(options.minAgeMs === undefined ? {} : { minAgeMs: options.minAgeMs }),
    ...(options.now === undefined ? {} : { now: options.now }),
  });
}
