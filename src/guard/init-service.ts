// The main service of a container's init (docs/guard.md, "The init's service"). In the most
// common container layout (`docker run --init`, `ENTRYPOINT ["tini", "--"]`) PID 1 is an init
// that runs one command — tini, docker-init, dumb-init, catatonit — and the service is its
// child: its parent is PID 1, as every orphan's is. Stopping it stops the init, and the container
// ends. So when PID 1 is such an init, known by evidence (its executable, or its comm when the
// executable's link cannot be read), the command it started — its first child by start time,
// which no orphan can precede: every orphan descends from that command or from a later exec
// entry — is spared with its descendants (rule `init-service`). An s6-svscan PID 1 runs one
// s6-supervise per service: each is spared with its service. A renamed init is not known: its
// service is not spared (`--protect` it).
import { readFileSync, readlinkSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Identity } from '../proc/identity.js';
import type { Snapshot } from '../proc/snapshot.js';
import type { ProcStat } from '../proc/stat.js';

/** The inits whose service is spared, by name. */
export type InitName = 'tini' | 'docker-init' | 'dumb-init' | 'catatonit' | 's6-svscan' | 'tether-guard';

/**
 * PID 1 as the rule saw it: which init (`name`), the evidence (`exe=/usr/bin/tini`, or
 * `comm=tini` when the link could not be read), and the services it spares (pid + start time in
 * clock ticks since boot). `services` may be empty (no child yet, or catatonit `-P`).
 */
export interface InitService {
  name: InitName;
  evidence: string;
  services: Identity[];
}

// An executable's or comm's name → the init it is. tini's static builds are tini-static and
// tini-static-<arch> (their comm cut at 15 bytes); docker's `--init` binds tini as docker-init.
function initNamed(name: string): InitName | undefined {
  if (/^tini(-static(-[\w-]*)?)?$/.test(name)) return 'tini';
  if (name === 'docker-init') return 'docker-init';
  if (name === 'dumb-init') return 'dumb-init';
  if (name === 'catatonit') return 'catatonit';
  if (name === 's6-svscan') return 's6-svscan';
  return undefined;
}

// `node …/tether guard … -- CMD`: the guard as init (src/guard/init.ts), started from its bin.
// Node's own flags (`--enable-source-maps`) may come before the script.
function isTetherGuardInit(argv: readonly string[]): boolean {
  const at = argv.findIndex((a, i) => i > 0 && !a.startsWith('-'));
  if (at < 0 || !/^tether(\.c?js)?$/.test(basename(argv[at] as string)) || argv[at + 1] !== 'guard')
    return false;
  const dashes = argv.indexOf('--', at + 2);
  return dashes > 0 && dashes < argv.length - 1;
}

/**
 * Identifies PID 1 of `snapshot` and, when it is an init that runs a command, its services:
 * - tini, docker-init, dumb-init, catatonit (not `-P`, which runs none), and a tether guard as
 *   init (`tether guard -- CMD`): the child of PID 1 with the earliest start time (all of them
 *   on a tie: children started in the same clock tick cannot be told apart);
 * - s6-svscan: each child of PID 1 that is an s6-supervise (by executable, else comm).
 * PID 1 is known by its executable (`/proc/1/exe`) when that link can be read, else by its comm;
 * undefined when it is none of these (or gone).
 */
export function findInitService(snapshot: Snapshot): InitService | undefined {
  const procRoot = snapshot.procRoot;
  const one = snapshot.processes.get(1);
  if (!one) return undefined;
  const exe = exeOf(procRoot, 1);
  const argv = argvOf(procRoot, 1);
  let name = initNamed(exe === undefined ? one.comm : basename(exe));
  const evidence = exe === undefined ? `comm=${one.comm}` : `exe=${exe}`;
  if (name === undefined && /^node(js)?$/.test(exe === undefined ? one.comm : basename(exe))) {
    if (isTetherGuardInit(argv)) name = 'tether-guard';
  }
  if (name === undefined) return undefined;
  const children = (snapshot.children.get(1) ?? [])
    .map((pid) => snapshot.processes.get(pid))
    .filter((s): s is ProcStat => s !== undefined && s.state !== 'Z' && s.state !== 'X');
  if (name === 's6-svscan') {
    const services = children.filter((s) => {
      const e = exeOf(procRoot, s.pid);
      return (e === undefined ? s.comm : basename(e)) === 's6-supervise';
    });
    return { name, evidence, services: services.map((s) => ({ pid: s.pid, startTime: s.startTime })) };
  }
  if (name === 'catatonit' && argv.slice(1).some((a) => a === '-P' || a === '--pause')) {
    return { name, evidence: `${evidence} -P (pause: no command)`, services: [] };
  }
  if (children.length === 0) return { name, evidence, services: [] };
  const first = Math.min(...children.map((s) => s.startTime));
  const services = children
    .filter((s) => s.startTime === first)
    .map((s) => ({ pid: s.pid, startTime: s.startTime }));
  return { name, evidence, services };
}

// The target of /proc/PID/exe, or undefined when it cannot be read (another uid without
// ptrace access, gone, a kernel thread).
function exeOf(procRoot: string, pid: number): string | undefined {
  try {
    return readlinkSync(join(procRoot, String(pid), 'exe')).replace(/ \(deleted\)$/, '');
  } catch {
    return undefined;
  }
}

function argvOf(procRoot: string, pid: number): string[] {
  try {
    return readFileSync(join(procRoot, String(pid), 'cmdline'), 'utf8')
      .split('\0')
      .slice(0, -1);
  } catch {
    return [];
  }
}
