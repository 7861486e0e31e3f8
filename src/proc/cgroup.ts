// The cgroup v2 layer (decisions.md D9), one module: one cgroup per session, which the payload
// joins before it execs (the helper writes "0" to its cgroup.procs in the child), so every
// process the session starts is accounted to it, however it detaches. Read top to bottom: a
// session cgroup as the sweep sees it — its members (`cgroup.procs`, nested cgroups included),
// the kernel's proof of emptiness (`cgroup.events` `populated 0`) and its kill switch
// (`cgroup.kill`, Linux 5.14: the whole subtree at once, racing forks included) —, then where the
// v2 hierarchy is mounted, and a session's cgroup created, found, listed and removed. See
// cgroups(7) and the kernel's Documentation/admin-guide/cgroup-v2.rst.
import {
  accessSync,
  constants,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { TAG_HEX_DIGITS, TAG_PREFIX } from './tag.js';

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

/** Either a usable cgroup, or why there is none (a note for the report, not an error). */
export type CgroupResult = { cgroup: SessionCgroup } | { note: string };

/** The name of a session's cgroup: `tether-<the tag's 32 hex digits>`. */
export function cgroupName(tagName: string): string {
  return `tether-${tagName.slice(-TAG_HEX_DIGITS)}`;
}

const SESSION_DIR = new RegExp(`^tether-[0-9a-f]{${TAG_HEX_DIGITS}}$`);

/**
 * Where the v2 hierarchy is mounted, from `/proc/self/mountinfo` (proc(5)): the mount point of
 * the first `cgroup2` entry whose root is `/` — `/sys/fs/cgroup` on a unified host,
 * `/sys/fs/cgroup/unified` on a hybrid one. Undefined when there is none, or when mountinfo
 * cannot be read (`findCgroup2Mount` tells the two apart).
 */
export function cgroup2Mount(procRoot = '/proc'): string | undefined {
  const found = findCgroup2Mount(procRoot);
  return 'mount' in found ? found.mount : undefined;
}

/**
 * The v2 mount point, or why there is none as a report note: mountinfo lists no `cgroup2`
 * entry, or mountinfo itself cannot be read (no procfs at `procRoot`, EMFILE…) — then
 * nothing is known about the mounts, and the note says that instead.
 */
export function findCgroup2Mount(procRoot = '/proc'): { mount: string } | { note: string } {
  const mountinfo = `${procRoot}/self/mountinfo`;
  let text: string;
  try {
    text = readFileSync(mountinfo, 'utf8');
  } catch (error) {
    const why = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    return {
      note: `cgroup: cannot read ${mountinfo} (${why}): whether a cgroup v2 hierarchy is mounted is unknown`,
    };
  }
  for (const line of text.split('\n')) {
    const [left, right] = line.split(' - ');
    if (!left || !right?.startsWith('cgroup2 ')) continue;
    const fields = left.split(' ');
    // 4th field: root of the mount within the hierarchy; 5th: mount point (octal escapes).
    if (fields[3] !== '/' || fields[4] === undefined) continue;
    return {
      mount: fields[4].replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8))),
    };
  }
  return { note: `cgroup: no cgroup v2 hierarchy is mounted (${mountinfo} lists none)` };
}

/** This process's v2 cgroup path (the `0::` line of `/proc/self/cgroup`), e.g. `/user.slice/x`. */
export function ownCgroup(procRoot = '/proc'): string | undefined {
  try {
    const line = readFileSync(`${procRoot}/self/cgroup`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('0::'));
    return line?.slice(3);
  } catch {
    return undefined;
  }
}

/**
 * Creates the session's cgroup. Its parent: the supervisor's own cgroup when that is itself a
 * session's (a nested session stays inside the outer one, so the outer `cgroup.kill` and
 * `populated` cover it); else `<mount>/tether` (root); else the supervisor's own cgroup (a
 * delegated subtree, `Delegate=yes`). Never throws: no v2 mount, no write access → a note.
 */
export function createSessionCgroup(tagName: string, procRoot = '/proc'): CgroupResult {
  const found = findCgroup2Mount(procRoot);
  if ('note' in found) return found;
  const { mount } = found;
  const own = ownCgroup(procRoot);
  const ownDir = own === undefined ? undefined : join(mount, own);
  const parents: string[] = [];
  if (ownDir && SESSION_DIR.test(own?.split('/').at(-1) ?? '')) parents.push(ownDir);
  else {
    parents.push(join(mount, 'tether'));
    if (ownDir && ownDir !== mount) parents.push(ownDir);
  }
  const reasons: string[] = [];
  for (const parent of parents) {
    const path = join(parent, cgroupName(tagName));
    try {
      // One level at a time, not `recursive`: Node's recursive mkdir reports ENOENT where the
      // kernel said EROFS (a read-only cgroup mount) or EACCES.
      mkdirExisting(parent, mount);
      mkdirSync(path);
      accessSync(join(path, 'cgroup.procs'), constants.W_OK);
      return { cgroup: { path, canKill: pathExists(join(path, 'cgroup.kill')) } };
    } catch (error) {
      reasons.push(`${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
      removeCgroup(path);
    }
  }
  return { note: `cgroup: cannot create a session cgroup (${reasons.join('; ')})` };
}

// Creates `dir` and its missing parents below `top` (which exists); an existing one is fine.
function mkdirExisting(dir: string, top: string): void {
  if (dir === top || pathExists(dir)) return;
  mkdirExisting(dirname(dir), top);
  try {
    mkdirSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
}

/**
 * Finds an existing session cgroup by the session's tag (for `tether sweep --tag` after its
 * supervisor and helper are gone): looked for under `<mount>/tether` and the caller's own
 * cgroup, nested sessions included. Undefined when there is none.
 */
export function findSessionCgroup(tagName: string, procRoot = '/proc'): SessionCgroup | undefined {
  const mount = cgroup2Mount(procRoot);
  if (!mount) return undefined;
  const name = cgroupName(tagName);
  const own = ownCgroup(procRoot);
  const queue = [join(mount, 'tether'), ...(own && own !== '/' ? [join(mount, own)] : [])];
  for (let dir = queue.shift(); dir !== undefined; dir = queue.shift()) {
    for (const entry of subdirs(dir)) {
      const path = join(dir, entry);
      if (entry === name) return { path, canKill: pathExists(join(path, 'cgroup.kill')) };
      if (SESSION_DIR.test(entry)) queue.push(path); // a session's cgroup may hold a nested one
    }
  }
  return undefined;
}

/** True when this process runs in `path` or a cgroup below it. */
export function runsInside(path: string, procRoot = '/proc'): boolean {
  const mount = cgroup2Mount(procRoot);
  const own = ownCgroup(procRoot);
  if (!mount || own === undefined) return false;
  const dir = join(mount, own);
  return dir === path || dir.startsWith(`${path}/`);
}

/**
 * Removes the cgroup and any empty cgroups below it (depth first). False when one is still
 * populated or cannot be removed; true when gone (or never created).
 */
export function removeCgroup(path: string): boolean {
  for (const entry of subdirs(path)) removeCgroup(join(path, entry));
  try {
    rmdirSync(path);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** A session cgroup directly under `<mount>/tether` (`listSessionCgroups`). */
export interface SessionCgroupEntry {
  path: string;
  /** The session's tag name, `TETHER_SESSION_<the directory's hex digits>`. */
  tag: string;
  /** The directory's last status change or modification, the later (ms since the epoch). */
  changedMs: number;
  /** `cgroup.events`' `populated`; undefined when it cannot be read. */
  populated: boolean | undefined;
}

/**
 * Every `tether-<32 hex digits>` directory directly under `<cgroup2 mount>/tether` (the mount
 * from `procRoot`'s mountinfo), with its age and whether it is populated. Nested session cgroups
 * (inside another session's) are not listed. Empty when there is no v2 mount or no such
 * directory. Throws nothing.
 */
export function listSessionCgroups(procRoot = '/proc'): SessionCgroupEntry[] {
  const mount = cgroup2Mount(procRoot);
  if (!mount) return [];
  const base = join(mount, 'tether');
  const found: SessionCgroupEntry[] = [];
  for (const entry of subdirs(base)) {
    const c = isSessionCgroupName(entry) ? sessionCgroupEntry(join(base, entry)) : undefined;
    if (c) found.push(c);
  }
  return found;
}

/** True when `name` is a session cgroup's directory name: `tether-<32 hex digits>`. */
export function isSessionCgroupName(name: string): boolean {
  return SESSION_DIR.test(name);
}

/**
 * The session cgroup at `path` (its last component `tether-<hex>`), with its age and whether it
 * is populated; undefined when it is gone. Throws nothing.
 */
export function sessionCgroupEntry(path: string): SessionCgroupEntry | undefined {
  let changedMs: number;
  try {
    const st = statSync(path);
    changedMs = Math.max(st.ctimeMs, st.mtimeMs);
  } catch {
    return undefined; // gone meanwhile
  }
  let populated: boolean | undefined;
  try {
    const line = readFileSync(join(path, 'cgroup.events'), 'utf8')
      .split('\n')
      .find((l) => l.startsWith('populated '));
    populated = line === undefined ? undefined : line.slice('populated '.length).trim() !== '0';
  } catch {
    populated = undefined;
  }
  const name = path.split('/').at(-1) ?? '';
  return { path, tag: `${TAG_PREFIX}${name.slice('tether-'.length)}`, changedMs, populated };
}

/**
 * Removes the cgroup `path` itself, never what is below it (rmdir(2): a cgroup that holds a
 * process or a child cgroup fails `EBUSY` and stays). Nothing is signalled. Undefined when
 * removed, else the errno code of the failure.
 */
export function removeEmptyCgroup(path: string): string | undefined {
  try {
    rmdirSync(path);
    return undefined;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code ?? (error as Error).message;
  }
}
