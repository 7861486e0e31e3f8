// `tether run --keep GLOB=TTL [--keep-owner NAME]`: the declared services of a run, parsed into
// the session's `keep` rules (docs/cli.md, "Keeping a service").
import { hostname, userInfo } from 'node:os';
import { TetherError } from '../errors.js';
import { parseDuration } from '../options.js';
import type { KeepRule } from '../sweep/keep.js';

const KEEP_FORM =
  "--keep GLOB=TTL, e.g. --keep 'redis-server *=2h' (TTL: 500ms, 30s, 10m, 2h; at most 24 days)";

/**
 * The rules of each `--keep GLOB=TTL`, the TTL after the last `=` (a glob may hold `=`:
 * `*--port=6379*=2h`), all owned by `owner` (default: `user@host`). The TTL is required: a
 * service kept past its session says for how long. Throws `INVALID_OPTION` naming `--keep` and the
 * accepted form, or `--keep-owner` when it is empty (with or without `--keep`); a bad glob is the
 * session's `INVALID_OPTION` (`keep[i].match`).
 */
export function parseKeepFlags(values: readonly string[], owner: string = defaultOwner()): KeepRule[] {
  if (owner.trim() === '')
    throw new TetherError(
      'INVALID_OPTION',
      `invalid --keep-owner ${JSON.stringify(owner)}: expected a name for who answers for the kept services (default: user@host, here ${defaultOwner()})`,
    );
  return values.map((value) => {
    const at = value.lastIndexOf('=');
    if (at <= 0 || at === value.length - 1)
      throw new TetherError(
        'INVALID_OPTION',
        `invalid --keep ${JSON.stringify(value)}: expected ${KEEP_FORM}`,
      );
    let ttlMs: number;
    try {
      ttlMs = parseDuration('--keep', value.slice(at + 1));
    } catch {
      throw new TetherError(
        'INVALID_OPTION',
        `invalid --keep ${JSON.stringify(value)}: ${JSON.stringify(value.slice(at + 1))} is not a TTL (expected ${KEEP_FORM})`,
      );
    }
    if (ttlMs < 1)
      throw new TetherError(
        'INVALID_OPTION',
        `invalid --keep ${JSON.stringify(value)}: a TTL of 0 (expected ${KEEP_FORM})`,
      );
    return { match: value.slice(0, at), ttlMs, owner };
  });
}

/** Who a kept service belongs to when `--keep-owner` is not given: `user@host`. */
export function defaultOwner(): string {
  let user: string;
  try {
    user = userInfo().username;
  } catch {
    user = `uid ${process.getuid?.() ?? '?'}`; // no passwd entry for this uid
  }
  return `${user}@${hostname()}`;
}
