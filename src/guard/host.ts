// Whether a guard's target is the whole machine (docs/guard.md, "On a host"). Outside a
// container — in the init PID namespace, or in the cgroup v2 hierarchy's root cgroup — the
// default target (the guard's own cgroup, or its PID namespace) holds every long-lived process
// of the host: shells, CI runners, services. A guard there is refused unless asked for with
// `host: true` (`--host`). Both facts are the kernel's, read from procfs and cgroupfs.
import { readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { TargetSource } from './targets.js';

/**
 * The inode of the initial PID namespace: the kernel gives it a fixed number (`PROC_PID_INIT_INO`,
 * 0xEFFFFFFC, include/linux/proc_ns.h), and every other PID namespace a dynamic one above
 * 0xF0000000, so `/proc/self/ns/pid` reading `pid:[4026531836]` is the host's namespace.
 */
export const INIT_PID_NAMESPACE_INODE = 0xeffffffc;

/**
 * Whether this process is in the initial PID namespace (`<procRoot>/self/ns/pid`'s inode).
 * Undefined when the link cannot be read (no procfs, a kernel before 3.8).
 */
export function inInitPidNamespace(procRoot = '/proc'): boolean | undefined {
  try {
    const m = /^pid:\[(\d+)\]$/.exec(readlinkSync(join(procRoot, 'self/ns/pid')));
    return m ? Number(m[1]) === INIT_PID_NAMESPACE_INODE : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether `dir` is the root cgroup of a cgroup v2 hierarchy: the kernel gives every cgroup but
 * the root `cgroup.type` and `cgroup.events` (CFTYPE_NOT_ON_ROOT), so a directory with
 * `cgroup.procs` and neither is the root. Inside a cgroup namespace, the namespace's root is a
 * child cgroup of the host's and has both: it is not the hierarchy's root.
 */
export function isHierarchyRoot(dir: string): boolean {
  const has = (name: string) => {
    try {
      statSync(join(dir, name));
      return true;
    } catch {
      return false;
    }
  };
  return has('cgroup.procs') && !has('cgroup.type') && !has('cgroup.events');
}

/**
 * Why `target` is the whole machine, or undefined when it is not: a PID-namespace target in the
 * initial PID namespace; a cgroup target that is the hierarchy's root; with no explicit cgroup
 * (`explicitCgroup` false), any target of a guard in the initial PID namespace (its own cgroup
 * on a host is a service's or a user's slice, not a container's). The reason names what to pass.
 */
export function hostReason(
  target: TargetSource,
  explicitCgroup: boolean,
  procRoot = '/proc',
): string | undefined {
  const initNs = inInitPidNamespace(procRoot) === true;
  const pass = `pass --cgroup PATH (the cgroup v2 directory to watch)${initNs ? '' : ', --cgroup none (this PID namespace only)'}, or run it inside the container (docker exec, nsenter), or pass --host to sweep this machine`;
  if (target.kind === 'pid-namespace' && initNs) {
    return `the guard runs in the host's PID namespace and would watch every process of this machine (${target.note}): ${pass}`;
  }
  if (target.kind === 'cgroup' && isHierarchyRoot(target.path)) {
    return `the target cgroup ${target.path} is the root of the cgroup v2 hierarchy (a host's, not a container's): it holds every process of this machine: ${pass}`;
  }
  if (!explicitCgroup && initNs) {
    return `the guard runs in the host's PID namespace (not in a container), where its own cgroup${target.kind === 'cgroup' ? ` ${target.path}` : ''} holds whatever else runs beside it: ${pass}`;
  }
  return undefined;
}
