// Signs that a session is alive now, whatever its ledger record says: a row can be forged or
// stale (another live session's tag under a dead supervisor's pid, a retry under the same tag
// after a crash, another boot, a kept entry naming a live process). Read once per recover run
// from /proc and the live-session registrations (src/containment/live-session.ts, the one home
// of that evidence); evidence for leaving a session alone, never for signalling
// (docs/ledger.md, "Recover").
import {
  type LiveSign,
  liveSupervisors,
  readSessionRegistrations,
  type SessionView,
  sessionsDir,
  viewSessions,
} from '../containment/live-session.js';
import { takeSnapshot } from '../proc/snapshot.js';

/** What recover saw of this machine's live sessions, read once: the view and each tag's signs. */
export interface LiveTags {
  view: SessionView;
  /** Tag name → the signs of a live supervisor (`liveSupervisors`). */
  signs: Map<string, LiveSign[]>;
}

/**
 * Walks the process table once, reads every environ and the live-session registrations of
 * `registrationsDir` (default `sessionsDir()`). Throws `NoProcError` without a process table.
 */
export function readLiveTags(procRoot = '/proc', registrationsDir = sessionsDir()): LiveTags {
  const view = viewSessions(takeSnapshot(procRoot));
  return { view, signs: liveSupervisors(view, readSessionRegistrations(registrationsDir)) };
}

/**
 * Why the session `tag` is alive now, or undefined when nothing says so:
 * - recover itself runs in it (its own environ carries the tag);
 * - `otherBoot`: the record says its supervisor ran in an earlier boot, yet a process of this
 *   boot carries the tag (a reboot ends every process: the record is not this session's);
 * - a live supervisor of the tag runs on this machine, nested at any depth (`liveSupervisors`:
 *   its helper under it, its registration with its pid + start time alive, or a sandbox
 *   wrapper carrying the tag as an exec entry).
 */
export function liveSign(
  tag: string,
  live: LiveTags,
  options: { otherBoot?: boolean } = {},
): string | undefined {
  if (process.env[tag] === '1') return `recover itself runs in session ${tag}`;
  if (options.otherBoot) {
    for (const [pid, tags] of live.view.carried)
      if (pid !== process.pid && tags.includes(tag))
        return `pid ${pid} of this boot carries its tag, though the record says its supervisor ran in another boot`;
  }
  return live.signs.get(tag)?.[0]?.reason;
}
