// The session tag's format: drawing, parsing and listing tags (src/proc/tag.ts).

import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  bootMicrosNow,
  createTag,
  parseTag,
  TAG_NAME_PATTERN,
  TAG_PREFIX,
  tagBegin,
  tagsIn,
} from '../../src/proc/tag.js';

// Microseconds since boot from /proc/uptime, read here apart from the code under test.
// Its seconds have two decimals: hundredths of a second.
function uptimeMicros(): number {
  const [seconds, hundredths] = (readFileSync('/proc/uptime', 'latin1').split(' ')[0] as string).split('.');
  return Number(seconds) * 1_000_000 + Number(hundredths) * 10_000;
}

describe('tags', () => {
  it('draws 32-hex tags that never repeat', () => {
    const a = createTag();
    const b = createTag();
    expect(a.name).toMatch(TAG_NAME_PATTERN);
    expect(a.entry).toBe(`${a.name}=1`);
    expect(a.name).not.toBe(b.name);
  });
  it('starts with random digits: tags drawn in the same moment have distinct short ids (ls shows 8 digits)', () => {
    const ids = new Set(
      Array.from({ length: 200 }, () => createTag().name.slice(TAG_PREFIX.length, TAG_PREFIX.length + 8)),
    );
    expect(ids.size).toBe(200);
  });
  it('parses NAME and NAME=1 and refuses anything looser', () => {
    const t = createTag();
    expect(parseTag(t.name).name).toBe(t.name);
    expect(parseTag(t.entry).name).toBe(t.name);
    for (const bad of ['', 'PATH', 'TETHER_SESSION_', `${t.name}=10`, t.name.toUpperCase(), `${t.name}0`]) {
      expect(() => parseTag(bad), bad).toThrow(expect.objectContaining({ code: 'INVALID_TAG' }));
    }
  });
  it('lists the tags of an environment, outer and inner', () => {
    const outer = createTag();
    const inner = createTag();
    const env = { [outer.name]: '1', [inner.name]: '1', [`${outer.name}_X`]: '1', PATH: '/bin' };
    expect(tagsIn(env).sort()).toEqual([outer.name, inner.name].sort());
  });
  it('carries the moment a tag was drawn: between two reads of /proc/uptime, to 10 ms', () => {
    const before = uptimeMicros();
    const t = createTag();
    const after = uptimeMicros();
    const begin = tagBegin(t.name);
    expect(begin, `${t.name} carries no begin`).toBeDefined();
    expect(begin).toBeGreaterThanOrEqual(before);
    expect(begin).toBeLessThanOrEqual(after);
    expect((begin as number) % 10_000, 'to the 10 ms of /proc/uptime').toBe(0);
    expect(Math.abs((bootMicrosNow() as number) - after)).toBeLessThan(1_000_000);
  });
  it('tells an older fully random tag apart: of 20000, about 2^-16 decode by chance', () => {
    let decoded = 0;
    for (let i = 0; i < 20_000; i++) {
      const hex = createHash('sha256').update(randomBytes(16)).digest('hex').slice(0, 32);
      if (tagBegin(`${TAG_PREFIX}${hex}`, Number.MAX_SAFE_INTEGER) !== undefined) decoded += 1;
    }
    expect(decoded, 'a random tag decoded more often than chance').toBeLessThanOrEqual(3);
  });
  it('refuses a begin later than now, a broken check, and anything not a tag name', () => {
    const t = createTag();
    const begin = tagBegin(t.name) as number;
    expect(tagBegin(t.name, begin)).toBe(begin);
    expect(tagBegin(t.name, begin - 1), 'a begin later than now (an earlier boot)').toBeUndefined();
    const hex = t.name.slice(TAG_PREFIX.length);
    const flipped = `${hex.slice(0, 28)}${((Number.parseInt(hex[28] as string, 16) + 1) % 16).toString(16)}${hex.slice(29)}`;
    expect(tagBegin(`${TAG_PREFIX}${flipped}`), 'a changed check').toBeUndefined();
    expect(tagBegin(t.entry), 'an entry, not a name').toBeUndefined();
    expect(tagBegin(t.name.toUpperCase())).toBeUndefined();
  });
});
