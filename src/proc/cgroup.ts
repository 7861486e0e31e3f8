// A session cgroup as the sweep sees it: its members (`cgroup.procs`, nested cgroups included),
// the kernel's proof of emptiness (`cgroup.events` `populated`) and its kill switch
// (`cgroup.kill`, Linux 5.14). See cgroups(7) and the kernel's
// Documentation/admin-guide/cgroup-v2.rst. Creating, finding and removing a session's cgroup
// is the containment layer's (src/containment/cgroup.ts).
import { accessSync, constants, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** A session's cgroup: its directory in the v2 hierarchy, and whether `cgroup.kill` exists. */
export interface SessionCgroup {
  path: string;
  canKill: boolean;
}

/**
 * Every pid in the cgroup and in the cgroups below it (a nested session's), read from each
 * `cgroup.procs`. Pids are as this process's PID namespace sees them. Empty when it is gone.
 */
export function cgroupPids(path: string): number[] {
  const pids: number[] = [];
  const visit = (dir: string) => {
    let text = '';
    try {
      text = readFileSync(join(dir, 'cgroup.procs'), 'latin1');
    } catch {
      return;
    }
    for (const line of text.split('\n')) if (line) pids.push(Number(line));
    for (const entry of subdirs(dir)) visit(join(dir, entry));
  };
  visit(path);
  return pids;
}

/**
 * `cgroup.events` `populated`: false when no process is left in the cgroup or below it (the
 * kernel's proof of emptiness), true when some are, undefined when it cannot be read.
 */
export function cgroupPopulated(path: string): boolean | undefined {
  try {
    const m = /^populated (\d)$/m.exec(readFileSync(join(path, 'cgroup.events'), 'latin1'));
    return m ? m[1] === '1' : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Writes `1` to `cgroup.kill`: SIGKILL to every process in the subtree (Linux 5.14). True when
 * written, or the cgroup is gone (ENOENT: nothing left to kill); else the errno's code (EMFILE,
 * EACCES…) so that the caller can report why (a `CGROUP_KILL_FAILED` warning).
 */
export function killCgroup(path: string): true | string {
  try {
    writeFileSync(join(path, 'cgroup.kill'), '1');
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && !pathExists(path)) return true;
    return code ?? (error as Error).message;
  }
}

/**
 * Moves process `pid` (its whole thread group) into the cgroup `dir` by writing it to
 * `cgroup.procs`: a kept service leaves the session's cgroup (docs/sweep.md, "Kept processes").
 * True when written; else the errno's code (ESRCH: it has exited; EACCES, EBUSY…).
 */
export function moveToCgroup(dir: string, pid: number): true | string {
  try {
    writeFileSync(join(dir, 'cgroup.procs'), String(pid));
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code ?? (error as Error).message;
  }
}

/** The names of the directories in `dir` (its child cgroups); empty when it cannot be read. */
export function subdirs(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return [];
  }
}

/** True when `path` exists (access(2) `F_OK`). */
export function pathExists(path: string): boolean {
  try {
    accessSync(path, constants.F_OK);
    return true;
  } catch {
    return false;
  }
}
