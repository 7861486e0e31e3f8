// The suite's leak guard, its part about session cgroups (test/support/global.ts runs it at the
// end of a run): which tags this run's sessions had — every session registers its tag in the
// run's own live-session directory when its first command starts — and which of their cgroups
// still exist.
import { type FSWatcher, readdirSync, watch } from 'node:fs';
import { join } from 'node:path';
import { cgroup2Mount } from '../../src/proc/cgroup.js';

/**
 * The environment variable that names, relative to the repository, the test file a process was
 * started from (test/support/file-mark.ts sets it in each file's worker).
 */
export const FILE_VAR = 'TETHER_TEST_FILE';

// The session cgroups (`tether-<hex>` under `<cgroup2 mount>/tether`, nested ones included) whose
// hex is one of `ours`: a session of this run whose cgroup nothing removed. Another tether
// session on the machine (a developer's, a CI runner that itself runs under tether) has a tag
// this run never registered, so its cgroup is never counted. The mount: src's, from mountinfo.
export function ourSessionCgroups(ours: ReadonlySet<string>, mount = cgroup2Mount()): string[] {
  const found: string[] = [];
  const queue = mount ? [join(mount, 'tether')] : [];
  for (let dir = queue.shift(); dir !== undefined; dir = queue.shift()) {
    let entries: string[];
    try {
      entries = readdirSync(dir, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name);
    } catch {
      continue; // absent, or removed meanwhile
    }
    for (const name of entries) {
      const hex = /^tether-([0-9a-f]{32})$/.exec(name)?.[1];
      if (!hex) continue;
      if (ours.has(hex)) found.push(join(dir, name));
      queue.push(join(dir, name)); // a session's cgroup may hold a nested one
    }
  }
  return found;
}

// The hex of every session tag registered in `dir` from now on (src/containment/live-session.ts
// writes `.<hex>.<pid>.<ns>` then renames it to `<hex>.<pid>.<start>.<n>` when a session's first
// command starts): the set grows while the watch runs (inotify, through fs.watch).
export function watchRegistrations(dir: string, into: Set<string>): FSWatcher {
  const note = (name: string | Buffer | null) => {
    const hex = /^\.?([0-9a-f]{32})\./.exec(String(name ?? ''))?.[1];
    if (hex) into.add(hex);
  };
  const watcher = watch(dir, { persistent: false }, (_event, name) => note(name));
  watcher.on('error', () => {}); // the directory removed: nothing more to learn
  for (const name of readdirSync(dir)) note(name);
  return watcher;
}
