// The sweep's two phase budgets as flags, one spelling for every command that sweeps
// (run, sweep, sandbox exec|sweep): `-k/--kill-after D` as in timeout(1) — SIGKILL D after the
// first signal, the TERM phase — with `--grace D` its alias, and `--kill-budget D` for the KILL
// phase. docs/cli.md#durations-and-phases.
import type { Command } from 'commander';
import { TetherError } from '../errors.js';
import { DEFAULT_GRACE_MS, DEFAULT_KILL_AFTER_MS, parseDuration } from '../options.js';

/** The phase flags as commander gives them (durations as typed, each undefined when not given). */
export interface PhaseFlags {
  killAfter?: string;
  grace?: string;
  killBudget?: string;
}

/** Adds `-k/--kill-after`, `--grace` (its alias) and `--kill-budget` to `command`. */
export function phaseOptions(command: Command): Command {
  return command
    .option(
      '-k, --kill-after <duration>',
      `SIGKILL this long after the first signal, as timeout(1): the TERM phase (default ${DEFAULT_GRACE_MS / 1000}s)`,
    )
    .option('--grace <duration>', 'the same as -k/--kill-after')
    .option(
      '--kill-budget <duration>',
      `KILL phase: how long to wait for SIGKILLed processes to go (default ${DEFAULT_KILL_AFTER_MS / 1000}s)`,
    );
}

/**
 * The sweep options of the phase flags, in ms: `graceMs` (the TERM phase) from `-k/--kill-after`
 * or `--grace`, `killAfterMs` (the KILL phase budget) from `--kill-budget`. Throws `TetherError`
 * `INVALID_OPTION` naming the flag for a bad duration, and for `--grace` and `--kill-after`
 * given two different durations (the same one spelled twice is taken).
 */
export function phaseBudgets(flags: PhaseFlags): { graceMs: number; killAfterMs: number } {
  const killAfter =
    flags.killAfter === undefined ? undefined : parseDuration('--kill-after', flags.killAfter);
  const alias = flags.grace === undefined ? undefined : parseDuration('--grace', flags.grace);
  // The same budget spelled twice (`--grace 3 -k 3000ms`) is one value; two values are refused.
  if (killAfter !== undefined && alias !== undefined && killAfter !== alias) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid --grace ${JSON.stringify(flags.grace)} with --kill-after ${JSON.stringify(flags.killAfter)}: they name one budget (the TERM phase); give one of them`,
    );
  }
  const grace = killAfter ?? alias ?? DEFAULT_GRACE_MS;
  const budget =
    flags.killBudget !== undefined ? parseDuration('--kill-budget', flags.killBudget) : DEFAULT_KILL_AFTER_MS;
  return { graceMs: grace, killAfterMs: budget };
}
