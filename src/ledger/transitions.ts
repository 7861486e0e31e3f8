// The ledger's transition table (docs/ledger.md, "States and transitions"): the current state of
// a record × the end a writer proposes → apply or refuse. Pure and the same for every store: a
// store only compare-and-sets, `Ledger` reads, asks `decide`, and writes.
import { SESSION_STATES, type SessionState } from './types.js';

/** An end a writer can propose: every state but `running` (a record is `running` only at `begin`). */
export type SessionEnd = Exclude<SessionState, 'running'>;

/** Every end, in SESSION_STATES order. */
export const SESSION_ENDS: readonly SessionEnd[] = SESSION_STATES.filter(
  (state): state is SessionEnd => state !== 'running',
);

/** What a proposed end does to a record: written, or refused (the record stays as it stands). */
export type Decision = 'apply' | 'refuse';

// Which ends each state still accepts. `succeeded`, `ambiguous` and `recovered` are final.
// `cancelled` accepts only `ambiguous` (an end that could not be proven replaces the cancel, and
// a later cancel is refused because `ambiguous` is final); an ordinary `failed` loses to an
// operator cancel in either write order (failed → cancelled applies, cancelled → failed is
// refused); `parked` (recover could not reach the session) accepts what a later recover or
// operator learns.
const ACCEPTS: Record<SessionState, readonly SessionEnd[]> = {
  running: SESSION_ENDS,
  succeeded: [],
  failed: ['cancelled', 'ambiguous'],
  cancelled: ['ambiguous'],
  ambiguous: [],
  recovered: [],
  parked: ['recovered', 'ambiguous', 'cancelled'],
};

/** Whether `proposed` may replace a record in state `current`. */
export function decide(current: SessionState, proposed: SessionEnd): Decision {
  return ACCEPTS[current].includes(proposed) ? 'apply' : 'refuse';
}

/** A state no end can change. */
export function isFinal(state: SessionState): boolean {
  return ACCEPTS[state].length === 0;
}

/**
 * Whether the command of a session in this state may be started again: false while it may still
 * run (`running`, `parked`) or when its end could not be proven (`ambiguous`).
 */
export function retryAllowed(state: SessionState): boolean {
  return state !== 'ambiguous' && state !== 'running' && state !== 'parked';
}
