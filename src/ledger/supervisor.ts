// Who supervises a session (this process, on this machine and boot) and whether a recorded
// supervisor is gone: the question `tether recover` asks of every `running` record.
import { readFileSync, statSync } from 'node:fs';
import { isAlive, selfIdentity } from '../proc/identity.js';
import { nativeFiles } from '../proc/native-files.js';
import type { SessionRecord, Supervisor } from './types.js';

const MACHINE_ID_FILES = ['/etc/machine-id', '/var/lib/dbus/machine-id'];
const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';

function firstLine(path: string): string {
  try {
    return readFileSync(path, 'latin1').trim();
  } catch {
    return '';
  }
}

/** This machine's id (machine-id(5)), '' when neither file exists. */
export function machineId(): string {
  for (const file of MACHINE_ID_FILES) {
    const id = firstLine(file);
    if (/^[0-9a-f]{32}$/.test(id)) return id;
  }
  return '';
}

/** This boot's id (random per boot, proc(5) `random/boot_id`). */
export function bootId(): string {
  return firstLine(BOOT_ID_FILE);
}

/**
 * This process's PID namespace: the inode number of `/proc/self/ns/pid` (namespaces(7): two
 * processes are in the same namespace exactly when these inodes, on the same nsfs, are equal).
 * Undefined when it cannot be read (no /proc, a kernel without the file).
 */
export function pidNamespace(): number | undefined {
  try {
    return statSync('/proc/self/ns/pid').ino;
  } catch {
    return undefined;
  }
}

/**
 * This process as a session's supervisor: machine and boot ids, PID namespace, pid and start
 * time (clock ticks).
 */
export function currentSupervisor(): Supervisor {
  const self = selfIdentity();
  // The same reads in one native call when the library is there (native/spool.c `tp_host`).
  const host = nativeFiles()?.host() ?? {
    machineId: machineId(),
    bootId: bootId(),
    pidNamespace: pidNamespace(),
  };
  const ns = host.pidNamespace;
  return {
    machineId: host.machineId,
    bootId: host.bootId,
    ...(ns === undefined ? {} : { pidNamespace: ns }),
    pid: process.pid,
    startTime: self.startTime,
  };
}

/**
 * Where `supervisorGone` looks from: this machine, boot and PID namespace (undefined: unknown),
 * and the time (ms since the epoch).
 */
export interface Vantage {
  machineId: string;
  bootId: string;
  pidNamespace?: number | undefined;
  now: number;
}

/** This process's vantage, now. */
export function currentVantage(now = Date.now()): Vantage {
  return { machineId: machineId(), bootId: bootId(), pidNamespace: pidNamespace(), now };
}

/**
 * Whether a recorded pid + start time can be checked from `here`: the machine id (known),
 * the boot id and the PID namespace (known) are all the same. Else a pid names another
 * process table, or nothing that can be told apart.
 */
export function samePidSpace(s: Supervisor, here: Vantage): boolean {
  return (
    s.machineId !== '' &&
    s.machineId === here.machineId &&
    s.bootId === here.bootId &&
    s.pidNamespace !== undefined &&
    s.pidNamespace === here.pidNamespace
  );
}

/**
 * Why a record's supervisor is judged alive or gone from `here` (see `supervisorGone`).
 * `by`: `pid` (its pid + start time checked), `boot` (another boot of this machine), `lease`
 * (its lease, the only evidence from here), `none` (no lease, and its pid cannot be checked:
 * left alone). `why` says it in a sentence, for a session recover leaves alone.
 */
export function judgeSupervisor(
  record: Pick<SessionRecord, 'supervisor' | 'leaseUntil'>,
  here: Vantage = currentVantage(),
): { gone: boolean; by: 'pid' | 'boot' | 'lease' | 'none'; why: string } {
  const s = record.supervisor;
  const sameMachine = s.machineId !== '' && s.machineId === here.machineId;
  if (sameMachine && s.bootId !== here.bootId)
    return { gone: true, by: 'boot', why: 'it ran in an earlier boot of this machine' };
  if (samePidSpace(s, here)) {
    const gone = !isAlive({ pid: s.pid, startTime: s.startTime });
    return { gone, by: 'pid', why: `its supervisor pid ${s.pid} ${gone ? 'is gone' : 'is alive'}` };
  }
  if (record.leaseUntil !== null) {
    const gone = record.leaseUntil < here.now;
    return { gone, by: 'lease', why: `its supervisor's lease ${gone ? 'expired' : 'holds'}` };
  }
  const where = !sameMachine
    ? s.machineId === '' || here.machineId === ''
      ? 'a machine whose id is unknown'
      : `machine ${s.machineId}`
    : s.pidNamespace === undefined
      ? 'a PID namespace it did not record (an older tether)'
      : here.pidNamespace === undefined
        ? `PID namespace ${s.pidNamespace} (this one's is unknown)`
        : `another PID namespace (${s.pidNamespace}; this one is ${here.pidNamespace})`;
  return {
    gone: false,
    by: 'none',
    why: `its supervisor ran in ${where}: its pid ${s.pid} cannot be checked from here and it holds no lease; run tether recover where it ran`,
  };
}

/**
 * Whether a record's supervisor is gone, from where this process stands:
 * - same machine, same boot and same PID namespace: its pid + start time no longer name a
 *   live process;
 * - same machine, another boot: gone (a reboot ended every process of the earlier boot);
 * - anything else — another machine, a machine id unknown ('' on either side), another PID
 *   namespace (a container sharing the kernel and the machine id: its pid 1 is not ours), or
 *   a record without `pidNamespace` (an older tether): its lease expired (`leaseUntil < now`);
 *   a record without a lease is never judged gone from there.
 */
export function supervisorGone(
  record: Pick<SessionRecord, 'supervisor' | 'leaseUntil'>,
  here: Vantage = currentVantage(),
): boolean {
  return judgeSupervisor(record, here).gone;
}
