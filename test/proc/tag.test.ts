// The session tag's format: drawing, parsing and listing tags (src/proc/tag.ts).
import { describe, expect, it } from 'vitest';
import { createTag, parseTag, TAG_NAME_PATTERN, tagsIn } from '../../src/proc/tag.js';

describe('tags', () => {
  it('draws 128-bit hex tags that never repeat', () => {
    const a = createTag();
    const b = createTag();
    expect(a.name).toMatch(TAG_NAME_PATTERN);
    expect(a.entry).toBe(`${a.name}=1`);
    expect(a.name).not.toBe(b.name);
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
});
