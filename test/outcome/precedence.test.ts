// The precedence table: which code wins when several land together.
import { describe, expect, it } from 'vitest';
import { classify, PRECEDENCE, precedence, rank, TETHER_ERROR_CODES, TetherError } from '../../src/index.js';

const amb = () => new TetherError('AMBIGUOUS_EFFECT', 'unsettled');

describe('precedence', () => {
  it('orders every tether code once', () => {
    expect([...PRECEDENCE].sort()).toEqual([...TETHER_ERROR_CODES].sort());
  });

  it.each([
    // a, b → winner
    ['AMBIGUOUS_EFFECT', 'TIMED_OUT', 'AMBIGUOUS_EFFECT'],
    ['CANCELLED', 'AMBIGUOUS_EFFECT', 'AMBIGUOUS_EFFECT'],
    ['COMMAND_FAILED', 'AMBIGUOUS_EFFECT', 'AMBIGUOUS_EFFECT'],
    ['EXEC_STATUS_UNKNOWN', 'AMBIGUOUS_EFFECT', 'AMBIGUOUS_EFFECT'],
    ['AMBIGUOUS_EFFECT', 'BRANCH_UNDECIDED', 'AMBIGUOUS_EFFECT'],
    ['SURVIVORS', 'TIMED_OUT', 'SURVIVORS'],
    ['SWEEP_INCOMPLETE', 'CANCELLED', 'SWEEP_INCOMPLETE'],
    ['EXEC_STATUS_UNKNOWN', 'SURVIVORS', 'SURVIVORS'],
    ['CANCELLED', 'TIMED_OUT', 'TIMED_OUT'],
    ['COMMAND_FAILED', 'CANCELLED', 'CANCELLED'],
    ['COMMAND_FAILED', 'TIMED_OUT', 'TIMED_OUT'],
    ['MAX_BUFFER', 'COMMAND_FAILED', 'MAX_BUFFER'],
    ['ENOENT', 'COMMAND_FAILED', 'COMMAND_FAILED'],
    ['INVALID_OPTION', 'ENOENT', 'INVALID_OPTION'],
    ['ENOENT', undefined, 'ENOENT'],
    [undefined, undefined, undefined],
    ['ENOENT', 'EACCES', 'ENOENT'], // a tie keeps the first
  ])('%s vs %s → %s', (a, b, winner) => {
    expect(precedence(a, b)).toBe(winner);
    if (rank(a) !== rank(b)) expect(precedence(b, a)).toBe(winner); // order-free unless tied
  });

  it.each([
    [
      'a wrapper that gave its own code',
      () => [new TetherError('COMMAND_FAILED', 'wrapped', { cause: amb() })],
    ],
    ['a foreign wrapper', () => [Object.assign(new Error('w', { cause: amb() }), { code: 'E_WRAPPED' })]],
    ['a deadline that landed with it', () => [new TetherError('TIMED_OUT', 'deadline'), amb()]],
    ['a cancel that landed with it, either order', () => [amb(), new TetherError('CANCELLED', 'cancel')]],
    ['a cancel whose cause it is', () => [new TetherError('CANCELLED', 'cancel', { cause: amb() })]],
    [
      'an aggregate of a cancel and it',
      () => [new AggregateError([new TetherError('CANCELLED', 'c'), amb()])],
    ],
  ])('classify: an ambiguous effect outranks %s', (_label, errors) => {
    expect(classify(...errors())).toBe('AMBIGUOUS_EFFECT');
  });

  it('classify: the strongest code of the graph, else a foreign one, else undefined', () => {
    const cancel = new TetherError('CANCELLED', 'stop', {
      cause: new TetherError('COMMAND_FAILED', 'exit 143'),
    });
    expect(classify(cancel)).toBe('CANCELLED');
    expect(classify(cancel, new TetherError('TIMED_OUT', 'deadline'))).toBe('TIMED_OUT');
    expect(classify(Object.assign(new Error('x'), { code: 'ENOENT' }))).toBe('ENOENT');
    expect(classify(new Error('none'), 'AMBIGUOUS_EFFECT', null)).toBeUndefined();
  });
});
