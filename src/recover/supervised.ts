// A local session whose subreaper helper still runs under a live parent is supervised, whatever
// its ledger record says: that parent is its supervisor (a helper whose supervisor died runs its
// dead man's switch and exits). A record can be forged or stale — another live session's tag
// under a dead supervisor's pid — and recover must not sweep a session someone still runs.
// Evidence for leaving a session alone, never for signalling (docs/ledger.md, "Recover").
import { looksLikeHelper } from '../containment/helper.js';
import { readCmdline } from '../proc/details.js';
import { readEnviron } from '../proc/environ.js';
import { takeSnapshot } from '../proc/snapshot.js';

/** A helper of the session and the live process it runs under (pids). */
export interface LiveHelper {
  helper: number;
  parent: number;
}

/**
 * The first helper process (`looksLikeHelper`: its comm and argv) whose environ carries
 * `TAG=1` and whose parent is alive and not PID 1, or undefined. Reads `procRoot`'s stat of
 * every process, and the cmdline and environ of those named `tether-helper` only.
 */
export function liveHelperOf(tag: string, procRoot = '/proc'): LiveHelper | undefined {
  const entry = `${tag}=1`;
  const { processes } = takeSnapshot(procRoot);
  for (const stat of processes.values()) {
    if (stat.ppid <= 1 || stat.state === 'Z' || stat.state === 'X') continue;
    const argv = readCmdline(procRoot, stat.pid)?.split(' ') ?? [];
    if (!looksLikeHelper(stat.comm, argv)) continue;
    const parent = processes.get(stat.ppid);
    if (!parent || parent.state === 'Z' || parent.state === 'X') continue;
    const environ = readEnviron(procRoot, stat.pid, false);
    if (environ.kind === 'ok' && environ.entries.includes(entry))
      return { helper: stat.pid, parent: stat.ppid };
  }
  return undefined;
}
