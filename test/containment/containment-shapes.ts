// Shapes only the containment layers catch: each fixture's leftovers drop the
// env tag and lose every carrier ancestor, so an env-tag sweep cannot find them (each `verify`
// checks that premise on the live processes); the helper (a subreaper) and the session cgroup
// still hold them.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import type { FoundBy, Recorded, Shape } from '../support/zoo.js';
import { escapesTheTag } from './support.js';

const LAYER: FoundBy[] = ['subreaper', 'cgroup'];

/** Inodes of the TCP sockets in LISTEN state (/proc/net/tcp, tcp6: state 0A). */
function listeningInodes(): Set<string> {
  const out = new Set<string>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(file, 'latin1');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] === '0A' && f[9]) out.add(f[9]);
    }
  }
  return out;
}

/** True when `pid` holds a TCP socket in LISTEN state. */
export function listens(pid: number): boolean {
  const listening = listeningInodes();
  let fds: string[] = [];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  return fds.some((fd) => {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      return m !== null && listening.has(m[1] as string);
    } catch {
      return false;
    }
  });
}

export const CONTAINMENT_SHAPES: Shape[] = [
  {
    name: 'a daemon that clears its environment and then double-forks',
    script: 'containment/clearenv-daemon.sh',
    how: 'a descendant of the helper (subreaper) or a member of the session cgroup',
    foundBy: { 'clearenv-daemon': LAYER },
    verify: escapesTheTag,
  },
  {
    name: 'a daemon that rewrites its title over its environ after detaching',
    script: 'containment/title-daemon.sh',
    how: 'a descendant of the helper (subreaper) or a member of the session cgroup',
    foundBy: { 'title-daemon': LAYER },
    verify: escapesTheTag,
  },
  {
    name: 'an `env -i` child whose parent has already exited',
    script: 'containment/env-i-orphan.sh',
    how: 'a descendant of the helper (subreaper) or a member of the session cgroup',
    foundBy: { 'env-i-orphan': LAYER },
    verify: escapesTheTag,
  },
  {
    name: 'a TCP server started through `setsid -f env -i`',
    script: 'containment/setsid-server.sh',
    how: 'a descendant of the helper (subreaper) or a member of the session cgroup',
    foundBy: { 'setsid-server': LAYER },
    verify: (recorded: Recorded[], entry: string) => {
      escapesTheTag(recorded, entry);
      for (const r of recorded) {
        if (!listens(r.identity.pid))
          throw new Error(`fixture: server pid ${r.identity.pid} does not listen`);
      }
    },
  },
  {
    name: 'a program that re-executes itself detached at startup (a copy with an empty environment)',
    script: 'containment/self-detach.sh',
    how: 'a descendant of the helper (subreaper) or a member of the session cgroup',
    foundBy: { 'self-detached': LAYER },
    verify: escapesTheTag,
  },
];
