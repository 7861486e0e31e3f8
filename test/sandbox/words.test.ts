// The CLI's word splitting for --via and --shell (src/sandbox/words.ts): an empty value is refused
// by the flag's name, with an example of what that flag takes.
import { describe, expect, it } from 'vitest';
import { splitWords } from '../../src/sandbox/words.js';

describe('splitWords', () => {
  it('splits plain words, quotes and escapes as a shell does', () => {
    expect(splitWords('--via', `docker exec -i 'my box'`)).toEqual(['docker', 'exec', '-i', 'my box']);
    expect(splitWords('--shell', 'busybox\\ sh')).toEqual(['busybox sh']);
  });

  it("refuses an empty --shell with a shell's example, and an empty --via with a prefix's", () => {
    expect(() => splitWords('--shell', ' ')).toThrow(
      /invalid --shell " ": expected the target's shell as words, such as 'sh'/,
    );
    expect(() => splitWords('--via', '')).toThrow(
      /invalid --via "": expected a command prefix such as 'docker exec -i ID'/,
    );
  });
});
