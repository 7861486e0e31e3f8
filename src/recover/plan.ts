// How one orphaned session is reached: locally (its tag, its leftover cgroup, its unexpired
// kept processes spared), through its recorded exec channel, or not at all from here (parked).
import { realpathSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { channelMacVerifies } from '../ledger/channel-key.js';
import { machineId } from '../ledger/supervisor.js';
import type { SessionRecord } from '../ledger/types.js';
import {
  cgroup2Mount,
  cgroupName,
  findSessionCgroup,
  pathExists,
  type SessionCgroup,
} from '../proc/cgroup.js';

/**
 * What recover trusts a recorded sandbox channel by (docs/ledger.md, "Trust"): its MAC, made by
 * `Ledger.begin` with this user's channel key over (tag, channel argv, machine id), verified with
 * `key` and this machine's id; or its argv equal, word for word, to one of `allowed` (the
 * operator's `--allow-channel` prefixes and the lines of the channels file). Nothing else: a
 * row's text is never run because of what it says.
 */
export interface ChannelTrust {
  /** This user's channel key, or undefined when there is none (or it was refused: `keyProblem`). */
  key?: Buffer;
  /** Where the key is looked for, for messages. */
  keyPath: string;
  /** Why the key could not be used (a file of mode 0644, another owner…), when it could not. */
  keyProblem?: string;
  /** This machine's id ('' when unknown: then no MAC verifies). */
  machineId: string;
  /** Channel prefixes the operator allowed, each an argv. */
  allowed: readonly (readonly string[])[];
  /** The channels file `allowed` was read from too, if any, for messages. */
  channelsFile?: string;
}

/**
 * Whether recover may run `channel`, the recorded channel of session `tag` whose location says
 * `mac`: `{ by: 'allowed' }` when the argv equals an allowed prefix word for word, `{ by: 'mac' }`
 * when its MAC verifies, else `{ refused }` saying why (no MAC, no key, another key or machine,
 * an edited row).
 */
export function trustChannel(
  tag: string,
  channel: readonly string[],
  mac: string | undefined,
  trust: ChannelTrust,
): { by: 'allowed' | 'mac' } | { refused: string } {
  if (trust.allowed.some((a) => a.length === channel.length && a.every((w, i) => w === channel[i])))
    return { by: 'allowed' };
  if (mac === undefined)
    return {
      refused:
        'it carries no MAC (recorded by an older tether, on a machine without a machine id, or written by hand)',
    };
  if (trust.keyProblem) return { refused: `its MAC cannot be checked: ${trust.keyProblem}` };
  if (!trust.key)
    return { refused: `its MAC cannot be checked: this user has no channel key (${trust.keyPath})` };
  if (trust.machineId === '') return { refused: "its MAC cannot be checked: this machine's id is unknown" };
  if (!channelMacVerifies(trust.key, tag, channel, trust.machineId, mac))
    return {
      refused: `its MAC does not verify with this machine's channel key (${trust.keyPath}): it was recorded on another machine or by another user, or the row was changed since`,
    };
  return { by: 'mac' };
}

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
  /** How a sandbox record's channel is trusted; without it, no channel runs (every one is parked). */
  trust?: ChannelTrust;
}

/**
 * The plan for `record`. A local session of another machine or boot cannot be swept from here:
 * another machine's processes are not in this /proc (unreachable: parked, named); after a
 * reboot of this one, nothing it started can still run, and a sweep by tag proves it. A sandbox
 * session whose channel is not trusted (`trustChannel`: its MAC verifies, or it is allowed word
 * for word) is parked, not run, the reason named.
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
    const trusted = settings.trust
      ? trustChannel(record.tag, location.channel, location.mac, settings.trust)
      : { refused: 'no channel is trusted here' };
    if ('refused' in trusted) {
      const allow = `--allow-channel ${quoteWords(location.channel)}`;
      const file = settings.trust?.channelsFile;
      return {
        kind: 'unreachable',
        record,
        where,
        reason: `its recorded channel is not run: ${trusted.refused}; recover runs it only when allowed word for word: ${allow}${file ? `, or that line in ${file}` : ''}`,
        dryRun: `would park it: its channel is not trusted (${trusted.refused}; ${allow})`,
      };
    }
    return {
      kind: 'sandbox',
      record,
      where,
      channel: location.channel,
      dryRun: `would sweep through ${where} (${trusted.by === 'mac' ? 'its MAC verifies' : 'allowed'})`,
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
 * `<cgroup2 mount>/tether` (src/proc/cgroup.ts). A record is no proof of what a path
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

/**
 * argv as the value of `--allow-channel` for a POSIX shell: each word single-quoted when it is
 * not plain (read back by the CLI's word splitter), the whole in double quotes.
 */
export function quoteWords(argv: readonly string[]): string {
  const word = (w: string) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replaceAll("'", "'\\''")}'`);
  return `"${argv
    .map(word)
    .join(' ')
    .replace(/["$`\\]/g, '\\$&')}"`;
}
