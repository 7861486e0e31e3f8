// The recover tests' shared pieces: the real `tether recover --json`, and a supervisor that is gone.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { BeginOptions, Ledger } from '../../src/ledger/ledger.js';
import { currentSupervisor } from '../../src/ledger/supervisor.js';
import type { Supervisor } from '../../src/ledger/types.js';
import { runNode } from '../support/node.js';
import { ROOT } from '../support/paths.js';
import { identityOf, isAlive } from '../support/proc.js';

const run = promisify(execFile);
const CLI = join(ROOT, 'bin/tether.cjs');

/** `tether recover --json --ledger PATH` (1 s phases) and `extra`: its status, its JSON, its stderr. */
export async function recoverCli(ledgerPath: string, ...extra: string[]) {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      // A day's --cgroup-min-age: the tests' recover never removes the empty session cgroups of
      // other sessions on the machine (test/recover/cgroups.test.ts tests that, in a private tree).
      [
        CLI,
        'recover',
        '--json',
        '--ledger',
        ledgerPath,
        '-k',
        '1s',
        '--kill-budget',
        '1s',
        '--cgroup-min-age',
        '24h',
        ...extra,
      ],
      { timeout: 60_000 },
    );
    return { code: 0, json: JSON.parse(stdout), stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, json: e.stdout ? JSON.parse(e.stdout) : null, stderr: e.stderr };
  }
}

/** A supervisor that is gone: this machine's, a process that ran and exited (its pid + start time name nothing). */
export async function goneSupervisor(): Promise<Supervisor> {
  const gone = runNode(['-e', '']);
  const id = identityOf(gone.child.pid ?? 0);
  await gone.done;
  if (!id || isAlive(id)) throw new Error('premise broken: no identity for a short-lived supervisor');
  return { ...currentSupervisor(), pid: id.pid, startTime: id.startTime };
}

/**
 * Records `tag` as a `running` session whose supervisor is gone (`goneSupervisor`): a local
 * session of command `x` unless `options` says otherwise. What recover then finds.
 */
export async function beginOrphaned(
  ledger: Ledger,
  tag: string,
  options: Partial<Omit<BeginOptions, 'tag'>> = {},
): Promise<void> {
  await ledger.begin({
    command: ['x'],
    location: { kind: 'local' },
    supervisor: await goneSupervisor(),
    ...options,
    tag,
  });
}
