// Session cgroups no session will use again, removed by recover (docs/ledger.md, "Recover",
// step 5): an empty `tether-<hex>` directly under `<cgroup2 mount>/tether` whose tag has no live
// session, no running (or parked) row in the ledger recovered, and that is older than a session
// needs to write its first row. What a supervisor killed between making its cgroup and its first
// write leaves behind. Only rmdir(2): a cgroup that holds anything fails EBUSY and stays;
// nothing is ever signalled for this.
import { listSessionCgroups, removeEmptyCgroup } from '../containment/cgroup.js';
import { type LiveTags, readLiveTags } from './supervised.js';

/**
 * How old (ms, by the directory's ctime or mtime, the later) an empty session cgroup must be
 * before recover removes it: 60 000. A session makes its cgroup at its first command, then within
 * milliseconds starts its helper (a sign of life) and writes its begin — a Postgres begin waits at
 * most its connection timeout and one statement deadline (10 s each: "The stores"), well within it.
 */
export const CGROUP_MIN_AGE_MS = 60_000;

/** An empty session cgroup recover removed (`removed`), or would remove in a dry run (`would-remove`). */
export interface RemovedCgroup {
  path: string;
  /** The tag its name carries (`TETHER_SESSION_<hex>`). */
  tag: string;
  outcome: 'removed' | 'would-remove';
  /** Its age when removed: now less its ctime or mtime, the later (ms). */
  ageMs: number;
}

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
 * sandbox wrapper). Each is removed with rmdir(2) alone; one that fails (EBUSY: it was joined or
 * given a child meanwhile; ENOENT: another remover) is left and not listed. Returns those removed
 * (or that a dry run would remove), oldest first. Throws `NoProcError` when `live` must be read
 * and there is no process table.
 */
export function removeStaleCgroups(options: StaleCgroupOptions = {}): RemovedCgroup[] {
  const procRoot = options.procRoot ?? '/proc';
  const now = options.now ?? Date.now();
  const minAgeMs = options.minAgeMs ?? CGROUP_MIN_AGE_MS;
  const candidates = listSessionCgroups(procRoot).filter(
    (c) => c.populated === false && now - c.changedMs >= minAgeMs && !options.open?.has(c.tag),
  );
  if (candidates.length === 0) return [];
  const live = options.live ?? readLiveTags(procRoot);
  const carried = new Set<string>();
  for (const tags of live.view.carried.values()) for (const tag of tags) carried.add(tag);
  const removed: RemovedCgroup[] = [];
  for (const c of candidates.sort((a, b) => a.changedMs - b.changedMs)) {
    if (carried.has(c.tag) || live.signs.has(c.tag) || process.env[c.tag] === '1') continue;
    const ageMs = Math.round(now - c.changedMs);
    if (options.dryRun) removed.push({ path: c.path, tag: c.tag, outcome: 'would-remove', ageMs });
    else if (removeEmptyCgroup(c.path) === undefined)
      removed.push({ path: c.path, tag: c.tag, outcome: 'removed', ageMs });
  }
  return removed;
}
