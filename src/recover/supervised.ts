// Signs that a session is alive now, whatever its ledger record says: a row can be forged or
// stale (another live session's tag under a dead supervisor's pid, another boot, a kept entry
// naming a live process). Read once per recover run from /proc; evidence for leaving a session
// alone, never for signalling (docs/ledger.md, "Recover").
import { looksLikeHelper } from '../containment/helper.js';
import { isAliveStat, readStat } from '../proc/identity.js';
import { listTaggedProcesses, type TaggedProcess } from '../proc/tagged.js';

/** The live tagged processes of this machine, by tag, and which pids carry any tag. */
export interface LiveTags {
  procRoot: string;
  byTag: Map<string, TaggedProcess[]>;
  byPid: Map<number, TaggedProcess>;
}

/** Reads every live process's environ once (`listTaggedProcesses`). Throws `NoProcError`. */
export function readLiveTags(procRoot = '/proc'): LiveTags {
  const byTag = new Map<string, TaggedProcess[]>();
  const byPid = new Map<number, TaggedProcess>();
  for (const p of listTaggedProcesses(procRoot)) {
    byPid.set(p.pid, p);
    for (const tag of p.tags) {
      const list = byTag.get(tag);
      if (list) list.push(p);
      else byTag.set(tag, [p]);
    }
  }
  return { procRoot, byTag, byPid };
}

/**
 * Why the session `tag` is alive now, or undefined when nothing says so:
 * - recover itself runs in it (its own environ carries the tag);
 * - `otherBoot`: the record says its supervisor ran in an earlier boot, yet a process of this
 *   boot carries the tag (a reboot ends every process: the record is not this session's);
 * - its subreaper helper runs under a live parent that carries no tag and is not PID 1: its
 *   supervisor. (A session without a helper shows no such sign: its command's parent may be
 *   its supervisor or a subreaper it was reparented to, and the two cannot be told apart.)
 */
export function liveSign(
  tag: string,
  live: LiveTags,
  options: { otherBoot?: boolean; exclude?: ReadonlySet<number> } = {},
): string | undefined {
  if (process.env[tag] === '1') return `recover itself runs in session ${tag}`;
  const members = (live.byTag.get(tag) ?? []).filter((p) => !options.exclude?.has(p.pid));
  if (members.length === 0) return undefined;
  if (options.otherBoot)
    return `pid ${members[0]?.pid} of this boot carries its tag, though the record says its supervisor ran in another boot`;
  for (const p of members) {
    // A helper carries its session's tag and exits soon after its supervisor dies (its dead
    // man's switch); a leftover, reparented, may well run under a live subreaper that is no
    // supervisor (systemd --user, a test runner): only a helper's parent is taken as one.
    if (p.ppid <= 1 || live.byPid.has(p.ppid) || !looksLikeHelper(p.comm, p.cmdline.split(' '))) continue;
    const parent = readStat(live.procRoot, p.ppid);
    if (!parent || !isAliveStat(live.procRoot, parent)) continue;
    return `its helper pid ${p.pid} still runs under pid ${p.ppid}: the session is supervised`;
  }
  return undefined;
}
