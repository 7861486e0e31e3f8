// A stop signal to the command's process group, as timeout(1) sends one (its kill(0, sig) reaches
// what the command started in its group) — but through the session's processes one at a time,
// each identity-checked: never a bare kill(-pgid). tether's command does not lead a group of its
// own: it keeps its caller's, and with it the terminal's foreground (native/helper.c,
// leave_callers_group), so that group also holds tether itself and whatever shares it (the shell
// that ran tether, the rest of a pipeline), none of which the command started.
import { readCmdline } from '../proc/details.js';
import { readEnviron } from '../proc/environ.js';
import { type Identity, readStatOrNone } from '../proc/identity.js';
import { type Snapshot, takeSnapshot } from '../proc/snapshot.js';
import type { ProcStat } from '../proc/stat.js';
import { type CompiledKeep, keepRuleFor } from './keep.js';
import type { Signaller } from './signal.js';

/** A command as it started: its identity and process group, and its helper's identity if any. */
export interface CommandGroup {
  procRoot: string;
  command: Identity;
  /** The command's pgid at its start (used once the command is gone). */
  pgid: number;
  /** The helper that runs it: a subreaper, it adopts every orphan of the command. */
  helper?: Identity;
  /** The session's tag (`entry`, `NAME=1`) and its begin (clock ticks): its carriers are its. */
  carriers?: { entry: string; notBefore: number };
  /** `--keep`: a process whose cmdline matches, and all below it, is never signalled. */
  keep?: readonly CompiledKeep[];
}

/**
 * Reads the command's (and helper's) identity right after its start; undefined when the command
 * cannot be read (gone already, or no fd left): then only the command is signalled.
 */
export function commandGroupOf(
  procRoot: string,
  commandPid: number,
  helperPid?: number,
  carriers?: CommandGroup['carriers'],
  keep?: readonly CompiledKeep[],
): CommandGroup | undefined {
  const stat = readStatOrNone(procRoot, commandPid);
  if (!stat) return undefined;
  const helper = helperPid === undefined ? undefined : readStatOrNone(procRoot, helperPid);
  return {
    procRoot,
    command: { pid: stat.pid, startTime: stat.startTime },
    pgid: stat.pgid,
    ...(helper ? { helper: { pid: helper.pid, startTime: helper.startTime } } : {}),
    ...(carriers ? { carriers } : {}),
    ...(keep?.length ? { keep } : {}),
  };
}

/**
 * Sends `signal` to each process the command started that is in the command's process group:
 * the descendants, by parent, of the command, of its helper (`helperRunning`: its pid is still
 * its own) and of the carriers of the session's tag in that group (`carriers`: an orphan of a
 * command run without the helper), whose pgid is the command's (as the walk shows it, else as at
 * its start), each through `signaller.send` (pidfd, start time re-checked). Never the command
 * itself (its caller signalled it first), its helper, this process, or a process `keep` keeps
 * (nor anything below it, as the sweep keeps them). Returns the identities it
 * was sent to. What left the group (setsid, a job-control shell's jobs) is not reached, as
 * timeout(1)'s kill(0) does not reach it: the sweep ends it. Throws `NoProcError` when the
 * process table cannot be read.
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
  const inGroup = (stat: ProcStat | undefined): stat is ProcStat =>
    stat !== undefined && stat.pid > 1 && !skip.has(stat.pid) && stat.pgid === pgid;
  const sent: Identity[] = [];
  const seen = new Set<number>();
  // Signals one process if it is in the group; false for a kept one (nothing below it either).
  const visit = (stat: ProcStat): boolean => {
    seen.add(stat.pid);
    if (group.keep && keepRuleFor(group.keep, readCmdline(group.procRoot, stat.pid) ?? '')) return false;
    const id = { pid: stat.pid, startTime: stat.startTime };
    if (inGroup(stat) && signaller.send(group.procRoot, id, signal) === 'sent') sent.push(id);
    return true;
  };
  const queue = roots.map((r) => r.pid);
  for (const pid of carriersIn(snapshot, group, inGroup))
    if (visit(snapshot.processes.get(pid) as ProcStat)) queue.push(pid);
  for (let pid = queue.pop(); pid !== undefined; pid = queue.pop()) {
    for (const child of snapshot.children.get(pid) ?? []) {
      const stat = snapshot.processes.get(child);
      if (!seen.has(child) && stat && visit(stat)) queue.push(child);
    }
  }
  return sent;
}

// The pids of the group's processes started since the session began that carry its tag.
function carriersIn(snapshot: Snapshot, group: CommandGroup, inGroup: (s?: ProcStat) => boolean): number[] {
  const carriers = group.carriers;
  if (!carriers) return [];
  const found: number[] = [];
  for (const stat of snapshot.processes.values()) {
    if (!inGroup(stat) || stat.startTime < carriers.notBefore) continue;
    try {
      const r = readEnviron(group.procRoot, stat.pid, stat.state === 'Z');
      if (r.kind === 'ok' && r.entries.includes(carriers.entry)) found.push(stat.pid);
    } catch {
      // EIO, EMFILE: not known to carry it here; the sweep reads it again and says so.
    }
  }
  return found;
}
