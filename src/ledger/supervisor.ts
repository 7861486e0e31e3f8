// Who supervises a session (this process, on this machine and boot) and whether a recorded
// supervisor is gone: the question `tether recover` asks of every `running` record.
import { readFileSync } from 'node:fs';
import { identityOf, isAlive } from '../proc/identity.js';
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

/** This process as a session's supervisor: machine and boot ids, pid and start time (clock ticks). */
export function currentSupervisor(): Supervisor {
  const self = identityOf(process.pid);
  if (!self) throw new Error(`cannot read /proc/${process.pid}/stat: is /proc mounted?`);
  return { machineId: machineId(), bootId: bootId(), pid: process.pid, startTime: self.startTime };
}

/** Where `supervisorGone` looks from: this machine and boot, and the time (ms since the epoch). */
export interface Vantage {
  machineId: string;
  bootId: string;
  now: number;
}

/**
 * Whether a record's supervisor is gone, from where this process stands:
 * - same machine and same boot: its pid + start time no longer name a live process;
 * - same machine, another boot: gone (a reboot ended every process of the earlier boot);
 * - another machine, or a machine id unknown ('' on either side: a container sharing the kernel
 *   cannot be told from its host): its lease expired (`leaseUntil < now`); a record without a
 *   lease is never judged gone from elsewhere.
 */
export function supervisorGone(
  record: Pick<SessionRecord, 'supervisor' | 'leaseUntil'>,
  here: Vantage = { machineId: machineId(), bootId: bootId(), now: Date.now() },
): boolean {
  const s = record.supervisor;
  const sameMachine = s.machineId !== '' && s.machineId === here.machineId;
  if (sameMachine && s.bootId === here.bootId) return !isAlive({ pid: s.pid, startTime: s.startTime });
  if (sameMachine) return true;
  return record.leaseUntil !== null && record.leaseUntil < here.now;
}
