// Session cgroups no session will use again: an empty `tether-<hex>` whose tag no session
// claims, older than a session needs to write its first row. What a supervisor killed between
// making its cgroup and its first write leaves behind (a few in a hundred supervisors SIGKILLed
// at random moments). Removed by `tether recover` (src/recover/cgroups.ts: under
// `<cgroup2 mount>/tether`, the ledger's open rows claiming too) and by a guard tick (src/guard/tick.ts: under its target), each with its own
// evidence of who claims a tag; the rule and the removal are here, once. Only rmdir(2): a cgroup
// that holds anything fails EBUSY and stays; nothing is ever signalled for this.
import { join } from 'node:path';
import {
  isSessionCgroupName,
  removeEmptyCgroup,
  type SessionCgroupEntry,
  sessionCgroupEntry,
  subdirs,
} from '../proc/cgroup.js';

/**
 * How old (ms, by the directory's ctime or mtime, the later) an empty session cgroup must be
 * before it is removed: 60 000. A session makes its cgroup at its first command, then within
 * milliseconds starts its helper (a sign of life) and writes its begin — a Postgres begin waits at
 * most its connection timeout and one statement deadline (10 s each: docs/ledger.md, "The
 * stores"), well within it.
 */
export const CGROUP_MIN_AGE_MS = 60_000;

/** An empty session cgroup removed (`removed`), or that a dry run would remove (`would-remove`). */
export interface RemovedCgroup {
  path: string;
  /** The tag its name carries (`TETHER_SESSION_<hex>`). */
  tag: string;
  outcome: 'removed' | 'would-remove';
  /** Its age when removed: now less its ctime or mtime, the later (ms). */
  ageMs: number;
}

/** Options of `removeUnclaimedCgroups`. Durations in milliseconds. */
export interface UnclaimedCgroupOptions {
  /**
   * Whether a session claims `tag` (its cgroup is left): asked only of the empty cgroups old
   * enough, so the caller may read its evidence lazily. The caller's own tag is claimed whatever
   * this says.
   */
  claimed: (tag: string) => boolean;
  /** Remove nothing: name what would be removed. */
  dryRun?: boolean;
  /** The age a cgroup must reach (CGROUP_MIN_AGE_MS by default). */
  minAgeMs?: number;
  /** Milliseconds since the epoch taken as now. Default `Date.now()`. */
  now?: number;
}

/**
 * Removes each of `entries` that is empty (`populated` false: the kernel's word, never a guess),
 * at least `minAgeMs` old, and whose tag is not `claimed` (nor this process's own session's).
 * Deepest first (a nested session's cgroup before the one that holds it), then oldest first. Each
 * is removed with rmdir(2) alone; one that fails (EBUSY: joined or given a child meanwhile;
 * ENOENT: another remover) is left and not listed. Returns those removed, or those a dry run
 * would remove.
 */
export function removeUnclaimedCgroups(
  entries: readonly SessionCgroupEntry[],
  options: UnclaimedCgroupOptions,
): RemovedCgroup[] {
  const now = options.now ?? Date.now();
  const minAgeMs = options.minAgeMs ?? CGROUP_MIN_AGE_MS;
  const depth = (path: string) => path.split('/').length;
  const candidates = entries
    .filter((c) => c.populated === false && now - c.changedMs >= minAgeMs)
    .sort((a, b) => depth(b.path) - depth(a.path) || a.changedMs - b.changedMs);
  const removed: RemovedCgroup[] = [];
  for (const c of candidates) {
    if (process.env[c.tag] === '1' || options.claimed(c.tag)) continue;
    const ageMs = Math.round(now - c.changedMs);
    if (options.dryRun) removed.push({ path: c.path, tag: c.tag, outcome: 'would-remove', ageMs });
    else if (removeEmptyCgroup(c.path) === undefined)
      removed.push({ path: c.path, tag: c.tag, outcome: 'removed', ageMs });
  }
  return removed;
}

/**
 * Every session cgroup (`tether-<hex>`) at any depth below the cgroup directory `dir` (not `dir`
 * itself), nested sessions' included, with its age and whether it is populated. Empty when there
 * is none or `dir` cannot be read. Throws nothing.
 */
export function sessionCgroupsBelow(dir: string): SessionCgroupEntry[] {
  const found: SessionCgroupEntry[] = [];
  const visit = (parent: string) => {
    for (const name of subdirs(parent)) {
      const path = join(parent, name);
      if (isSessionCgroupName(name)) {
        const entry = sessionCgroupEntry(path);
        if (entry) found.push(entry);
      }
      visit(path);
    }
  };
  visit(dir);
  return found;
}
