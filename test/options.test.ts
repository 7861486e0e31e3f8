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
