// The keep glob (src/sweep/keep.ts): matched against the whole cmdline, in linear time.
import { describe, expect, it } from 'vitest';
import { compileGlob, compileKeep, expiredAt, keptAt, stillKept } from '../../src/sweep/keep.js';

const cases: [glob: string, cmdline: string, matches: boolean][] = [
  ['redis-server *', 'redis-server *:6379', true],
  ['redis-server *', '/usr/bin/redis-server *:6379', false], // the whole cmdline, from its start
  ['*/redis-server *', '/usr/bin/redis-server --port 6380', true],
  ['*redis-server*', 'sh -c redis-server --daemonize no', true],
  ['postgres', 'postgres -D /data', false], // to its end, too
  ['postgres*', 'postgres -D /data', true],
  ['*--port=6379*', 'redis-server --port=6379 --save', true],
  ['node *server.js*', 'node ./dist/server.js --workers 4', true],
  ['a?c', 'abc', true],
  ['a?c', 'a/c', false], // picomatch's `?` and brackets never match `/`
  ['[[:alpha:]]x*', 'qx 1', true],
  ['[[:alpha:]]x*', '1x 1', false],
  ['[!a]b', 'cb', true],
  ['*\\**', 'a*b', true],
  ['*\\**', 'ab', false],
  ['x*y*z', 'xaaybbz', true],
  ['x*y*z', 'xaazbby', false],
  ['*ab*ab*', 'abab', true],
  ['*ab*ab*', 'aba', false],
  ['{a,b}*', '{a,b} c', true], // braces are literal text
  ['{a,b}*', 'a c', false],
  ['.venv/bin/*', '.venv/bin/uvicorn app:main', true],
];

describe('keep globs', () => {
  it.each(cases)('%j against %j: %s', (glob, cmdline, matches) => {
    expect(compileGlob(glob, 'keep[0].match')(cmdline)).toBe(matches);
  });

  it('matches in linear time: many stars over a 4 KiB cmdline of one letter return at once', () => {
    // picomatch's own regex for this glob backtracks for hours on such a cmdline (O(n^k)).
    const test = compileGlob('*a*a*a*a*a*a*a*a*b', 'keep[0].match');
    expect(test('a'.repeat(4096))).toBe(false);
    expect(test(`${'a'.repeat(4096)}b`)).toBe(true);
  });

  it('refuses a glob that matches every cmdline, an unclosed bracket or paren, a lone backslash', () => {
    for (const match of ['*', '**', '*?*', 'a[b', 'a(b', 'a\\']) {
      expect(() => compileKeep([{ match, ttlMs: 1000, owner: 'o' }])).toThrow(
        expect.objectContaining({
          code: 'INVALID_OPTION',
          message: expect.stringContaining('keep[0].match'),
        }),
      );
    }
  });
});

describe('the expiry rule of a kept process', () => {
  it('holds before expiresAt and has expired from expiresAt on, the same for every reader', () => {
    const now = 1_000_000;
    expect(stillKept({ expiresAt: now + 1 }, now)).toBe(true);
    expect(stillKept({ expiresAt: now }, now)).toBe(false);
    expect(stillKept({ expiresAt: now - 1 }, now)).toBe(false);
    const kept = [
      { pid: 2, expiresAt: now + 5 },
      { pid: 3, expiresAt: now },
      { pid: 4, expiresAt: now - 5 },
      { pid: 5, expiresAt: now + 1 },
    ];
    expect(keptAt(kept, now).map((k) => k.pid)).toEqual([2, 5]);
    expect(expiredAt(kept, now).map((k) => k.pid)).toEqual([3, 4]);
  });
});
