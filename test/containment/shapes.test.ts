// Shapes only the containment layers catch: with default options
// each one is stopped, found by the helper or the cgroup, with every decoy spared; the env tag
// alone misses each one (the premise); and all of them with the whole local-session zoo, all
// at once: 20 rounds in a row under TETHER_TEST_FULL=1 (`npm run stress`), a sample of ROUNDS by
// default (every shape in each).
import { existsSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { counted, sample } from '../support/full.js';
import { isAlive } from '../support/proc.js';
import { SHAPES } from '../support/shapes.js';
import { cleanup, type Decoy, describeProcess, problemsOf, startFileDecoys } from '../support/zoo.js';
import { CONTAINMENT_SHAPES } from './containment-shapes.js';
import { type ContainedRun, runContained, workerSubtreeLeft } from './support.js';

let server: { decoy: Decoy; port: number };
let runner: Decoy[];

beforeAll(async () => {
  ({ server, runner } = await startFileDecoys());
});

afterEach(() => cleanup());

afterAll(async () => {
  expect(isAlive(server.decoy.identity), 'the TCP server started before the sessions survived them all').toBe(
    true,
  );
  cleanup([server.decoy]);
  expect(await workerSubtreeLeft(), 'processes left under the test worker').toEqual([]);
});

/** Problems specific to the layers: which were active, and that the session cgroup is gone. */
function layerProblems(run: ContainedRun): string[] {
  const at = `[${run.shape.name}, ${run.tagName}]`;
  const problems: string[] = [];
  const { report } = run.result;
  if (report.layers.join(',') !== 'env-tag,subreaper,cgroup')
    problems.push(`${at} layers ${report.layers.join(',')} (notes: ${report.notes.join('; ')})`);
  if (!run.cgroupAtReady?.endsWith(`/tether-${run.tagName.slice(-32)}`))
    problems.push(`${at} the payload was in cgroup ${run.cgroupAtReady}, not the session's`);
  if (report.cgroup !== run.cgroupAtReady)
    problems.push(`${at} report.cgroup ${report.cgroup} is not ${run.cgroupAtReady}`);
  if (run.cgroupAtReady && existsSync(run.cgroupAtReady))
    problems.push(`${at} the session cgroup ${run.cgroupAtReady} still exists after the sweep`);
  return problems;
}

describe('default containment stops each shape the env tag misses, and spares every decoy', () => {
  for (const shape of CONTAINMENT_SHAPES) {
    it(`stops ${shape.name}`, async () => {
      const run = await runContained(shape, { port: server.port });
      expect(run.recorded.length, `${shape.script} recorded nothing`).toBeGreaterThan(0);
      expect([...problemsOf(run, [server.decoy, ...runner]), ...layerProblems(run)]).toEqual([]);
    });
  }
});

describe("the premise: with containment ['env-tag'] each shape's leftovers survive the sweep", () => {
  for (const shape of CONTAINMENT_SHAPES) {
    it(`the env tag alone misses ${shape.name}`, async () => {
      const run = await runContained(shape, { port: server.port }, { containment: ['env-tag'] });
      const { report } = run.result;
      expect(report.layers).toEqual(['env-tag']);
      expect(report.cgroup).toBeNull();
      expect(run.recorded.length, `${shape.script} recorded nothing`).toBeGreaterThan(0);
      const missed = run.recorded.filter((r) => isAlive(r.identity));
      expect(
        missed.map((r) => r.label),
        'every leftover survives an env-tag-only sweep',
      ).toEqual(run.recorded.map((r) => r.label));
      const listed = run.recorded.filter((r) =>
        report.stopped.some((s) => s.pid === r.identity.pid && s.startTime === r.identity.startTime),
      );
      expect(listed.map((r) => describeProcess(r.identity, r.cmdline))).toEqual([]);
      // cleanup() (afterEach) kills them: they are in `started`.
    });
  }
});

const ROUNDS = sample(2, 20);

describe(`every containment shape and every zoo shape, all at once, rounds in a row (default options): ${counted(ROUNDS, 20, 'rounds')}`, () => {
  it('stops every shape in every round and spares every decoy', async () => {
    // Several layers are on: a zoo shape's process may be seen first by any of them.
    const shapes = [...SHAPES.map((shape) => ({ ...shape, anyLayer: true })), ...CONTAINMENT_SHAPES];
    for (let round = 1; round <= ROUNDS; round++) {
      const runs = await Promise.all(
        shapes.map((shape) =>
          runContained(
            { ...shape, graceMs: shape.graceMs ? 600 : undefined },
            { port: server.port, storm: 500 },
          ),
        ),
      );
      const problems = runs.flatMap((run) => [
        ...problemsOf(run, [server.decoy, ...runner]),
        ...layerProblems(run),
      ]);
      expect(problems, `round ${round}`).toEqual([]);
      cleanup();
    }
  }, 240_000);
});
