// Arguments Node cannot pass on unchanged: it decodes argv as UTF-8, and each byte sequence that
// is not valid UTF-8 becomes U+FFFD, so `tether run -- touch $'\xff'` would touch another name.
// The kernel's copy (/proc/self/cmdline, proc(5)) still holds the bytes: a refusal names them.

import { isUtf8 } from 'node:buffer';
import { readFileSync } from 'node:fs';

/** An argument that is not valid UTF-8: its position among tether's arguments (1-based) and bytes. */
export interface UndecodableArgument {
  position: number;
  bytes: Buffer;
}

/**
 * The first of `argv`'s arguments (after node and the entry script) whose bytes, as the kernel
 * holds them in `/proc/self/cmdline`, are not valid UTF-8; undefined when all are, or when the
 * kernel's copy cannot be read or does not end with as many arguments (nothing is known then).
 */
export function undecodableArgument(
  argv: readonly string[],
  procRoot = '/proc',
): UndecodableArgument | undefined {
  let raw: Buffer;
  try {
    raw = readFileSync(`${procRoot}/self/cmdline`);
  } catch {
    return undefined;
  }
  const all: Buffer[] = [];
  for (let start = 0; start < raw.length; ) {
    const end = raw.indexOf(0, start);
    const stop = end < 0 ? raw.length : end;
    all.push(raw.subarray(start, stop));
    start = stop + 1;
  }
  const count = argv.length - 2;
  if (count <= 0 || all.length < count) return undefined;
  const ours = all.slice(all.length - count);
  for (const [i, bytes] of ours.entries()) {
    if (!isUtf8(bytes)) return { position: i + 1, bytes };
    // The kernel's copy must be the same argument: otherwise the match is off and nothing is known.
    if (bytes.toString('utf8') !== argv[i + 2]) return undefined;
  }
  return undefined;
}

/** The refusal's message: the position, the bytes in hex, and why. */
export function describeUndecodable({ position, bytes }: UndecodableArgument): string {
  const hex = [...bytes.subarray(0, 32)].map((b) => b.toString(16).padStart(2, '0')).join(' ');
  return `argument ${position} is not valid UTF-8 (bytes ${hex}${bytes.length > 32 ? ' …' : ''}): Node would pass it on changed (U+FFFD for each bad byte), so it is refused; name the file or value in UTF-8`;
}
