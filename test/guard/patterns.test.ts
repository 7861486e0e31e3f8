// The guard's allow patterns: the dialect of `keep` globs, matched in linear time over a
// cmdline the payload chose (docs/guard.md, "Patterns").
import { describe, expect, it } from 'vitest';
import { compilePattern, type Pattern } from '../../src/guard/patterns.js';

function pattern(glob: string): Pattern {
  const p = compilePattern(glob, '--allow-pattern');
  if (!('test' in p)) throw new Error(`refused: ${p.message}`);
  return p;
}

describe('guard allow patterns', () => {
  it('answers at once on a crafted 4 KiB cmdline that makes a backtracking matcher run for minutes', () => {
    const crafted = 'a'.repeat(4096);
    // picomatch's own regex for this glob backtracks O(n^5) on `crafted` (the old matcher).
    expect(pattern('*a*a*a*a*b').test(crafted)).toBe(false);
    expect(pattern('*a*a*a*a*b').test(`${crafted}b`)).toBe(true);
  });

  it('matches the whole cmdline; [!…] negates; braces and extglobs are plain text', () => {
    expect(pattern('*sshd*').test('/usr/sbin/sshd -D')).toBe(true);
    expect(pattern('sshd *').test('/usr/sbin/sshd -D')).toBe(false);
    expect(pattern('[!x]b').test('cb')).toBe(true);
    expect(pattern('[!x]b').test('xb')).toBe(false);
    expect(pattern('{a,b}').test('a')).toBe(false);
    expect(pattern('{a,b}').test('{a,b}')).toBe(true);
  });

  it('refuses an unclosed bracket and an allow-all, naming the pattern', () => {
    expect(compilePattern('*[broken', 'f', 4)).toMatchObject({
      source: 'f',
      line: 4,
      message: expect.stringContaining('bad pattern "*[broken"'),
    });
    expect(compilePattern('**', 'f')).toMatchObject({
      message: expect.stringContaining('matches every command line'),
    });
  });

  it('refuses an empty pattern, which would spare only a process that erased its command line', () => {
    for (const glob of ['', '  '])
      expect(compilePattern(glob, '--allow-pattern')).toMatchObject({
        source: '--allow-pattern',
        message: expect.stringContaining('empty pattern'),
      });
  });
});
