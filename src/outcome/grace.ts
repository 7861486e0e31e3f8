// The cancel grace of a fan-out's branches: the option, else TETHER_BRANCH_CANCEL_GRACE, else 5 s.
import { TetherError } from '../errors.js';
import { checkMs, MAX_TIMER_MS, parseDuration } from '../options.js';

/** How long an aborted branch is given to settle before it is undecided, ms (docs/outcomes.md). */
export const DEFAULT_BRANCH_GRACE_MS = 5000;

/** The environment variable that overrides `DEFAULT_BRANCH_GRACE_MS` (an option still wins). */
export const BRANCH_GRACE_ENV = 'TETHER_BRANCH_CANCEL_GRACE';

/**
 * The grace in ms: `graceMs` when given (checked: 0 to 2³¹−1), else `TETHER_BRANCH_CANCEL_GRACE`
 * — a whole number of milliseconds (`250`) or a duration with its unit (`500ms`, `5s`, `1.5s`,
 * `2m`) — else 5000. Throws `INVALID_OPTION` naming the option or the variable and the forms.
 */
export function branchGraceMs(graceMs: unknown, env: NodeJS.ProcessEnv = process.env): number {
  if (graceMs !== undefined) return checkMs('graceMs', graceMs);
  const text = env[BRANCH_GRACE_ENV];
  if (text === undefined) return DEFAULT_BRANCH_GRACE_MS;
  const trimmed = text.trim();
  const invalid = () =>
    new TetherError(
      'INVALID_OPTION',
      `invalid ${BRANCH_GRACE_ENV}=${JSON.stringify(text)}: expected whole milliseconds (5000) or a duration with its unit (500ms, 5s, 1.5s, 2m), at most ${MAX_TIMER_MS} ms`,
    );
  if (/^\d+$/.test(trimmed)) {
    const ms = Number(trimmed);
    if (ms > MAX_TIMER_MS) throw invalid();
    return ms;
  }
  if (!/^\d+(?:\.\d+)?(?:ms|s|m|h)$/.test(trimmed)) throw invalid();
  try {
    return parseDuration(BRANCH_GRACE_ENV, trimmed);
  } catch {
    throw invalid();
  }
}
