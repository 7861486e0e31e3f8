// Running the real `tether recover --json` from the recover tests.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ROOT } from '../support/paths.js';

const run = promisify(execFile);
const CLI = join(ROOT, 'bin/tether.js');

/** `tether recover --json --ledger PATH` (1 s phases) and `extra`: its status, its JSON, its stderr. */
export async function recoverCli(ledgerPath: string, ...extra: string[]) {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      [CLI, 'recover', '--json', '--ledger', ledgerPath, '--grace', '1s', '--kill-after', '1s', ...extra],
      { timeout: 60_000 },
    );
    return { code: 0, json: JSON.parse(stdout), stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, json: e.stdout ? JSON.parse(e.stdout) : null, stderr: e.stderr };
  }
}
