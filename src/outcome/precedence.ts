// Which code wins when several land together (a wrapper's, a deadline's, a cancel's, a
// branch's): one ordered list and the pure functions that read it. docs/outcomes.md "Precedence".
import { TETHER_ERROR_CODES, type TetherErrorCode } from '../errors.js';
import { codesIn } from './classify.js';

/**
 * Every tether code, strongest first. What may still be running outranks what is unknown about
 * the command, which outranks why it was stopped, which outranks how it ended by itself;
 * failures of tether's own machinery and of the caller's input come last. Why each rank is
 * where it is: docs/outcomes.md "Precedence".
 */
export const PRECEDENCE: readonly TetherErrorCode[] = [
  // The command may still run: never retry.
  'AMBIGUOUS_EFFECT',
  'BRANCH_UNDECIDED',
  // Something outlived the session, or the sweep cannot say what did.
  'SURVIVORS',
  'SWEEP_INCOMPLETE',
  'SWEEP_CUT',
  // The command's own end is unknown (swept: nothing runs, but its work may be half done).
  'EXEC_STATUS_UNKNOWN',
  'CHANNEL_UNREACHABLE',
  'INPUT_CUT',
  'WRITE_REFUSED',
  // Why it was stopped: a deadline, then the caller; each explains the failed exit it caused.
  'TIMED_OUT',
  'CANCELLED',
  'MAX_BUFFER',
  // How it ended by itself.
  'COMMAND_FAILED',
  'SPAWN_FAILED',
  // tether's machinery and the caller's input.
  'CONTAINMENT_UNAVAILABLE',
  'LEDGER_CORRUPT',
  'LEDGER_UNAVAILABLE',
  'LEDGER_LOCKED',
  'SESSION_ENDED',
  'GUARD_STOPPED',
  'INVALID_TAG',
  'INVALID_OPTION',
];

/**
 * The rank of a code: 0 for `AMBIGUOUS_EFFECT`, up to 21 for the last tether code; a code of
 * another library (`'ENOENT'`) ranks below every tether code (22), no code at all lowest (23).
 */
export function rank(code: string | undefined): number {
  if (code === undefined) return PRECEDENCE.length + 1;
  const at = PRECEDENCE.indexOf(code as TetherErrorCode);
  return at === -1 ? PRECEDENCE.length : at;
}

/** The code that wins of two (the first on a tie); undefined only when both are. Pure. */
export function precedence(a: string | undefined, b: string | undefined): string | undefined {
  return rank(b) < rank(a) ? b : a;
}

/**
 * The winning code over every code stated anywhere in the errors' graphs (`codesIn`: brands,
 * `code`s, causes, aggregates): `classify(new TetherError('CANCELLED', …, { cause: ambiguous }))`
 * is `'AMBIGUOUS_EFFECT'`. Undefined when no error states a code. Never throws.
 */
export function classify(...errors: unknown[]): string | undefined {
  let best: string | undefined;
  for (const error of errors) for (const code of codesIn(error)) best = precedence(best, code);
  return best;
}

/** True for a code of tether's own (`TETHER_ERROR_CODES`). */
export function isTetherCode(code: unknown): code is TetherErrorCode {
  return typeof code === 'string' && (TETHER_ERROR_CODES as readonly string[]).includes(code);
}
