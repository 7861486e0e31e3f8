// The leak zoo: each shape of leftover must be gone after its session's sweep, every decoy
// must survive, and the report must list each leftover as stopped with how it was found. This
// file tests the env-tag layer alone (decisions.md D1); test/containment/shapes.test.ts runs the same
// shapes with the default containment.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isAlive } from '../support/proc.js';
import { SHAPES } from '../support/shapes.js';
import { cleanup, type Decoy, problemsOf, runShape, startFileDecoys } from '../support/zoo.js';

/** The env tag alone: each leftover must be found as a carrier or a carrier's descendant. */
const ENV_TAG = { containment: ['env-tag'] } as const;

let server: { decoy: Decoy; port: number };
let runner: Decoy[];

beforeAll(async () => {
  ({ server, runner } = await startFileDecoys());
});

afterEach(() => cleanup());

afterAll(() => {
  expect(isAlive(server.decoy.identity), 'the TCP server started before the sessions survived them all').toBe(
    true,
  );
  cleanup([server.decoy]);
});

describe('every leak shape is stopped and every decoy survives', () => {
  for (const shape of SHAPES) {
    it(`stops ${shape.name}`, async () => {
      const run = await runShape(shape, { port: server.port, options: ENV_TAG });
      expect(run.recorded.length, `${shape.script} recorded nothing`).toBeGreaterThan(0);
      if (shape.script === 'stdout-holder.sh') expect(run.result.outputTimedOut).toBe(true);
      expect(problemsOf(run, [server.decoy, ...runner])).toEqual([]);
    });
  }
});

// The whole zoo 20 rounds in a row, all shapes at once, runs with the default containment in
// test/containment/shapes.test.ts. With the env tag alone a re-exec loop can be mid-exec at both
// scans of a phase on a loaded machine (docs/sweep.md, What escapes this).
