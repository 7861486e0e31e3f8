// Which commands a resident call takes (src/sandbox/resident.ts, callFits): `sandbox.exec` asks
// before it starts the call's client — the client is started before the request is built — so
// callFits must agree with callRequest on every command, at the bound too. Then in a real
// container: a command past the bound goes under the wrapper (its exec is the wrapper's, not a
// `--call`), one within it to the server, each ending with the output it printed.
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prebuiltCandidates } from '../../src/containment/prebuilt.js';
import { sandbox } from '../../src/index.js';
import type { ExecChannel } from '../../src/sandbox/channel.js';
import { CALL_LINE_MAX, callFits, callRequest } from '../../src/sandbox/resident.js';
import { missing } from '../support/tools.js';
import { type Container, privateTmp, startContainer } from './container.js';

const KEY = Buffer.alloc(32, 7);
const NONCE = 'a'.repeat(32);
const TAG = 'b'.repeat(32);
const SWEEP = { graceMs: 500, killAfterMs: 500, intervalMs: 50 };

// Whether callRequest builds the request (it throws on what it does not take).
function builds(argv: string[], sweep?: typeof SWEEP): boolean {
  try {
    callRequest(KEY, NONCE, TAG, argv, sweep);
    return true;
  } catch {
    return false;
  }
}

describe('callFits', () => {
  it('agrees with callRequest at the bound, for run and session calls, ASCII and multi-byte words', () => {
    for (const sweep of [undefined, SWEEP]) {
      for (const unit of ['x', 'é']) {
        // The longest word that fits: found by callRequest itself, then one unit more.
        let lo = 0;
        let hi = CALL_LINE_MAX;
        while (lo < hi) {
          const mid = Math.ceil((lo + hi) / 2);
          if (builds(['sh', unit.repeat(mid)], sweep)) lo = mid;
          else hi = mid - 1;
        }
        expect(lo, 'a word of that size fits').toBeGreaterThan(1000);
        const fits = ['sh', unit.repeat(lo)];
        const past = ['sh', unit.repeat(lo + 1)];
        expect([callFits(fits, sweep), builds(fits, sweep)]).toEqual([true, true]);
        expect([callFits(past, sweep), builds(past, sweep)]).toEqual([false, false]);
        // The request built at the bound is CALL_LINE_MAX bytes after its head at most.
        const line = callRequest(KEY, NONCE, TAG, fits, sweep);
        const len = Number(line.split(' ')[1]);
        expect(len).toBe(Buffer.byteLength(line) - 'tether-call 00000000 '.length);
        expect(len).toBeLessThanOrEqual(CALL_LINE_MAX);
      }
    }
  });

  it('refuses what callRequest refuses: no words, a word holding NUL, sweep phases out of bounds', () => {
    const cases: [string[], typeof SWEEP | undefined][] = [
      [[], undefined],
      [['echo', 'a\0b'], undefined],
      [['true'], { ...SWEEP, intervalMs: 0 }],
      [['true'], { ...SWEEP, graceMs: -1 }],
      [['true'], { ...SWEEP, killAfterMs: 1_000_000_000 }],
      [['true'], { ...SWEEP, graceMs: Number.NaN }],
    ];
    for (const [argv, sweep] of cases) {
      expect([callFits(argv, sweep), builds(argv, sweep)], JSON.stringify([argv, sweep])).toEqual([
        false,
        false,
      ]);
    }
    expect([callFits(['true'], SWEEP), builds(['true'], SWEEP)]).toEqual([true, true]);
  });
});

const local = prebuiltCandidates(process.arch).find((p) => existsSync(p));
// A helper built without libsodium answers `--serve` with `unsupported`: no server to send to.
const why = local ? missing('libsodium.a') : 'no prebuilt helper built here';
const serves = why === '';

describe.skipIf(!serves)(`a resident call past the bound${serves ? '' : ` (skipped: ${why})`}`, () => {
  let box: Container;
  // The channel, with the argv of every exec it ran.
  let execs: string[][];
  let channel: ExecChannel;
  beforeAll(async () => {
    box = await startContainer(120);
    privateTmp(box, `tether-fits-${process.pid}`);
    execs = [];
    channel = {
      describe: box.channel.describe,
      exec(argv) {
        execs.push(argv);
        return box.channel.exec(argv);
      },
    };
  });
  afterAll(async () => {
    await sandbox.stopResident(channel).catch(() => {});
    await box?.stop();
  });

  it('goes under the wrapper and ends as it would there; a command within the bound goes to the server', async () => {
    const small = await sandbox.exec(channel, ['sh', '-c', 'echo small'], { resident: true });
    expect(small).toMatchObject({ ok: true, exitCode: 0, stdout: 'small\n' });
    expect(execs.at(-1)?.[1], 'the call went to the server').toBe('--call');
    // Two words of 70 KB: each within the kernel's bound on one argument (128 KB), their hex past
    // CALL_LINE_MAX (256 KB).
    const word = 'w'.repeat(70 * 1024);
    const before = execs.length;
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the shell's ${#1}, its words' lengths.
    const script = 'echo "big ${#1} ${#2}"';
    const big = await sandbox.exec(channel, ['sh', '-c', script, 'sh', word, word], { resident: true });
    expect(big).toMatchObject({ ok: true, exitCode: 0, stdout: `big ${word.length} ${word.length}\n` });
    const ran = execs.slice(before);
    expect(ran.length, 'one exec: the call, no client started for it').toBe(1);
    expect(ran[0]).toContain('tether-wrap');
    expect(ran[0]).not.toContain('--call');
  }, 60_000);
});
