// Whether the command of a session ran privileged: with CAP_SYS_ADMIN in its effective set, as
// root has (in most containers too). Such a payload can leave every layer unseen (another PID
// namespace, another cgroup), so its report names that blind spot (PRIVILEGED_BLIND_SPOT,
// docs/containment.md, "What escapes this").
import { readFileSync } from 'node:fs';
import { PRIVILEGED_BLIND_SPOT } from './report.js';

/** CAP_SYS_ADMIN's bit in a capability set (linux/capability.h). */
const CAP_SYS_ADMIN = 21n;

/**
 * Whether the process whose `status` file (proc(5): `/proc/<pid>/status`) is at `statusPath`
 * holds CAP_SYS_ADMIN in its effective set (`CapEff`, hex). Undefined when the file cannot be
 * read or holds no such line (procfs not mounted, the process gone).
 */
export function holdsSysAdmin(statusPath: string): boolean | undefined {
  let text: string;
  try {
    text = readFileSync(statusPath, 'latin1');
  } catch {
    return undefined;
  }
  const hex = /^CapEff:\s*([0-9a-fA-F]+)$/m.exec(text)?.[1];
  if (hex === undefined) return undefined;
  return ((BigInt(`0x${hex}`) >> CAP_SYS_ADMIN) & 1n) === 1n;
}

/**
 * The blind spots of a session whose commands this process starts with its own credentials
 * (tether changes no uid and no capability for them: each command starts with this process's
 * effective capabilities): `[PRIVILEGED_BLIND_SPOT]` when this process holds CAP_SYS_ADMIN, or
 * when that cannot be read (`procRoot`/self/status unreadable: not shown, not excluded); else
 * none. `procRoot` defaults to `/proc`.
 */
export function privilegedBlindSpots(procRoot = '/proc'): string[] {
  return holdsSysAdmin(`${procRoot}/self/status`) === false ? [] : [PRIVILEGED_BLIND_SPOT];
}
