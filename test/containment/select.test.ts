// Containment selection (src/containment/select.ts): the `containment` option and the CLI's
// --containment, planned into layers or refused.
import { describe, expect, it } from 'vitest';
import { parseContainment, planContainment } from '../../src/containment/select.js';
import { TetherError } from '../../src/errors.js';

describe('containment options', () => {
  it('plans auto and explicit lists', () => {
    expect(planContainment('auto')).toEqual({ helper: 'try', cgroup: 'try', pidns: false });
    expect(planContainment(['env-tag'])).toEqual({ helper: 'off', cgroup: 'off', pidns: false });
    expect(planContainment(['cgroup'])).toEqual({ helper: 'required', cgroup: 'required', pidns: false });
    expect(planContainment(['pid-namespace'])).toEqual({ helper: 'required', cgroup: 'off', pidns: true });
  });
  it('refuses anything else with INVALID_OPTION naming the accepted values', () => {
    for (const bad of ['all', [], ['env-tag', 'jail'], 42, null]) {
      let error: unknown;
      try {
        planContainment(bad);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(TetherError);
      expect((error as TetherError).code).toBe('INVALID_OPTION');
      expect((error as TetherError).message).toMatch(/'env-tag', 'subreaper', 'cgroup', 'pid-namespace'/);
    }
  });
  it('parses the CLI form: auto, a comma list; pidns is pid-namespace, with a warning', () => {
    const warned: string[] = [];
    const parse = (text: string) => parseContainment('--containment', text, (m) => warned.push(m));
    expect(parse('auto')).toBe('auto');
    expect(parse('env-tag, subreaper,pid-namespace')).toEqual(['env-tag', 'subreaper', 'pid-namespace']);
    expect(warned).toEqual([]);
    expect(parse('env-tag, subreaper,pidns')).toEqual(['env-tag', 'subreaper', 'pid-namespace']);
    expect(warned).toEqual(['--containment pidns is spelled pid-namespace now (pidns is still accepted)']);
    expect(() => parse('subreaper,jail')).toThrow(
      /invalid --containment "subreaper,jail": "jail" is not a layer \(expected auto, or a comma list of env-tag, subreaper, cgroup, pid-namespace\)/,
    );
  });
});
