// A stop signal to the command's process group, as timeout(1) sends one (its kill(0, sig) reaches
// what the command started in its group) — but through the session's processes one at a time,
// each identity-checked: never a bare kill(-pgid). tether's command does not lead a group of its
// own: it keeps its caller's, and with it the terminal's foreground (native/helper.c,
// leave_callers_group), so that group also holds tether itself and whatever shares it (the shell
// that ran tether, the rest of a pipeline), none of which the command started.
import { type Identity, readStat } from '../proc/identity.js';
import { takeSnapshot } from '../proc/snapshot.js';
import type { Signaller } from './signal.js';

/** A command as it started: its identity and process group, and its helper's identity if any. */
export interface CommandGroup {
  procRoot: string;
  command: Identity;
  /** The command's pgid at its start (used once the command is gone). */
  pgid: number;
  /** The helper that runs it: a subreaper, it adopts every orphan of the command. */
  helper?: Identity;
}

/**
 * Reads the command's (and helper's) identity right after its start; undefined when the command
 * cannot be read (gone already, or no fd left): then only the command is signalled.
 */
export function commandGroupOf(
  procRoot: string,
  commandPid: number,
  helperPid?: number,
): CommandGroup | undefined {
  const stat = statOrNone(procRoot, commandPid);
  if (!stat) return undefined;
  const helper = helperPid === undefined ? undefined : statOrNone(procRoot, helperPid);
  return {
    procRoot,
    command: { pid: stat.pid, startTime: stat.startTime },
    pgid: stat.pgid,
    ...(helper ? { helper: { pid: helper.pid, startTime: helper.startTime } } : {}),
  };
}

/**
 * Sends `signal` to each process the command started that is in the command's process group:
 * the descendants, by parent, of the command and of its helper (`helperRunning`: its pid is still
 * its own) whose pgid is the command's (as the walk shows it, else as at its start), each through
 * `signaller.send` (pidfd, start time re-checked). Never the command itself (its caller signalled
 * it first), its helper, or this process. Returns the identities it was sent to. What left the
 * group (setsid, a job-control shell's jobs) is not reached, as timeout(1)'s kill(0) does not
 * reach it: the sweep ends it. Throws `NoProcError` when the process table cannot be read.
 */
export function signalCommandGroup(
  group: CommandGroup,
  signal: NodeJS.Signals | number,
  signaller: Signaller,
  helperRunning: boolean,
): Identity[] {
  const snapshot = takeSnapshot(group.procRoot);
  const same = (id: Identity) => snapshot.processes.get(id.pid)?.startTime === id.startTime;
  const roots = [group.command, ...(group.helper && helperRunning ? [group.helper] : [])].filter(same);
  const pgid = same(group.command)
    ? (snapshot.processes.get(group.command.pid)?.pgid ?? group.pgid)
    : group.pgid;
  const skip = new Set([process.pid, ...roots.map((r) => r.pid)]);
  const sent: Identity[] = [];
  const seen = new Set<number>();
  const queue = roots.map((r) => r.pid);
  for (let pid = queue.pop(); pid !== undefined; pid = queue.pop()) {
    for (const child of snapshot.children.get(pid) ?? []) {
      if (seen.has(child)) continue;
      seen.add(child);
      queue.push(child);
      const stat = snapshot.processes.get(child);
      if (!stat || stat.pid <= 1 || skip.has(child) || stat.pgid !== pgid) continue;
      const id = { pid: child, startTime: stat.startTime };
      if (signaller.send(group.procRoot, id, signal) === 'sent') sent.push(id);
    }
  }
  return sent;
}

// The stat of `pid`, or undefined when it is gone or cannot be read.
function statOrNone(procRoot: string, pid: number) {
  try {
    return readStat(procRoot, pid);
  } catch {
    return undefined;
  }
}
