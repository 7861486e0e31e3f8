// The suite's leak guard (test/support/leak-guard.ts), on real sessions and real cgroups: it
// counts the session cgroups of the tags this run registered, and never another tether
// session's — the old guard took every session cgroup made since the run began for its own, so
// a suite beside another tether session on the machine went red.
import { mkdirSync, rmdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { session } from '../../src/index.js';
import { cgroup2Mount } from '../../src/proc/cgroup.js';
import { TAG_PREFIX } from '../../src/proc/tag.js';
import { ourSessionCgroups, watchRegistrations } from '../support/leak-guard.js';
import { testDir } from '../support/temp.js';

const mount = cgroup2Mount();
const skip = process.getuid?.() !== 0 ? 'not root' : mount === undefined ? 'no cgroup v2 mount' : undefined;

const made: string[] = [];
const cgroups: string[] = [];
afterEach(() => {
  for (const path of cgroups.splice(0).reverse()) rmdirSync(path);
  for (const path of made.splice(0)) rmSync(path, { recursive: true, force: true });
});

// An empty cgroup at `<mount>/tether/tether-<hex>`, removed after the test.
function emptySessionCgroup(hex: string): string {
  const dir = join(mount as string, 'tether', `tether-${hex}`);
  mkdirSync(dir, { recursive: true });
  cgroups.push(dir);
  return dir;
}

const randomHex = () =>
  [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, '0')).join('');

// Waits until `cond` holds (fs.watch events arrive on the event loop), at most `ms`.
async function until(cond: () => boolean, ms = 2000): Promise<void> {
  for (const end = Date.now() + ms; !cond() && Date.now() < end; )
    await new Promise((r) => setTimeout(r, 10));
}

describe.skipIf(skip !== undefined)(`the suite's leak guard${skip ? ` (skipped: ${skip})` : ''}`, () => {
  it("counts a left cgroup of a session this run registered, never another tether session's", async () => {
    const dir = testDir('tether-leak-guard-');
    made.push(dir);
    const ours = new Set<string>();
    const watcher = watchRegistrations(dir, ours);
    const saved = process.env.TETHER_SESSIONS_DIR;
    process.env.TETHER_SESSIONS_DIR = dir;
    let hex: string;
    try {
      const s = session();
      hex = s.tag.slice(TAG_PREFIX.length);
      await s.spawn('true', [], { stdio: 'ignore' }).exited;
      await s.end();
      await until(() => ours.has(hex));
    } finally {
      if (saved === undefined) delete process.env.TETHER_SESSIONS_DIR;
      else process.env.TETHER_SESSIONS_DIR = saved;
    }
    try {
      expect([...ours], 'premise broken: the session registered no tag the watch saw').toContain(hex);
      // The session removed its own cgroup: nothing to count.
      expect(ourSessionCgroups(ours)).toEqual([]);
      // Another tether session's empty cgroup, made during the run: never counted.
      const foreign = emptySessionCgroup(randomHex());
      // A cgroup of this run's tag that nothing removed (a leak), nested one under it too.
      const left = emptySessionCgroup(hex);
      const nested = join(left, `tether-${randomHex()}`);
      mkdirSync(nested);
      const nestedOurs = join(foreign, `tether-${[...ours][0]}`);
      mkdirSync(nestedOurs);
      cgroups.push(nested, nestedOurs);
      expect(ourSessionCgroups(ours).sort()).toEqual([left, nestedOurs].sort());
    } finally {
      watcher.close();
    }
  });
});
