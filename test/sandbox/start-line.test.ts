// The start announcement tells tether who proves the end: the wrapper shell (`tether-start NONCE`)
// or the helper that holds the nonce (`tether-start NONCE helper PID START`, docs/sandbox.md "The
// helper holds the nonce"), whose identity the session's sweep asks the kernel about. Cut at every
// byte, each is found, removed, and told apart; the first one wins.
import { describe, expect, it } from 'vitest';
import { createNonce, helperStartLine, StartStripper, startLine } from '../../src/sandbox/completion.js';

// The stream pushed in two chunks cut at `at`, then ended: what passed, and what the stripper saw.
function strip(nonce: string, text: string, at: number) {
  const s = new StartStripper(nonce);
  const bytes = Buffer.from(text);
  const out = Buffer.concat([s.push(bytes.subarray(0, at)), s.push(bytes.subarray(at)), s.end()]);
  return {
    out: out.toString(),
    announced: s.announced,
    byHelper: s.byHelper,
    helper: s.helper,
    ...(s.cgroup ? { cgroup: true } : {}),
    ...(s.awaiting ? { awaiting: s.awaiting } : {}),
  };
}

describe('the start announcement', () => {
  const nonce = createNonce();
  const body = 'hello\ntether-start lookalike helper\n';

  const identity = { pid: 4711, startTime: 1234567 };
  const awaiting = { pid: 4710, startTime: 1234560 };
  for (const [who, line, byHelper, helper] of [
    ['the wrapper shell', startLine(nonce), false, undefined],
    ['the helper without its identity', helperStartLine(nonce), true, undefined],
    ['the helper with its identity', helperStartLine(nonce, identity), true, identity],
    ['the helper with its identity and a cgroup', helperStartLine(nonce, identity, true), true, identity],
    [
      'the helper with its identity, a cgroup and its --await parent',
      helperStartLine(nonce, identity, true, awaiting),
      true,
      identity,
    ],
    ['the helper with its --await parent', helperStartLine(nonce, identity, false, awaiting), true, identity],
  ] as const) {
    it(`${who}'s, cut at every byte: removed, and told apart`, () => {
      const text = line + body;
      const cgroup = line.includes(' cgroup') ? { cgroup: true } : {};
      const parent = line.includes(' await ') ? { awaiting } : {};
      for (let at = 0; at <= text.length; at++) {
        expect(strip(nonce, text, at), `cut at ${at}`).toEqual({
          out: body,
          announced: true,
          byHelper,
          helper,
          ...cgroup,
          ...parent,
        });
      }
    });
  }

  it('a malformed identity is no announcement: the bytes are the command’s', () => {
    for (const tail of [
      ' helper 12',
      ' helper x 1',
      ' helper 1 2 3',
      ' helpers',
      ` helper 1 ${'9'.repeat(21)}`,
      ' helper 1 2 cgroups',
      ' helper 1 2 cg',
      ' helper cgroup',
      ' helper 1 2 await 3',
      ' helper 1 2 await 3 4 cgroup',
      ' helper 1 2 cgroup await',
      ' helper 1 2 awaits 3 4',
      ` helper 1 2 await ${'9'.repeat(11)} 4`,
    ]) {
      const text = `tether-start ${nonce}${tail}\nx`;
      for (let at = 0; at <= text.length; at++)
        expect(strip(nonce, text, at), `${JSON.stringify(tail)} cut at ${at}`).toEqual({
          out: text,
          announced: false,
          byHelper: false,
          helper: undefined,
        });
    }
  });

  it('a START of 0 (the helper could not read its stat) announces the helper without an identity', () => {
    const text = `tether-start ${nonce} helper 42 0\nx`;
    expect(strip(nonce, text, 5)).toEqual({ out: 'x', announced: true, byHelper: true, helper: undefined });
  });

  it("a helper's line after the wrapper's is the command's output: the first one wins", () => {
    const text = `${startLine(nonce)}${helperStartLine(nonce)}x`;
    expect(strip(nonce, text, 7)).toEqual({
      out: `${helperStartLine(nonce)}x`,
      announced: true,
      byHelper: false,
      helper: undefined,
    });
  });

  it('another nonce announces nothing', () => {
    const text = `${helperStartLine(createNonce())}x`;
    expect(strip(nonce, text, 3)).toEqual({
      out: text,
      announced: false,
      byHelper: false,
      helper: undefined,
    });
  });
});
