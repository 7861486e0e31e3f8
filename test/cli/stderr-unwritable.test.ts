// tether's stderr that cannot be written (a full disk; here /dev/full, every write ENOSPC): its
// report and notes are lost, and its status stays the command's — it was 1, an uncaught write
// error (a fresh user's trial). Ground truth: the leftover's pid + start time, gone.
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { BIN } from '../support/cli.js';
import { isAlive } from '../support/proc.js';
import { readPidfile, tempDir } from '../support/zoo.js';

describe.skipIf(!existsSync('/dev/full'))('a stderr every write to which fails (ENOSPC)', () => {
  it("costs nothing but tether's lines: the status is the command's, its leftover is stopped", () => {
    const pidfile = `${tempDir()}/pids`;
    const seconds = 4000 + Math.floor(Math.random() * 999);
    const script = `setsid sh -c 'echo "$$ $(cut -d" " -f22 /proc/$$/stat) leftover" >> "$0"; exec sleep ${seconds}' "$0" </dev/null >/dev/null 2>&1 & for i in $(seq 100); do [ -s "$0" ] && break; sleep 0.02; done; exit 4`;
    const full = openSync('/dev/full', 'w');
    try {
      const r = spawnSync(process.execPath, [BIN, 'run', '--no-ledger', '--', 'sh', '-c', script, pidfile], {
        stdio: ['ignore', 'pipe', full],
        timeout: 30_000,
      });
      const [left] = readPidfile(pidfile);
      if (!left?.startTime) throw new Error('premise broken: the leftover did not start');
      expect(isAlive({ pid: left.pid, startTime: left.startTime }), 'the leftover outlived the session').toBe(
        false,
      );
      expect(r.status).toBe(4);
    } finally {
      closeSync(full);
    }
  });
});
