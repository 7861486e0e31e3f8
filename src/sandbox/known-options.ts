// The keys the sandbox entry points take (`sandbox.exec`, `sandbox.session` and its `spawn`,
// `sandbox.run`, `sandbox.sweep`), and a refusal for every other one, as `spawn()`'s
// (src/session/known-options.ts): a key accepted and ignored would run the command without what
// the caller asked (`sandbox.run(ch, argv, { timout: 500 })` ran with no deadline at all).
import { TetherError } from '../errors.js';
import { checkKnownKeys } from '../session/known-options.js';

/** The keys of `sandbox.sweep`'s options (SandboxSweepOptions). */
export const SANDBOX_SWEEP_KEYS = [
  'graceMs',
  'killAfterMs',
  'intervalMs',
  'budgetMs',
  'shell',
  'signal',
  'cancelBudgetMs',
  'clientFailedWith',
  'onRetry',
] as const;

/** The keys of the `sweep` option of a call or a session (SandboxSweepOptions less `signal`). */
export const NESTED_SWEEP_KEYS = SANDBOX_SWEEP_KEYS.filter((key) => key !== 'signal');

/** The keys of one command of a session (`session.spawn()`: SandboxCommandOptions). */
export const SANDBOX_COMMAND_KEYS = [
  'buffer',
  'maxBuffer',
  'encoding',
  'script',
  'input',
  'stdout',
  'stderr',
  'silenceMs',
] as const;

/** The keys of `sandbox.session`'s options (SandboxSessionOptions). */
export const SANDBOX_SESSION_KEYS = [
  'tag',
  'shell',
  'signal',
  'timeout',
  'sweep',
  'ledger',
  'helper',
] as const;

/** The keys of `sandbox.exec`'s options (SandboxExecOptions). */
export const SANDBOX_EXEC_KEYS = [
  ...SANDBOX_COMMAND_KEYS,
  'reject',
  'tag',
  'shell',
  'signal',
  'sweep',
  'ledger',
  'helper',
  'resident',
] as const;

/** The keys of `sandbox.run`'s options (SandboxRunOptions): the session's, a command's, `reject`. */
export const SANDBOX_RUN_KEYS = [
  ...SANDBOX_SESSION_KEYS,
  ...SANDBOX_COMMAND_KEYS,
  'reject',
  'resident',
] as const;

/**
 * Throws `TetherError` `INVALID_OPTION` for the first key of `options` not in `known`, and for
 * one of its `sweep` option not in `NESTED_SWEEP_KEYS` (named `sweep.KEY`), with the nearest known
 * key for a typo — `resident` by the call it belongs to. A value that is not an object is left to
 * the option's own check.
 */
export function checkSandboxKeys(options: unknown, known: readonly string[]): void {
  if (typeof options !== 'object' || options === null) return;
  // A key of another call, named as such (a fresh user's trial read "unknown option" as a typo).
  if (Object.hasOwn(options, 'resident') && !known.includes('resident'))
    throw new TetherError(
      'INVALID_OPTION',
      '`resident` is an option of sandbox.exec and sandbox.run alone: a sandbox.session of several commands does not run under the resident helper yet (docs/sandbox.md, "The resident helper")',
    );
  checkKnownKeys(options, known);
  const nested: unknown = (options as { sweep?: unknown }).sweep;
  if (!known.includes('sweep') || typeof nested !== 'object' || nested === null) return;
  try {
    checkKnownKeys(nested, NESTED_SWEEP_KEYS);
  } catch (error) {
    throw new TetherError('INVALID_OPTION', `invalid sweep: ${(error as Error).message}`);
  }
}
