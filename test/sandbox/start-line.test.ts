// The start announcement tells tether who proves the end: the wrapper shell (`tether-start NONCE`)
// or the helper that holds the nonce (`tether-start NONCE helper`, docs/sandbox.md "The helper holds
// the nonce"). Cut at every byte, each is found, removed, and told apart; the first one wins.
import { describe, expect, it } from 'vitest';
import { createNonce, helperStartLine, StartStripper, startLine } from '../../src/sandbox/completion.js';

// The stream pushed in two chunks cut at `at`, then ended: what passed, and what the stripper saw.
function strip(nonce: string, text: string, at: number) {
  const s = new StartStripper(nonce);
  const bytes = Buffer.from(text);
  const out = Buffer.concat([s.push(bytes.subarray(0, at)), s.push(bytes.subarray(at)), s.end()]);
  return { out: out.toString(), announced: s.announced, byHelper: s.byHelper };
}

describe('the start announcement', () => {
  const nonce = createNonce();
  const body = 'hello\ntether-start lookalike helper\n';

  for (const [who, line, byHelper] of [
    ['the wrapper shell', startLine(nonce), false],
    ['the helper', helperStartLine(nonce), true],
  ] as const) {
    it(`${who}'s, cut at every byte: removed, and told apart`, () => {
      const text = line + body;
      for (let at = 0; at <= text.length; at++) {
        expect(strip(nonce, text, at), `cut at ${at}`).toEqual({ out: body, announced: true, byHelper });
      }
    });
  }

  it("a helper's line after the wrapper's is the command's output: the first one wins", () => {
    const text = `${startLine(nonce)}${helperStartLine(nonce)}x`;
    expect(strip(nonce, text, 7)).toEqual({
      out: `${helperStartLine(nonce)}x`,
      announced: true,
      byHelper: false,
    });
  });

  it('another nonce announces nothing', () => {
    const text = `${helperStartLine(createNonce())}x`;
    expect(strip(nonce, text, 3)).toEqual({ out: text, announced: false, byHelper: false });
  });
});
