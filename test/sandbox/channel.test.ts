// commandChannel takes its prefix as an array of words: anything else — a string above all,
// `commandChannel('env')` — is INVALID_OPTION naming the shape expected, before anything runs. A
// string threw `TypeError: prefix.some is not a function`.
import { describe, expect, it } from 'vitest';
import { sandbox, TetherError } from '../../src/index.js';

function refusal(call: () => unknown): TetherError {
  try {
    call();
  } catch (error) {
    return error as TetherError;
  }
  throw new Error('the prefix was accepted');
}

describe('commandChannel refuses a prefix that is not an array of words', () => {
  it("a string, 'env': INVALID_OPTION naming the string and the array expected", () => {
    const error = refusal(() => sandbox.commandChannel('env' as unknown as string[]));
    expect(error).toBeInstanceOf(TetherError);
    expect(error.code).toBe('INVALID_OPTION');
    expect(error.message).toBe(
      'invalid exec channel prefix the string "env": expected an array of strings, a command and its arguments, such as ["docker", "exec", "-i", "ID"]',
    );
  });

  it('undefined, an object, an empty array, a non-string word: INVALID_OPTION each', () => {
    for (const prefix of [undefined, null, 42, { 0: 'env', length: 1 }, [], ['env', 3], ['']])
      expect(
        refusal(() => sandbox.commandChannel(prefix as unknown as string[])).code,
        JSON.stringify(prefix),
      ).toBe('INVALID_OPTION');
  });

  it('an array of words still runs the command on this machine', async () => {
    const r = await sandbox.exec(sandbox.commandChannel(['env']), ['echo', 'through the channel']);
    expect([r.exitCode, r.stdout]).toEqual([0, 'through the channel\n']);
  });
});
