// StreamSent (src/sandbox/resident.ts): what a resident call sent of a stdin stream, checked
// against the end line's word of what the command took — all of it with `eof`, a prefix without.
import { describe, expect, it } from 'vitest';
import { STREAM_PREFIX_MAX, StreamSent, sha256 } from '../../src/sandbox/resident.js';

function sent(chunks: Buffer[], ended = true): StreamSent {
  const s = new StreamSent();
  for (const c of chunks) s.push(c);
  if (ended) s.end();
  return s;
}

describe('StreamSent', () => {
  const all = Buffer.from('hello, stream');
  const chunks = [all.subarray(0, 5), all.subarray(5)];

  it('takes all of it with eof, only once the stream ended here, its count and hash the line', () => {
    expect(sent(chunks).took({ bytes: all.length, sha256: sha256(all), ended: true })).toBe(true);
    expect(sent(chunks, false).took({ bytes: all.length, sha256: sha256(all), ended: true })).toBe(false);
    expect(sent(chunks).took({ bytes: 5, sha256: sha256(all.subarray(0, 5)), ended: true })).toBe(false);
    expect(
      sent(chunks).took({ bytes: all.length, sha256: sha256(Buffer.from('hello, STREAM')), ended: true }),
    ).toBe(false);
  });

  it('takes a prefix without eof (the command ended first), and nothing past what was sent', () => {
    expect(sent(chunks, false).took({ bytes: 7, sha256: sha256(all.subarray(0, 7)), ended: false })).toBe(
      true,
    );
    expect(sent(chunks).took({ bytes: 0, sha256: sha256(Buffer.alloc(0)), ended: false })).toBe(true);
    expect(sent(chunks).took({ bytes: 7, sha256: sha256(Buffer.from('another')), ended: false })).toBe(false);
    expect(sent(chunks).took({ bytes: all.length + 1, sha256: sha256(all), ended: false })).toBe(false);
    expect(sent(chunks).took({ bytes: -1, sha256: '', ended: false })).toBe(false);
  });

  it('a prefix past what it keeps cannot be checked: not taken', () => {
    const big = Buffer.alloc(STREAM_PREFIX_MAX + 10, 0x61);
    const s = sent([big], false);
    expect(
      s.took({ bytes: STREAM_PREFIX_MAX, sha256: sha256(big.subarray(0, STREAM_PREFIX_MAX)), ended: false }),
    ).toBe(true);
    expect(
      s.took({
        bytes: STREAM_PREFIX_MAX + 1,
        sha256: sha256(big.subarray(0, STREAM_PREFIX_MAX + 1)),
        ended: false,
      }),
    ).toBe(false);
  });
});
