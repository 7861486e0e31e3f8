// The cgroup layer's readers and the session cgroup's creation (src/proc/cgroup.ts), on
// captured text and real files.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  cgroup2Mount,
  cgroupName,
  createSessionCgroup,
  findSessionCgroup,
  ownCgroup,
} from '../../src/proc/cgroup.js';
import { testDir } from '../support/temp.js';

// A directory that stands in for /proc: self/mountinfo and self/cgroup with the given text.
function fakeProc(mountinfo: string, cgroup = '0::/\n'): string {
  const root = testDir('tether-fakeproc-');
  mkdirSync(join(root, 'self'));
  writeFileSync(join(root, 'self/mountinfo'), mountinfo);
  writeFileSync(join(root, 'self/cgroup'), cgroup);
  return root;
}

const HYBRID = `24 29 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
`;

describe('cgroup2Mount', () => {
  it('finds the v2 mount of a hybrid host and of a unified one', () => {
    expect(cgroup2Mount(fakeProc(HYBRID))).toBe('/sys/fs/cgroup/unified');
    expect(
      cgroup2Mount(fakeProc('35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n')),
    ).toBe('/sys/fs/cgroup');
  });
  it('decodes octal escapes and skips a mount of a subtree (root other than /)', () => {
    const text =
      '40 24 0:30 /some/sub /mnt/sub rw - cgroup2 cgroup2 rw\n41 24 0:30 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n';
    expect(cgroup2Mount(fakeProc(text))).toBe('/mnt/my cg');
  });
  it('is undefined with no cgroup2 mount (a v1-only host) or no procfs', () => {
    expect(cgroup2Mount(fakeProc('32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n'))).toBe(
      undefined,
    );
    expect(cgroup2Mount('/nonexistent')).toBe(undefined);
  });
});

describe('ownCgroup and the session cgroup', () => {
  it('reads the 0:: line of /proc/self/cgroup', () => {
    expect(ownCgroup(fakeProc(HYBRID, '9:memory:/x\n0::/user.slice/a.scope\n'))).toBe('/user.slice/a.scope');
  });
  it('names a session cgroup after the tag', () => {
    expect(cgroupName(`TETHER_SESSION_${'ab'.repeat(16)}`)).toBe(`tether-${'ab'.repeat(16)}`);
  });
  it('gives a note, not an error, where the v2 directory is not a cgroupfs or not there', () => {
    const mount = testDir('tether-notcg-');
    const made = createSessionCgroup(
      `TETHER_SESSION_${'cd'.repeat(16)}`,
      fakeProc(`31 30 0:27 / ${mount} rw - cgroup2 cgroup2 rw\n`),
    );
    expect('note' in made && made.note).toMatch(/cannot create a session cgroup .*cgroup\.procs|ENOENT/);
    const fake = fakeProc('\n');
    expect(createSessionCgroup(`TETHER_SESSION_${'cd'.repeat(16)}`, fake)).toEqual({
      note: `cgroup: no cgroup v2 hierarchy is mounted (${fake}/self/mountinfo lists none)`,
    });
    expect(findSessionCgroup(`TETHER_SESSION_${'cd'.repeat(16)}`, fakeProc('\n'))).toBe(undefined);
  });
});
