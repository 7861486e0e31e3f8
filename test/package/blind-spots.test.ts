// The blind spots a result or report may name are values of the package (src/index.ts, the
// `sandbox` namespace): a caller compares `blindSpots` against them. `export type *` had given
// ENV_TAG_BLIND_SPOT and PRIVILEGED_BLIND_SPOT as types alone (undefined at run time), and the
// sandbox's were not exported at all (a fresh user's finding).
import { describe, expect, it } from 'vitest';
import * as tether from '../../src/index.js';
import {
  HELPER_BLIND_SPOT,
  HELPER_CGROUP_BLIND_SPOT,
  IN_CALL_BLIND_SPOT,
} from '../../src/sandbox/session-helper.js';
import {
  END_LINE_BLIND_SPOT,
  HELPER_SWEEP_ANSWER_BLIND_SPOT,
  RESIDENT_KEY_BLIND_SPOT,
  SWEEP_ANSWER_BLIND_SPOT,
} from '../../src/sandbox/sweep-output.js';
import { ENV_TAG_BLIND_SPOT, PRIVILEGED_BLIND_SPOT, REPORT_VERSION } from '../../src/sweep/report.js';

describe('the blind spots, as the package exports them', () => {
  it('the report module’s constants are values at the top level', () => {
    expect(tether.ENV_TAG_BLIND_SPOT).toBe(ENV_TAG_BLIND_SPOT);
    expect(tether.PRIVILEGED_BLIND_SPOT).toBe(PRIVILEGED_BLIND_SPOT);
    expect(tether.REPORT_VERSION).toBe(REPORT_VERSION);
  });

  it('the sandbox’s are values of the sandbox namespace', () => {
    const expected = {
      END_LINE_BLIND_SPOT,
      HELPER_BLIND_SPOT,
      HELPER_CGROUP_BLIND_SPOT,
      HELPER_SWEEP_ANSWER_BLIND_SPOT,
      IN_CALL_BLIND_SPOT,
      RESIDENT_KEY_BLIND_SPOT,
      SWEEP_ANSWER_BLIND_SPOT,
    };
    for (const [name, text] of Object.entries(expected)) {
      expect(typeof text, name).toBe('string');
      expect((tether.sandbox as Record<string, unknown>)[name], name).toBe(text);
    }
  });
});
