// A terminal where tether expects a file it reads (the channels file, the channel key) is refused
// without becoming tether's controlling terminal: the open is O_NOCTTY (src/proc/untrusted-file.ts).
// Without it, a tether that leads its session with no terminal (started by setsid(1), a service
// manager, cron) takes the first terminal it opens for reading as its own — refusing it after
// fstat(2) does not undo that — and the terminal's hang-up then sends it SIGHUP. Ground truth:
// tty_nr of the reader's own /proc/self/stat after the read (the built modules in dist/, run by
// `setsid node`, since vitest's workers lead no session).
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/paths.js';
import { missing } from '../support/tools.js';

// In Python (Node opens no pseudo-terminal): a pty, then `setsid node` (setsid(1) execs in place:
// node leads its session, with no terminal) running READER on the slave's name. Prints the
// reader's JSON line.
const probeScript = `
import os, subprocess, sys
master, slave = os.openpty()
name = os.ttyname(slave)
os.close(slave)
r = subprocess.run(['setsid', sys.argv[1], '--input-type=module', '-e', sys.argv[2], name],
                   capture_output=True, text=True, timeout=20)
sys.stdout.write(r.stdout if r.returncode == 0 else 'node failed: ' + r.stderr)
`;

// Calls `read(terminal)` in a session leader and reports its refusal and the tty_nr after it.
const reader = (module: string, call: string) => `
import { readFileSync } from 'node:fs';
import * as m from ${JSON.stringify(join(ROOT, 'dist', module))};
const stat = () => readFileSync('/proc/self/stat', 'utf8').split(')').pop().trim().split(' ');
const path = process.argv.at(-1);
let refused = '';
try { ${call}; } catch (error) { refused = error.message; }
const after = stat();
console.log(JSON.stringify({ leader: after[3] === String(process.pid), refused, ttyNr: Number(after[4]) }));
`;

describe('a terminal where a file is read', () => {
  it.skipIf(missing('python3')).each([
    ['the channels file', 'recover/channel-trust.js', 'm.readChannelsFile(path, true)'],
    ['the channel key', 'ledger/channel-key.js', 'm.readChannelKey(path)'],
  ])(
    '%s on a terminal is refused and never becomes the reader’s controlling terminal',
    (_what, module, call) => {
      const out = execFileSync('python3', ['-c', probeScript, process.execPath, reader(module, call)], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      const probe = JSON.parse(out.startsWith('{') ? out : 'null') as {
        leader: boolean;
        refused: string;
        ttyNr: number;
      } | null;
      expect(probe, `premise broken: ${out}`).not.toBeNull();
      expect(probe?.leader, 'premise broken: the reader did not lead its session').toBe(true);
      expect(probe?.refused, 'premise broken: the terminal was not refused').toMatch(/no regular file/);
      expect(probe?.ttyNr, 'the reader took the terminal as its controlling terminal').toBe(0);
    },
  );
});
