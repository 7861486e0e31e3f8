// `encoding`, execa's values: how `spawn()` gives a command's output. The session reads bytes
// (`'utf8'` strings or `'buffer'`: src/session/collect.ts); every other encoding is read as bytes
// and decoded here, once, when the result is built.
import { constants } from 'node:buffer';
import { TetherError } from '../errors.js';

/** execa's text encodings: `lines` splits them. */
export const TEXT_ENCODINGS = ['utf8', 'utf16le'] as const;
/** execa's binary encodings: `lines` leaves them whole (as execa, which ignores it there). */
export const BINARY_ENCODINGS = ['buffer', 'hex', 'base64', 'base64url', 'latin1', 'ascii'] as const;

/** An `encoding` `spawn()` takes: execa's values. */
export type SpawnEncoding = (typeof TEXT_ENCODINGS)[number] | (typeof BINARY_ENCODINGS)[number];

const ENCODINGS: readonly string[] = [...TEXT_ENCODINGS, ...BINARY_ENCODINGS];
// Spellings Node takes and execa refuses, with the name to use (as execa's message gives it).
const ALIASES: Readonly<Record<string, SpawnEncoding>> = {
  'utf-8': 'utf8',
  'utf-16le': 'utf16le',
  ucs2: 'utf16le',
  'ucs-2': 'utf16le',
  binary: 'latin1',
};

// Throws `INVALID_OPTION` for an encoding execa does not take, naming the right spelling if any.
export function checkEncoding(encoding: unknown): void {
  if (encoding === undefined || ENCODINGS.includes(encoding as string)) return;
  const lower = typeof encoding === 'string' ? encoding.toLowerCase() : undefined;
  const right = lower === undefined ? undefined : (ALIASES[lower] ?? ENCODINGS.find((e) => e === lower));
  const shown = typeof encoding === 'string' ? JSON.stringify(encoding.slice(0, 60)) : String(encoding);
  throw new TetherError(
    'INVALID_OPTION',
    right !== undefined
      ? `invalid encoding: ${shown} (did you mean '${right}'?)`
      : `invalid encoding: ${shown} (expected ${ENCODINGS.map((e) => `'${e}'`).join(', ')})`,
  );
}

/** The encoding the session reads with: `'utf8'` as is, every other as bytes. */
export function sessionEncoding(encoding: SpawnEncoding | undefined): 'utf8' | 'buffer' {
  return encoding === undefined || encoding === 'utf8' ? 'utf8' : 'buffer';
}

/**
 * The bound the session reads bytes to for `encoding`, so that decoding them never passes the
 * largest string V8 makes (hex doubles the bytes, base64 makes 4 characters of 3).
 */
export function boundFor(encoding: SpawnEncoding | undefined, maxBuffer: number): number {
  const perByte = encoding === 'hex' ? 2 : encoding === 'base64' || encoding === 'base64url' ? 4 / 3 : 1;
  return perByte === 1
    ? maxBuffer
    : Math.min(maxBuffer, Math.floor((constants.MAX_STRING_LENGTH - 4) / perByte));
}

/** What the session read (`value`, a string or bytes), as `encoding` gives it. */
export function decode(value: string | Buffer, encoding: SpawnEncoding | undefined): string | Buffer {
  if (typeof value === 'string' || encoding === undefined || encoding === 'buffer' || encoding === 'utf8')
    return value;
  return value.toString(encoding);
}
