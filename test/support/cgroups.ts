// Cgroups a test made, removed after it: each waited on until empty (`populated 0`: the kernel
// has taken its last process out) and removed with rmdir(2), the deepest first.
import { existsSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from './zoo.js';

/** Removes every cgroup of `made` (in the order made: the deepest last), emptying the list. */
export async function removeMadeCgroups(made: string[]): Promise<void> {
  for (const dir of made.splice(0).reverse()) {
    if (!existsSync(dir)) continue;
    await waitFor(
      `${dir} to be empty`,
      () => readFileSync(join(dir, 'cgroup.events'), 'utf8').includes('populated 0'),
      5000,
    );
    rmdirSync(dir);
  }
}
