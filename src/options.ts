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

const UNITS_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * Parses a CLI duration: `500ms`, `5s`, `1.5s`, `2m`, `1h`, or a bare number of seconds.
 * Throws `INVALID_OPTION` naming `name` and the accepted forms.
 */
export function parseDuration(name: string, text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!match) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${name} ${JSON.stringify(text)}: expected a duration such as 500ms, 5s, 1.5s, 2m`,
    );
  }
  const ms = Math.round(Number(match[1]) * (UNITS_MS[match[2] ?? 's'] ?? 1000));
  if (!Number.isFinite(ms) || ms > MAX_TIMER_MS) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${name} ${JSON.stringify(text)}: longer than 24 days (2147483647 ms)`,
    );
  }
  return ms;
}
