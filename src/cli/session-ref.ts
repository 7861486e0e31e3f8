// A session named by hand, as git names a commit: the whole tag, or a unique prefix of its hex
// digits (with or without TETHER_SESSION_), or `--last` (docs/cli.md, "tether show").
import { TetherError } from '../errors.js';
import type { SessionRecord } from '../ledger/types.js';
import { TAG_HEX_DIGITS, TAG_PREFIX } from '../proc/tag.js';

/** Fewest hex digits a prefix must have: fewer would match by accident more often than not. */
export const MIN_PREFIX_DIGITS = 4;

/** Hex digits `tether ls` shows at least; more where two sessions share them. */
export const SHORT_ID_DIGITS = 8;

/** What a reference picked: the one session, or why none (`candidates` when several match). */
export type SessionPick =
  | { record: SessionRecord }
  | { record?: undefined; problem: 'none' | 'ambiguous'; candidates: SessionRecord[] };

/**
 * The hex digits a user's reference stands for: `TETHER_SESSION_<hex>`, `<hex>`, either with
 * `=1`. Throws `TetherError` `INVALID_TAG` for anything else (no hex, upper case, too short).
 */
export function parseSessionRef(input: string): string {
  let hex = input.endsWith('=1') ? input.slice(0, -2) : input;
  if (hex.startsWith(TAG_PREFIX)) hex = hex.slice(TAG_PREFIX.length);
  if (!new RegExp(`^[0-9a-f]{${MIN_PREFIX_DIGITS},${TAG_HEX_DIGITS}}$`).test(hex))
    throw new TetherError(
      'INVALID_TAG',
      `invalid session ${JSON.stringify(input)}: expected a tag (TETHER_SESSION_ and 32 lowercase hex digits) ` +
        `or at least ${MIN_PREFIX_DIGITS} of its first hex digits, as tether ls shows them`,
    );
  return hex;
}

/** The record whose tag's hex digits start with `hex`, or none, or the several that do. */
export function pickSession(records: readonly SessionRecord[], hex: string): SessionPick {
  const candidates = records.filter((r) => r.tag.startsWith(`${TAG_PREFIX}${hex}`));
  const [only] = candidates;
  if (candidates.length === 1 && only) return { record: only };
  return { problem: candidates.length === 0 ? 'none' : 'ambiguous', candidates };
}

/** The newest record by `createdAt` (the later in the list on a tie), or undefined. */
export function lastSession(records: readonly SessionRecord[]): SessionRecord | undefined {
  let last: SessionRecord | undefined;
  for (const r of records) if (!last || r.createdAt >= last.createdAt) last = r;
  return last;
}

/**
 * Each tag's short id: its first `SHORT_ID_DIGITS` hex digits, or as many more as tell it
 * apart from every other tag in `tags` (a tag listed twice counts once). Keyed by tag.
 */
export function shortIds(tags: readonly string[]): Map<string, string> {
  const hexes = [...new Set(tags)].map((t) => t.slice(TAG_PREFIX.length)).sort();
  const ids = new Map<string, string>();
  hexes.forEach((hex, i) => {
    const shared = Math.max(common(hex, hexes[i - 1]), common(hex, hexes[i + 1]));
    ids.set(`${TAG_PREFIX}${hex}`, hex.slice(0, Math.max(SHORT_ID_DIGITS, shared + 1)));
  });
  return ids;
}

function common(a: string, b: string | undefined): number {
  if (b === undefined) return 0;
  let n = 0;
  while (n < a.length && a[n] === b[n]) n++;
  return n;
}
