// Validation and units for options shared by the library and the CLI.
import { TetherError } from './errors.js';

/** Default grace of the TERM phase, ms (decisions.md D3). */
export const DEFAULT_GRACE_MS = 5000;
/** Default budget of the KILL phase, ms (decisions.md D3). */
export const DEFAULT_KILL_AFTER_MS = 3000;
/** Interval between scans, ms (decisions.md D3). */
export const DEFAULT_SCAN_INTERVAL_MS = 50;
/** How long the payload's output is awaited past its exit, ms (decisions.md D8). */
export const DEFAULT_OUTPUT_CAP_MS = 2000;

/** The longest delay a Node timer holds (2³¹−1 ms, about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2_147_483_647;

/** Checks a duration option in ms: a number in [`min`, 2³¹−1]. Throws `INVALID_OPTION` naming it. */
export function checkMs(name: string, value: unknown, min = 0): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > MAX_TIMER_MS) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${name}: ${String(value)} (expected a number of milliseconds from ${min} to ${MAX_TIMER_MS})`,
    );
  }
  return value;
}

const UNITS_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

// timeout(1)'s number (strtod(3)'s decimal form: `5`, `.5`, `1.`, `1.5`, `+2`, `1e3`), then a unit.
const DURATION = /^\+?(\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?(ms|s|m|h|d)?$/;
// strtod(3)'s infinity, any case, with timeout(1)'s optional unit: no limit.
const INFINITE = /^\+?inf(?:inity)?(?:ms|s|m|h|d)?$/i;

/** How `parseDuration` reads an option. */
export interface DurationForms {
  /** `inf`/`infinity` is accepted and returned as `Infinity` (`--timeout`: no timeout). */
  infinite?: boolean;
}

/**
 * Parses a CLI duration to whole ms: a number as timeout(1) takes one (`5`, `.5`, `1.`, `1.5`,
 * `1e3`; bare: seconds) with an optional unit `ms`, `s`, `m`, `h` or `d`. A duration that is not
 * 0 but under 1 ms is 1 ms (rounded up, never to 0, which means "none" or "at once" to its
 * callers); others are rounded to the nearest ms. `inf`/`infinity` (any case) is `Infinity`
 * when `forms.infinite`, else refused. Throws `INVALID_OPTION` naming `name` and the accepted
 * forms, and for more than 2³¹−1 ms (about 24.8 days: a Node timer's bound).
 */
export function parseDuration(name: string, text: string, forms: DurationForms = {}): number {
  const trimmed = text.trim();
  if (INFINITE.test(trimmed)) {
    if (forms.infinite) return Number.POSITIVE_INFINITY;
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${name} ${JSON.stringify(text)}: expected a finite duration (at most 24 days, 2147483647 ms)`,
    );
  }
  const match = trimmed.length <= 64 ? DURATION.exec(trimmed) : null;
  if (!match) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${name} ${JSON.stringify(text)}: expected a duration such as 500ms, 5s, 1.5s, 2m (a number as timeout(1) takes it, bare for seconds; units ms, s, m, h, d)`,
    );
  }
  const [, digits = '', exponent, unit = 's'] = match;
  // Zero only when every digit is: `1e-400` is a duration too short for a double, not 0.
  if (!/[1-9]/.test(digits)) return 0;
  const ms = Math.max(1, Math.round(Number(`${digits}e${exponent ?? 0}`) * (UNITS_MS[unit] ?? 1000)));
  if (!(ms <= MAX_TIMER_MS)) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${name} ${JSON.stringify(text)}: longer than 24 days (2147483647 ms)`,
    );
  }
  return ms;
}

/**
 * Throws `TetherError` `INVALID_OPTION` for the first own enumerable key of `options` that is not
 * in `known`, naming it: with `hints[key]` when the key is one a peer library takes and tether
 * does not (said, with what to do instead), else with the nearest known key when it looks like a
 * typo (`did you mean …?`). A key accepted and ignored would run without what the caller asked
 * (a `timout` runs with no deadline at all).
 */
export function refuseUnknownKeys(
  options: object,
  known: readonly string[],
  hints: Readonly<Record<string, string>> = {},
): void {
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    const instead = Object.hasOwn(hints, key) ? hints[key] : undefined;
    if (instead !== undefined)
      throw new TetherError('INVALID_OPTION', `execa's \`${key}\` is not supported by tether (${instead})`);
    const near = nearest(key, known);
    throw new TetherError(
      'INVALID_OPTION',
      `unknown option \`${clipKey(key)}\`${near === undefined ? '' : ` (did you mean \`${near}\`?)`}`,
    );
  }
}

/**
 * The known key closest to `key` by edit distance (case ignored), if close enough to be a typo:
 * at most 2 edits, and fewer than the key has characters.
 */
export function nearest(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const d = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return bestDistance <= 2 && bestDistance < key.length ? best : undefined;
}

/** Levenshtein distance: insertions, deletions and substitutions, one row at a time. */
export function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      next[j] = Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, (row[j - 1] ?? 0) + cost);
    }
    row = next;
  }
  return row[b.length] ?? 0;
}

function clipKey(key: string): string {
  return key.length > 60 ? `${key.slice(0, 60)}…` : key;
}
