// The report for a person (src/cli/render.ts) prints processes' command lines, which a session
// member writes: a newline in one started a line of its own (a forged `tether: error: …` line
// under the real report) and an escape sequence reached the reader's terminal (a fresh user's
// trial: `exec -a "$(printf 'x\ntether: error: 0 fake\033[31mRED')" sleep N`). Each control
// character is now written as an escape. Ground truth: the leftover's pid + start time, gone.
import { describe, expect, it } from 'vitest';
import { printable } from '../../src/cli/render.js';
import { tether } from '../support/cli.js';
import { isAlive } from '../support/proc.js';
import { readPidfile, tempDir } from '../support/zoo.js';

describe("the report's command lines, for a person", () => {
  it('cannot start a line of their own or reach the terminal: a forged line stays inside its row', async () => {
    const pidfile = `${tempDir()}/pids`;
    const seconds = 3000 + Math.floor(Math.random() * 999);
    // bash's `exec -a NAME` sets argv[0]: the leftover's cmdline is NAME, then its argument.
    const name = 'x\ntether: error: 0 processes forged\u001b[31mRED\u202eevil';
    const script = `setsid -f bash -c 'echo "$$ $(cut -d" " -f22 /proc/$$/stat) leftover" >> "$1"; exec -a "$2" sleep ${seconds}' bash "$0" "$1" </dev/null >/dev/null 2>&1; for i in $(seq 100); do [ -s "$0" ] && break; sleep 0.02; done; sleep 0.2`;
    const r = await tether(['run', '--no-ledger', '--', 'bash', '-c', script, pidfile, name]);
    const [left] = readPidfile(pidfile);
    if (!left?.startTime) throw new Error(`premise broken: the leftover did not start; stderr: ${r.stderr}`);
    expect(isAlive({ pid: left.pid, startTime: left.startTime }), 'the leftover outlived the session').toBe(
      false,
    );
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stderr.split('\n');
    expect(
      lines.filter((l) => l.startsWith('tether: error:')),
      r.stderr,
    ).toEqual([]);
    expect(r.stderr.includes('\u001b'), `an escape sequence reached stderr: ${r.stderr}`).toBe(false);
    // The row holds the whole forged name, escaped (the command line is read as bytes: the
    // override's UTF-8 bytes show as three characters, the C1 one among them escaped).
    const row = lines.find((l) => l.includes('processes forged'));
    expect(row, r.stderr).toContain('x\\ntether: error: 0 processes forged\\x1b[31mRED');
  });

  it('printable writes each control character, DEL, C1 and the bidirectional overrides as an escape', () => {
    expect(printable('a\tb\r\n\u0000\u007f\u0085\u2028\u2066é€ ok')).toBe(
      'a\\tb\\r\\n\\x00\\x7f\\x85\\u2028\\u2066é€ ok',
    );
  });
});
