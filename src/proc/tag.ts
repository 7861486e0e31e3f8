// The session tag (decisions.md D1): an exported variable TETHER_SESSION_<hex>=1 that every
// descendant inherits through fork, exec, setsid and double forks.
import { createHash, randomBytes } from 'node:crypto';
import { TetherError } from '../errors.js';

// The format is mirrored where TypeScript cannot be imported: native/scan.c (TAG_PREFIX,
// TAG_RECORD_LEN: the native scan's whole-record match) and src/sandbox/programs/sweep.sh (the
// container's sweep program checks its tag argument). test/proc/native.test.ts compares the
// native scan's finds with the JS path's on real tagged processes.

/** Prefix of every tether session variable. */
export const TAG_PREFIX = 'TETHER_SESSION_';

/** Hex digits after the prefix: 32 lowercase (128 bits of a SHA-256 of the token). */
export const TAG_HEX_DIGITS = 32;

const TAG_HEX = `[0-9a-f]{${TAG_HEX_DIGITS}}`;

/** A tag name: the prefix and 32 lowercase hex digits (128 bits of a SHA-256 of the token). */
export const TAG_NAME_PATTERN = new RegExp(`^${TAG_PREFIX}${TAG_HEX}$`);

/** A session's environ record, whole: `TETHER_SESSION_<32 hex>=1`. */
export const TAG_ENTRY_PATTERN = new RegExp(`^${TAG_PREFIX}${TAG_HEX}=1$`);

/** Bytes of a session's environ record `TETHER_SESSION_<32 hex>=1`: 49. A longer one is not one. */
export const TAG_RECORD_LENGTH = TAG_PREFIX.length + TAG_HEX_DIGITS + 2;

/** A session's variable: `name` is exported as `name=1`; `entry` is that exact environ record. */
export interface SessionTag {
  name: string;
  entry: string;
}

/**
 * Draws a fresh tag: a random 128-bit token, hashed with SHA-256, the first 128 bits in hex.
 * Hex cannot spell the words (KEY, TOKEN, SECRET) on which agent sandboxes drop variables.
 */
export function createTag(): SessionTag {
  const token = randomBytes(16);
  const hex = createHash('sha256').update(token).digest('hex').slice(0, TAG_HEX_DIGITS);
  return tagFromName(`${TAG_PREFIX}${hex}`);
}

/**
 * Reads a tag given by a user (`NAME` or `NAME=1`). Throws `TetherError` `INVALID_TAG` for
 * anything else: a sweep by a loose pattern could signal processes outside the session.
 */
export function parseTag(input: string): SessionTag {
  const name = input.endsWith('=1') ? input.slice(0, -2) : input;
  if (!TAG_NAME_PATTERN.test(name)) {
    throw new TetherError(
      'INVALID_TAG',
      `invalid tag ${JSON.stringify(input)}: expected TETHER_SESSION_ followed by 32 lowercase hex digits (optionally "=1")`,
    );
  }
  return tagFromName(name);
}

/** The tag names present in an environment (the sessions a process belongs to). */
export function tagsIn(env: NodeJS.ProcessEnv): string[] {
  return Object.keys(env).filter((k) => TAG_NAME_PATTERN.test(k) && env[k] === '1');
}

function tagFromName(name: string): SessionTag {
  return { name, entry: `${name}=1` };
}
