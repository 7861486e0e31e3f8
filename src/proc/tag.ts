// The session tag (decisions.md D1): an exported variable TETHER_SESSION_<hex>=1 that every
// descendant inherits through fork, exec, setsid and double forks. Its name also carries the
// moment it was drawn (`tagBegin`): a member of the session cannot change its tag's name without
// leaving the session, so that moment is a bound no member can move (docs/containment.md, "Live
// sessions").
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import { TetherError } from '../errors.js';

// The format is mirrored where TypeScript cannot be imported: native/scan.c (TAG_PREFIX,
// TAG_RECORD_LEN: the native scan's whole-record match) and src/sandbox/programs/sweep.sh (the
// container's sweep program checks its tag argument). test/proc/native.test.ts compares the
// native scan's finds with the JS path's on real tagged processes.

/** Prefix of every tether session variable. */
export const TAG_PREFIX = 'TETHER_SESSION_';

/** Hex digits after the prefix: 32 lowercase (`createTag` says what they hold). */
export const TAG_HEX_DIGITS = 32;

const TAG_HEX = `[0-9a-f]{${TAG_HEX_DIGITS}}`;

/** A tag name: the prefix and 32 lowercase hex digits. */
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

// The hex of a drawn tag: RANDOM_HEX random digits first (a short id — `tether ls`'s 8 digits, a
// prefix given to `show` — tells sessions drawn in the same second apart), then BEGIN_HEX digits
// of its begin (microseconds since boot), then CHECK_HEX of a SHA-256 over those and CHECK_LABEL
// (tells an older, fully random tag apart: one decodes by chance with odds 2^-16).
const RANDOM_HEX = 16;
const BEGIN_HEX = 12;
const CHECK_HEX = 4;
const CHECK_LABEL = 'tether-session-begin';

function beginCheck(beginHex: string): string {
  return createHash('sha256').update(`${CHECK_LABEL}:${beginHex}`).digest('hex').slice(0, CHECK_HEX);
}

/**
 * Microseconds since boot now (CLOCK_BOOTTIME, the clock of a process's start time, field 22 of
 * `/proc/<pid>/stat`), read from `<procRoot>/uptime`: to 10 ms, rounded down (as the kernel
 * rounds a start time down to its clock tick). Undefined when it cannot be read.
 */
export function bootMicrosNow(procRoot = '/proc'): number | undefined {
  let text: string;
  try {
    text = readSmall(`${procRoot}/uptime`);
  } catch {
    return undefined;
  }
  const [whole, frac = ''] = (text.split(' ')[0] ?? '').split('.');
  if (!/^\d+$/.test(whole ?? '') || !/^\d*$/.test(frac)) return undefined;
  return Number(whole) * 1_000_000 + Number(frac.padEnd(6, '0').slice(0, 6));
}

// `/proc/uptime` is two numbers and a newline (under 64 bytes), of which the first is parsed: one
// read into a buffer kept for it, where readFileSync takes an fstat and reads to EOF besides (a
// tag is drawn per call: about 30 µs of createTag's 54 µs on the 2-core test machine).
const UPTIME_MAX = 128;
const uptimeBuffer = Buffer.alloc(UPTIME_MAX);
function readSmall(path: string): string {
  const fd = openSync(path, 'r');
  try {
    return uptimeBuffer.toString('latin1', 0, readSync(fd, uptimeBuffer, 0, UPTIME_MAX, null));
  } finally {
    closeSync(fd);
  }
}

/**
 * Draws a fresh tag whose name carries the moment it was drawn: 16 random hex digits (64 bits),
 * then 12 of microseconds since boot (`bootMicrosNow`), then 4 of a check over those. Where `/proc/uptime`
 * cannot be read, all 32 are random (an older tether's shape: `tagBegin` gives undefined). Hex
 * cannot spell the words (KEY, TOKEN, SECRET) on which agent sandboxes drop variables.
 */
export function createTag(): SessionTag {
  const now = bootMicrosNow();
  if (now === undefined || now >= 16 ** BEGIN_HEX) {
    const hex = createHash('sha256').update(randomBytes(16)).digest('hex').slice(0, TAG_HEX_DIGITS);
    return tagFromName(`${TAG_PREFIX}${hex}`);
  }
  const begin = now.toString(16).padStart(BEGIN_HEX, '0');
  const random = randomBytes(RANDOM_HEX / 2).toString('hex');
  return tagFromName(`${TAG_PREFIX}${random}${begin}${beginCheck(begin)}`);
}

/**
 * The moment tag `name` (a tag name) was drawn, in microseconds since this boot, as `createTag`
 * wrote it into the name; undefined when the name carries none (an older tether's fully random
 * tag, a tag given by hand) or one later than now (`nowMicros`, default `bootMicrosNow()`: a tag
 * of an earlier boot, or not drawn by `createTag`). Every process started after its supervisor
 * drew it; only the supervisor itself (and what it ran before) started earlier.
 */
export function tagBegin(name: string, nowMicros = bootMicrosNow()): number | undefined {
  if (!TAG_NAME_PATTERN.test(name)) return undefined;
  const hex = name.slice(TAG_PREFIX.length);
  const begin = hex.slice(RANDOM_HEX, RANDOM_HEX + BEGIN_HEX);
  if (hex.slice(RANDOM_HEX + BEGIN_HEX) !== beginCheck(begin)) return undefined;
  const micros = Number.parseInt(begin, 16);
  return nowMicros === undefined || micros > nowMicros ? undefined : micros;
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
