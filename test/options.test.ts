// Options shared by the library and the CLI (src/options.ts): CLI durations and the bound of a
// Node timer.
import { describe, expect, it } from 'vitest';
import { spawn } from '../src/index.js';
import { parseDuration } from '../src/options.js';

describe('parseDuration', () => {
  it('reads ms, s, m, h and bare seconds', () => {
    expect(parseDuration('--grace', '500ms')).toBe(500);
    expect(parseDuration('--grace', '1.5s')).toBe(1500);
    expect(parseDuration('--grace', '2m')).toBe(120_000);
    expect(parseDuration('--grace', '3')).toBe(3000);
  });
  it("reads timeout(1)'s number forms: .5, 1., +2, an exponent, and the d unit", () => {
    expect(parseDuration('--timeout', '.5')).toBe(500);
    expect(parseDuration('--timeout', '1.')).toBe(1000);
    expect(parseDuration('--timeout', '+2')).toBe(2000);
    expect(parseDuration('--timeout', '1e3')).toBe(1_000_000);
    expect(parseDuration('--timeout', '2.5E-1s')).toBe(250);
    expect(parseDuration('--timeout', '1d')).toBe(86_400_000);
    expect(parseDuration('--timeout', '24d')).toBe(24 * 86_400_000);
    expect(parseDuration('--timeout', '1.1s'), 'rounded to the nearest ms, not up').toBe(1100);
  });
  it('rounds a duration under 1 ms up to 1 ms, never to 0 ("none" or "at once")', () => {
    expect(parseDuration('--timeout', '0.4ms')).toBe(1);
    expect(parseDuration('--timeout', '0.0001')).toBe(1);
    expect(parseDuration('--timeout', '1e-400'), 'too small for a double, still not 0').toBe(1);
    expect(parseDuration('--timeout', '0')).toBe(0);
    expect(parseDuration('--timeout', '0.000')).toBe(0);
    expect(parseDuration('--timeout', '0e9')).toBe(0);
  });
  it('takes inf and infinity only where the caller accepts no limit', () => {
    expect(parseDuration('--timeout', 'inf', { infinite: true })).toBe(Number.POSITIVE_INFINITY);
    expect(parseDuration('--timeout', 'Infinity', { infinite: true })).toBe(Number.POSITIVE_INFINITY);
    expect(() => parseDuration('--kill-after', 'inf')).toThrow(
      /invalid --kill-after "inf": expected a finite duration \(at most 24 days/,
    );
  });
  it('refuses what timeout(1) refuses, and what a Node timer cannot hold', () => {
    for (const text of ['nan', '-1', '.', 'e3', '1e', '1 s', 's', '5x', '0x10', '1,5'])
      expect(() => parseDuration('--timeout', text), text).toThrow(/expected a duration such as 500ms/);
    expect(() => parseDuration('--timeout', '25d')).toThrow(/longer than 24 days/);
    expect(() => parseDuration('--timeout', '1e400')).toThrow(/longer than 24 days/);
    expect(() => parseDuration('--timeout', '2147483.6475')).toThrow(/longer than 24 days/);
    expect(parseDuration('--timeout', '2147483.647')).toBe(2_147_483_647);
  });
  it('names the option and the accepted forms on bad input', () => {
    expect(() => parseDuration('--grace', '5 sec')).toThrow(/--grace.*500ms, 5s/);
    expect(() => parseDuration('--kill-after', '-1s')).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    );
  });
});

describe('timer limits', () => {
  it('refuses a timeout a Node timer cannot hold instead of firing it at once', () => {
    expect(() => spawn('true', [], { timeout: 2 ** 31 })).toThrow(/invalid timeout: 2147483648/);
    expect(() => spawn('true', [], { outputCapMs: 2 ** 31 })).toThrow(
      expect.objectContaining({ code: 'INVALID_OPTION' }),
    );
  });
});
