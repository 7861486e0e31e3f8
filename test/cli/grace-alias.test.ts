// `-k/--kill-after` and its alias `--grace` name one budget, the TERM phase (src/cli/phases.ts,
// and the guard's own reading in src/cli/guard.ts): the same duration spelled twice is taken,
// two durations are refused naming both. `--grace 3 -k 3000ms` was refused (the strings were
// compared; a fresh user's trial).
import { describe, expect, it } from 'vitest';
import { phaseBudgets } from '../../src/cli/phases.js';
import { tether } from '../support/cli.js';

describe('--grace beside -k/--kill-after', () => {
  it('one duration in two spellings is taken; two durations are refused, both named', () => {
    expect(phaseBudgets({ grace: '3', killAfter: '3000ms' }).graceMs).toBe(3000);
    expect(phaseBudgets({ grace: '1.5s', killAfter: '1500ms' }).graceMs).toBe(1500);
    expect(() => phaseBudgets({ grace: '3', killAfter: '2s' })).toThrow(
      /invalid --grace "3" with --kill-after "2s": they name one budget/,
    );
  });

  it('tether run --grace 3 -k 3000ms runs the command; --grace 3 -k 2 is refused (125) before it', async () => {
    const same = await tether([
      'run',
      '--no-ledger',
      '--grace',
      '3',
      '-k',
      '3000ms',
      '--',
      'sh',
      '-c',
      'exit 7',
    ]);
    expect(same.code, same.stderr).toBe(7);
    const two = await tether(['run', '--no-ledger', '--grace', '3', '-k', '2', '--', 'sh', '-c', 'exit 7']);
    expect(two.code).toBe(125);
    expect(two.stderr).toMatch(/invalid --grace "3" with --kill-after "2"/);
  });
});
