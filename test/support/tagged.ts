// A test's tagged processes, found by ground truth (/proc) and recorded in zoo.ts's `started`, so
// that the file's cleanup() ends whatever of them a failed test left running. Every process these
// helpers record is one its test started: a member of a tag the test drew, or a process whose
// argv carries the test's own marker.
import { spawn } from 'node:child_process';
import { cmdlineOf, environOf, hasEntry, identityOf, type ProcessId, pids, readStat } from './proc.js';
import { started, waitFor } from './zoo.js';

/** Live processes whose environ carries `tag` (the entry `NAME=1`), by identity; zombies left out. */
export function carriersOf(tag: string): ProcessId[] {
  const found: ProcessId[] = [];
  for (const pid of pids()) {
    const stat = readStat(pid);
    if (!stat || stat.state === 'Z' || !hasEntry(environOf(pid), `${tag}=1`)) continue;
    found.push({ pid, startTime: stat.startTime });
  }
  return found;
}

// Records every live carrier of `tag` in `started` that is not there yet (by pid).
export function recordCarriers(tag: string): void {
  for (const id of carriersOf(tag)) if (!started.some((s) => s.pid === id.pid)) started.push(id);
}

/** A cmdline (`/proc/<pid>/cmdline`, NULs as spaces): exactly this text, or one the function accepts. */
export type CmdlineMatch = string | ((cmdline: string) => boolean);

/**
 * The live process (not a zombie) whose cmdline matches `match` and, given `tag`, whose environ
 * carries it; undefined while none runs. The first in /proc's order when several do.
 */
export function byCmdline(match: CmdlineMatch, tag?: string): ProcessId | undefined {
  const matches = typeof match === 'string' ? (c: string) => c === match : match;
  for (const pid of pids()) {
    if (!matches(cmdlineOf(pid)) || readStat(pid)?.state === 'Z') continue;
    if (tag !== undefined && !hasEntry(environOf(pid), `${tag}=1`)) continue;
    const id = identityOf(pid);
    if (id) return id;
  }
  return undefined;
}

/**
 * Waits until `byCmdline(match, tag)` finds a process, records it in `started` and returns its
 * identity. `what` is the wait's name in its timeout (`"<cmdline>" to run` by default);
 * `timeoutMs` 30 s unless given.
 */
export async function running(
  match: CmdlineMatch,
  what?: string,
  options: { tag?: string; timeoutMs?: number } = {},
): Promise<ProcessId> {
  let found: ProcessId | undefined;
  await waitFor(
    what ?? `"${String(match)}" to run`,
    () => {
      found = byCmdline(match, options.tag);
      return found !== undefined;
    },
    options.timeoutMs ?? 30_000,
  );
  const id = found as ProcessId;
  started.push(id);
  return id;
}

/**
 * Starts `sh -c script` as a member of `tag`: its environ is this process's with `env`, `T` (the
 * tag's name, for the script) and the tag's entry `NAME=1`; stdio ignored. The shell is recorded
 * in `started`; what it starts is found with `running` or `recordCarriers`.
 */
export function startTagged(tag: string, script: string, env: NodeJS.ProcessEnv = {}): void {
  const child = spawn('sh', ['-c', script], {
    stdio: 'ignore',
    env: { ...process.env, ...env, T: tag, [tag]: '1' },
  });
  const id = identityOf(child.pid ?? 0);
  if (id) started.push(id);
}
