// An argument that is not valid UTF-8 is refused before anything runs (125), naming its bytes:
// Node decodes argv with U+FFFD in place of each bad byte, so it would have reached the command
// changed (`touch` would make another file). Valid UTF-8 beyond ASCII passes on byte for byte.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { BIN } from '../support/cli.js';
import { testDir } from '../support/temp.js';

// `tether run --no-ledger -- touch DIR/NAME`, NAME given to sh as printf escapes (bytes).
function touchThrough(dir: string, escapes: string) {
  return spawnSync(
    'sh',
    ['-c', `exec "$0" "$1" run --no-ledger -- touch "$2/$(printf '${escapes}')"`, process.execPath, BIN, dir],
    { encoding: 'buffer', timeout: 30_000 },
  );
}

describe('arguments Node cannot pass on unchanged', () => {
  it('are refused (125) before the command runs, the bytes named', () => {
    const dir = testDir('tether-argv-');
    const r = touchThrough(dir, 'a\\377b');
    expect(r.status, r.stderr.toString()).toBe(125);
    expect(r.stderr.toString()).toMatch(/argument 5 is not valid UTF-8 \(bytes [0-9a-f ]* 61 ff 62\)/);
    expect(readdirSync(dir), 'the command ran').toEqual([]);
  });

  it('valid UTF-8 beyond ASCII reaches the command byte for byte', () => {
    const dir = testDir('tether-argv-');
    const r = touchThrough(dir, 'h\\303\\251llo-\\342\\202\\254');
    expect(r.status, r.stderr.toString()).toBe(0);
    expect(readdirSync(dir, { encoding: 'buffer' }).map((b) => b.toString('hex'))).toEqual([
      Buffer.from('héllo-€').toString('hex'),
    ]);
  });
});
