// The transition table, pair by pair: every current state × every proposed end.
import { describe, expect, it } from 'vitest';
import {
  decide,
  isFinal,
  retryAllowed,
  SESSION_ENDS,
  type SessionEnd,
} from '../../src/ledger/transitions.js';
import { SESSION_STATES, type SessionState } from '../../src/ledger/types.js';

// Written out in full (not derived from the code under test): a = apply, r = refuse, in
// SESSION_ENDS order: succeeded failed cancelled ambiguous recovered parked.
const TABLE: Record<SessionState, string> = {
  running: 'a a a a a a',
  succeeded: 'r r r r r r',
  failed: 'r r a a r r',
  cancelled: 'r r r a r r',
  ambiguous: 'r r r r r r',
  recovered: 'r r r r r r',
  parked: 'r r a a a r',
};

describe('transitions', () => {
  it('the table names every state and every end', () => {
    expect(Object.keys(TABLE).sort()).toEqual([...SESSION_STATES].sort());
    expect(SESSION_ENDS).toEqual(SESSION_STATES.filter((s) => s !== 'running'));
  });

  for (const current of SESSION_STATES) {
    const row = (TABLE[current] as string).split(' ');
    SESSION_ENDS.forEach((proposed: SessionEnd, i) => {
      const expected = row[i] === 'a' ? 'apply' : 'refuse';
      it(`${current} × ${proposed} → ${expected}`, () => {
        expect(decide(current, proposed)).toBe(expected);
      });
    });
  }

  it('succeeded, ambiguous and recovered are final; the others are not', () => {
    expect(SESSION_STATES.filter(isFinal)).toEqual(['succeeded', 'ambiguous', 'recovered']);
  });

  it('a retry is refused for ambiguous, running and parked only', () => {
    expect(SESSION_STATES.filter((s) => !retryAllowed(s))).toEqual(['running', 'ambiguous', 'parked']);
  });
});
