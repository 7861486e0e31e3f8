// A cgroup v2 of a test's own, around processes no session can be trusted to end (a fork-and-exit
// loop that stops its helper, or leaves the session cgroup): its `populated` is the ground truth
// of whether they still run, and its `cgroup.kill` the cleanup, whatever the session did. Root
// only, with cgroup v2 mounted (the mount read from /proc/self/mountinfo).
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { findCgroup2Mount } from '../../src/proc/cgroup.js';

function mount(): string | undefined {
  const found = findCgroup2Mount();
  return 'mount' in found ? found.mount : undefined;
}

/** Why a test cgroup cannot be made here, or undefined when it can (root, cgroup v2 mounted). */
export const noTestCgroup: string | undefined =
  process.getuid?.() !== 0 ? 'not root' : mount() === undefined ? 'no cgroup v2 mount' : undefined;

export interface TestCgroup {
  /** The directory (`<mount>/tether-proofs-test-<random>`). */
  dir: string;
  /** True while a process is in it (cgroup.events `populated 1`); false once it is gone. */
  populated(): boolean;
  /** cgroup.kill, then waits (up to 5 s) for it to empty and removes it. */
  end(): Promise<void>;
}

/** Makes a fresh cgroup under the cgroup v2 mount's root. */
export function makeTestCgroup(): TestCgroup {
  const root = mount();
  if (!root) throw new Error('premise broken: no cgroup v2 mount');
  const dir = join(root, `tether-proofs-test-${process.pid}-${Math.random().toString(16).slice(2)}`);
  mkdirSync(dir);
  const populated = () => {
    try {
      return /^populated 1$/m.test(readFileSync(join(dir, 'cgroup.events'), 'latin1'));
    } catch {
      return false;
    }
  };
  return {
    dir,
    populated,
    async end() {
      for (let i = 0; i < 250 && existsSync(dir); i++) {
        try {
          if (populated()) writeFileSync(join(dir, 'cgroup.kill'), '1');
          else rmdirSync(dir);
        } catch {
          // EBUSY: still emptying
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}
