// How one orphaned session is reached: locally (its tag, its leftover cgroup, its unexpired
// kept processes spared), through its recorded exec channel, or not at all from here (parked).
import { realpathSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, normalize } from 'node:path';
import { cgroup2Mount, cgroupName, findSessionCgroup } from '../containment/cgroup.js';
import { machineId } from '../ledger/supervisor.js';
import type { SessionRecord } from '../ledger/types.js';
import type { SessionCgroup } from '../proc/cgroup.js';
import { pathExists } from '../proc/cgroup.js';

/** The directories a channel's program may be named in by path without `--allow-channel`. */
export const SYSTEM_BIN_DIRS: readonly string[] = [
  '/usr/bin',
  '/bin',
  '/usr/sbin',
  '/sbin',
  '/usr/local/bin',
  '/usr/local/sbin',
];

/**
 * Whether recover may run a channel whose argv[0] is `argv0`: a bare name (found on recover's
 * own PATH) among the default clients or the bare names allowed; a path in a system bin
 * directory whose name is one of those; or exactly a path given in `allowed`. A path
 * elsewhere (`/tmp/x/kubectl`) is never taken for a client by its name alone.
 */
export function channelAllowed(argv0: string, allowed: readonly string[]): boolean {
  const names = new Set([...DEFAULT_CHANNEL_CLIENTS, ...allowed.filter((a) => !a.includes('/'))]);
  if (!argv0.includes('/')) return names.has(argv0);
  const path = normalize(argv0);
  if (allowed.some((a) => a.includes('/') && normalize(a) === path)) return true;
  return isAbsolute(path) && SYSTEM_BIN_DIRS.includes(dirname(path)) && names.has(basename(path));
}

/**
 * The exec clients recover runs from a ledger record without being told to
 * (docs/ledger.md, "Trust"): container and machine clients whose job is to run a command
 * elsewhere. Any other program named as a session's channel is run only when given with
 * `tether recover --allow-channel PROG` / `recover({ allowChannels })` (`channelAllowed`).
 */
export const DEFAULT_CHANNEL_CLIENTS: readonly string[] = [
  'kubectl',
  'docker',
  'podman',
  'nerdctl',
  'crictl',
  'nsenter',
  'ssh',
  'lxc',
  'incus',
  'machinectl',
];

/** One session's way in. `notes`: what the plan refused from the record (said in the outcome). */
export type Plan =
  | {
      kind: 'local';
      record: SessionRecord;
      where: string;
      cgroup?: SessionCgroup;
      notes: string[];
      dryRun: string;
    }
  | { kind: 'sandbox'; record: SessionRecord; where: string; channel: string[]; dryRun: string }
  | { kind: 'unreachable'; record: SessionRecord; where: string; reason: string; dryRun: string };

/** What `planOf` needs besides the record. */
export interface PlanSettings {
  procRoot?: string;
  /** Exec clients run besides `DEFAULT_CHANNEL_CLIENTS` (basenames, or paths: their basename counts). */
  allowChannels?: readonly string[];
}

/**
 * The plan for `record`. A local session of another machine or boot cannot be swept from here:
 * another machine's processes are not in this /proc (unreachable: parked, named); after a
 * reboot of this one, nothing it started can still run, and a sweep by tag proves it. A sandbox
 * session whose channel's program is not an allowed exec client is parked, not run.
 */
export function planOf(record: SessionRecord, settings: PlanSettings = {}): Plan {
  const procRoot = settings.procRoot ?? '/proc';
  const { location } = record;
  if (location.kind === 'sandbox') {
    const where = location.channel.join(' ');
    if (location.channel.length === 0)
      return {
        kind: 'unreachable',
        record,
        where: '(no channel recorded)',
        reason: 'its exec channel was not recorded as argv: recover cannot rebuild it',
        dryRun: 'would park it: no channel recorded',
      };
    const argv0 = String(location.channel[0]);
    const program = basename(argv0);
    if (!channelAllowed(argv0, settings.allowChannels ?? []))
      return {
        kind: 'unreachable',
        record,
        where,
        reason: `its recorded channel runs ${JSON.stringify(argv0)}, which is not an allowed exec client (${DEFAULT_CHANNEL_CLIENTS.join(', ')}, by name or in ${SYSTEM_BIN_DIRS.join(', ')}): recover runs it only with --allow-channel ${argv0.includes('/') ? argv0 : program}`,
        dryRun: `would park it: its channel program ${JSON.stringify(argv0)} is not allowed (--allow-channel ${argv0.includes('/') ? argv0 : program})`,
      };
    return {
      kind: 'sandbox',
      record,
      where,
      channel: location.channel,
      dryRun: `would sweep through ${where}`,
    };
  }
  const machine = machineId();
  const { supervisor } = record;
  if (supervisor.machineId !== '' && machine !== '' && supervisor.machineId !== machine)
    return {
      kind: 'unreachable',
      record,
      where: `local to machine ${supervisor.machineId}`,
      reason: `it ran on machine ${supervisor.machineId}, not this one (${machine}): run tether recover there`,
      dryRun: `would park it: it ran on machine ${supervisor.machineId}`,
    };
  const notes: string[] = [];
  const cgroup = leftoverCgroup(record, procRoot, notes);
  return {
    kind: 'local',
    record,
    where: 'local',
    ...(cgroup ? { cgroup } : {}),
    notes,
    dryRun: [
      `would sweep ${record.tag} here${cgroup ? ` and its cgroup ${cgroup.path}` : ''}`,
      ...notes,
    ].join('; '),
  };
}

/**
 * The session's cgroup if one is left. A path its reports recorded is taken only when it is
 * this tag's session cgroup: realpath'd, named `tether-<the tag's hex>` and directly under
 * `<cgroup2 mount>/tether` (src/containment/cgroup.ts). A record is no proof of what a path
 * holds — a forged or stale one could name any cgroup, whose processes would all be killed —
 * so any other path is ignored (said in `notes`), and the cgroup is looked for by its name.
 */
function leftoverCgroup(record: SessionRecord, procRoot: string, notes: string[]): SessionCgroup | undefined {
  const mount = cgroup2Mount(procRoot);
  const name = cgroupName(record.tag);
  let parent: string | undefined;
  try {
    parent = mount === undefined ? undefined : realpathSync(join(mount, 'tether'));
  } catch {
    parent = undefined; // no tether parent: no recorded path can be under it
  }
  const refused = new Map<string, string>(); // recorded path → its realpath
  for (const report of record.reports) {
    const path = report?.cgroup;
    if (typeof path !== 'string' || path === '') continue;
    let real: string;
    try {
      real = realpathSync(path);
    } catch {
      continue; // gone: nothing left there
    }
    if (parent !== undefined && basename(real) === name && dirname(real) === parent)
      return { path: real, canKill: pathExists(join(real, 'cgroup.kill')) };
    refused.set(path, real);
  }
  const found = findSessionCgroup(record.tag, procRoot);
  // A nested or delegated session's own cgroup is found by name: the same directory, no note.
  const foundReal = found && realOrSelf(found.path);
  for (const [path, real] of refused)
    if (real !== foundReal)
      notes.push(
        `the recorded cgroup ${path} is not this session's (${parent ?? '<cgroup2 mount>/tether'}/${name}): ignored`,
      );
  return found;
}

function realOrSelf(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}
