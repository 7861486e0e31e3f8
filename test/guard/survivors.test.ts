// What outlived a tick is `survivors`, the sweep report's word (docs/guard.md, "Observability");
// the older `survived` is still on the tick's result and the counters, and in their JSON, until
// the next minor release. Prometheus keeps `tether_guard_survived_total`. A tick of the library
// in a real PID namespace and a cgroup the test made (test/guard/support.ts), over one orphan
// reparented to the namespace's PID 1; a signaller that answers `denied` for that orphan alone
// (as EPERM does for another uid's process) makes it outlive the tick.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { GuardCounters, TickResult } from '../../src/guard/guard.js';
import { cgroup2Mount } from '../../src/proc/cgroup.js';
import { createTag } from '../../src/proc/tag.js';
import { removeMadeCgroups } from '../support/cgroups.js';
import { tether } from '../support/cli.js';
import { isAlive } from '../support/proc.js';
import { tempDir } from '../support/zoo.js';
import { canRun, type Scenario, startScenario } from './support.js';

let scenario: Scenario | undefined;
const made: string[] = [];
afterEach(async () => {
  await scenario?.end();
  scenario = undefined;
  await removeMadeCgroups(made);
});

// The library's guard, run once by the scenario: every signal to the pid in $OUT/orphan.pid is
// refused; what it returned and counted, and the metrics of that tick, written to $OUT/lib.json.
const LIB_GUARD = `
const { readFileSync, renameSync, writeFileSync } = await import('node:fs');
const dist = (path) => new URL(path, 'file://' + process.env.DIST).href;
const { createGuard } = await import(process.env.DIST);
const { createSignaller } = await import(dist('./sweep/signal.js'));
const { guardRegistry } = await import(dist('./guard/metrics.js'));
const victim = Number(readFileSync(process.env.OUT + '/orphan.pid', 'utf8'));
const real = createSignaller();
const refused = (pid) => pid === victim;
const signaller = {
  mechanism: real.mechanism,
  send: (root, id, signal) => (refused(id.pid) ? 'denied' : real.send(root, id, signal)),
  hold: (root, id, evidence) => real.hold(root, id, evidence),
  holdAll: (root, requests) => real.holdAll(root, requests),
  holdCandidates: (root, entry, candidates, signal) => real.holdCandidates(root, entry, candidates, signal),
  sendHeld: (root, hold, signal) => (refused(hold.identity.pid) ? 'denied' : real.sendHeld(root, hold, signal)),
};
const guard = createGuard({ cgroup: process.env.CG, minAgeMs: 0, graceMs: 200, killAfterMs: 200, signaller, log: () => {} });
const r = await guard.tick();
await guard.stop();
const metrics = guardRegistry();
metrics.observe(r);
const text = JSON.stringify({
  victim,
  sameArray: r.survived === r.survivors,
  r,
  counters: guard.counters,
  metrics: await metrics.registry.metrics(),
});
writeFileSync(process.env.OUT + '/lib.json.tmp', text);
renameSync(process.env.OUT + '/lib.json.tmp', process.env.OUT + '/lib.json');
`;

describe.skipIf(!canRun)('what outlived a tick is `survivors`; `survived` stays one release', () => {
  it('a process every signal was refused to is in survivors and survived alike, on the result, the counters and in their JSON', async () => {
    scenario = await startScenario(`
      cat > "$OUT/lib-guard.mjs" <<'EOS'
      ${LIB_GUARD.trim().split('\n').join('\n      ')}
      EOS
      mark orphan sh -c 'sleep 600.3801 & echo $! > "$OUT/orphan.pid"'
      ready
      env GUARD_MARK="libguard.$RUN" "$NODE" "$OUT/lib-guard.mjs" 2>> "$OUT/stderr"
      park`);
    const s = scenario;
    await s.waitFile('ready');
    const [orphan] = s.find('orphan');
    expect(orphan, 'premise broken: the orphan did not start').toBeDefined();
    s.go();
    const lib = JSON.parse(await s.waitFile('lib.json')) as {
      victim: number;
      sameArray: boolean;
      r: TickResult;
      counters: GuardCounters;
      metrics: string;
    };
    const who = `sleep 600.3801 (pid ${lib.victim} in the namespace, the orphan of its PID 1)`;
    expect(
      isAlive(orphan as NonNullable<typeof orphan>),
      `premise broken: ${who} ended although every signal to it was refused`,
    ).toBe(true);
    expect(
      lib.r.survivors.map((p) => [p.pid, p.cmdline]),
      `${who} is not the one survivor: ${JSON.stringify(lib.r)}`,
    ).toEqual([[lib.victim, 'sleep 600.3801']]);
    expect(lib.sameArray, 'the deprecated name is not the same array on the result').toBe(true);
    expect(lib.r.survived, 'the JSON does not carry the deprecated name with the same value').toEqual(
      lib.r.survivors,
    );
    expect(lib.r.stopped).toEqual([]);
    expect(lib.counters).toMatchObject({ survivors: 1, survived: 1 });
    // The Prometheus name is the one dashboards already query.
    expect(lib.metrics).toMatch(/^tether_guard_survived_total 1$/m);
  }, 60_000);

  it('tether guard --once --json writes survivors and survived, the same', async () => {
    const dir = join(cgroup2Mount() as string, `tether-guard-survivors-${createTag().name.slice(-12)}`);
    mkdirSync(dir);
    made.push(dir);
    const env = { ...process.env, TETHER_SESSIONS_DIR: tempDir(), TETHER_GUARD_STATE: tempDir() };
    const ran = await tether(['guard', '--once', '--json', '--cgroup', dir], { env });
    expect(ran.code, ran.stderr).toBe(0);
    const tick = JSON.parse(ran.stdout) as Record<string, unknown>;
    expect(tick.survivors, `no survivors in the tick's JSON: ${ran.stdout}`).toEqual([]);
    expect(tick.survived, `no survived in the tick's JSON: ${ran.stdout}`).toEqual([]);
  }, 30_000);
});
