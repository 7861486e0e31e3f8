// sweep()'s options (src/sweep/sweep-options.ts SWEEP_KEYS): a key it does not take is refused by
// name before anything is scanned or signalled — a `graceMS` would otherwise sweep with the
// default grace, silently.
import { describe, expect, it } from 'vitest';
import { sweep, sweepSync } from '../../src/index.js';
import { createTag } from '../../src/proc/tag.js';

describe('sweep options', () => {
  it('refuses an unknown key by name, with the nearest one for a typo, in sweep and sweepSync (thrown, as a bad tag is)', () => {
    const tag = createTag();
    expect(() => sweep({ tag, graceMS: 1 } as never)).toThrow(
      /unknown option `graceMS` \(did you mean `graceMs`\?\)/,
    );
    expect(() => sweepSync({ tag, bogus: true } as never)).toThrow(/unknown option `bogus`/);
    expect(() => sweep(undefined as never)).toThrow(/invalid options: expected an object/);
  });

  it('still takes every key it knows: a sweep of a fresh tag finds nothing and completes', async () => {
    const report = await sweep({ tag: createTag(), graceMs: 100, killAfterMs: 100, intervalMs: 10 });
    expect(report.complete).toBe(true);
    expect(report.stopped).toEqual([]);
  });
});
