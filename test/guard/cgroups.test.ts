// A guard tick removes the empty session cgroups no session claims under its target
// (docs/guard.md, "Empty session cgroups"): a `tether-<hex>` at any depth below the target
// cgroup that holds nothing, whose tag no process carries and no live supervisor signs, older
// than the bound. A populated one, a fresh one, a carried tag's, and one outside the target stay.
// Real cgroups the test made (root and a cgroup v2 mount needed), a guard of the library whose
// target is the test's own cgroup; nothing is signalled (the one process in the target is
// younger than --min-age).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createGuard, type TickResult } from '../../src/guard/guard.js';
import { guardRegistry } from '../../src/guard/metrics.js';
import { cgroup2Mount, cgroupName } from '../../src/proc/cgroup.js';
import { createTag } from '../../src/proc/tag.js';
import { removeMadeCgroups } from '../support/cgroups.js';
import { tether } from '../support/cli.js';
import { identityOf, isAlive } from '../support/proc.js';
import { cleanup, sleep, started, tempDir } from '../support/zoo.js';

const mount = cgroup2Mount();
const usable = mount !== undefined && process.getuid?.() === 0;
const made: string[] = [];

afterEach(async () => {
  cleanup();
  await removeMadeCgroups(made);
});

// A cgroup the test made (removed after it, deepest first). Looked up at once (stat), as a
// session's own writes to it do: cgroupfs dates a directory from its first lookup.
function cgroup(...parts: string[]): string {
  const dir = join(...parts);
  mkdirSync(dir);
  made.push(dir);
  statSync(dir);
  return dir;
}

function sleeper(env: NodeJS.ProcessEnv = process.env) {
  const child = spawn('sleep', ['600'], { stdio: 'ignore', env });
  const id = identityOf(child.pid ?? 0);
  if (!id) throw new Error('premise broken: the sleeper is gone');
  started.push(id);
  return id;
}

const named = (r: TickResult, root: string) =>
  r.cgroups.map((c) => [c.outcome, c.path.slice(root.length + 1), c.tag]).sort();

describe.skipIf(!usable)('a guard tick removes the empty session cgroups no session claims', () => {
  it('under its cgroup target, at any depth, nested first; populated, fresh, carried and outside ones stay', async () => {
    const run = createTag().name.slice(-12);
    const root = cgroup(mount as string, `tether-guard-cgroups-${run}`);
    const outside = cgroup(mount as string, `tether-guard-cgroups-${run}-outside`);
    const [stale, deep, outer, nested, populated, carried, fresh, decoy] = Array.from(
      { length: 8 },
      () => createTag().name,
    ) as [string, string, string, string, string, string, string, string];
    cgroup(root, 'tether');
    const staleDir = cgroup(root, 'tether', cgroupName(stale));
    const deepDir = cgroup(cgroup(root, 'sub'), cgroupName(deep));
    const outerDir = cgroup(root, 'tether', cgroupName(outer));
    const nestedDir = cgroup(outerDir, cgroupName(nested));
    const populatedDir = cgroup(root, 'tether', cgroupName(populated));
    const member = sleeper();
    writeFileSync(join(populatedDir, 'cgroup.procs'), String(member.pid));
    const carriedDir = cgroup(root, 'tether', cgroupName(carried));
    const carrier = sleeper({ ...process.env, [carried]: '1' }); // outside the target: a kept service's shape
    const decoyDir = cgroup(outside, cgroupName(decoy));
    // The old ones 6 s old, the fresh one younger than the 5 s bound across both ticks (each a
    // walk of this machine's /proc: well under a second, a few on a loaded machine).
    await sleep(6000);
    const freshDir = cgroup(root, 'tether', cgroupName(fresh));
    const options = {
      cgroup: root,
      cgroupMinAgeMs: 5000,
      minAgeMs: 3_600_000, // the one process in the target (the populated cgroup's) is never stopped
      sessionsDir: tempDir(),
      stateDir: tempDir(),
      log: () => {},
    };
    const gone: [string, string][] = [
      [staleDir, stale],
      [deepDir, deep],
      [outerDir, outer],
      [nestedDir, nested],
    ];
    const paths = gone.map(([p]) => p);
    const expected = (outcome: string) =>
      gone.map(([p, tag]) => [outcome, p.slice(root.length + 1), tag]).sort();

    const dry = await createGuard({ ...options, dryRun: true }).tick();
    expect(dry.complete, JSON.stringify(dry.warnings)).toBe(true);
    expect(named(dry, root)).toEqual(expected('would-remove'));
    for (const p of paths) expect(existsSync(p), `a dry run removed ${p}`).toBe(true);

    const guard = createGuard(options);
    const r = await guard.tick();
    expect(r.complete, JSON.stringify(r.warnings)).toBe(true);
    expect(named(r, root)).toEqual(expected('removed'));
    expect(r.cgroups.findIndex((c) => c.tag === nested)).toBeLessThan(
      r.cgroups.findIndex((c) => c.tag === outer),
    );
    expect(guard.counters.cgroups).toBe(4);
    const metrics = guardRegistry();
    metrics.observe(dry);
    metrics.observe(r);
    expect(await metrics.registry.metrics()).toMatch(/^tether_guard_cgroups_removed_total 4$/m);
    for (const p of paths) expect(existsSync(p), `${p} was not removed`).toBe(false);
    for (const kept of [populatedDir, carriedDir, freshDir, decoyDir])
      expect(existsSync(kept), `${kept} was removed`).toBe(true);
    expect(r.stopped).toEqual([]);
    expect(isAlive(member), 'the populated cgroup’s process was signalled').toBe(true);
    expect(isAlive(carrier), 'the carrier was signalled').toBe(true);
    expect(readFileSync(join(populatedDir, 'cgroup.procs'), 'utf8').trim()).toBe(String(member.pid));
  }, 60_000);

  it('tether guard --once --cgroup-min-age removes one, names it in --json and its log line; a younger bound leaves it', async () => {
    const root = cgroup(mount as string, `tether-guard-cgroups-${createTag().name.slice(-12)}`);
    const tag = createTag().name;
    const dir = cgroup(root, cgroupName(tag));
    await sleep(1500);
    const env = { ...process.env, TETHER_SESSIONS_DIR: tempDir(), TETHER_GUARD_STATE: tempDir() };
    const young = await tether(['guard', '--once', '--cgroup', root, '--cgroup-min-age', '1h'], { env });
    expect(young.code, young.stderr).toBe(0);
    expect(young.stderr).not.toMatch(/session cgroup/);
    expect(existsSync(dir), 'a cgroup younger than --cgroup-min-age was removed').toBe(true);
    const r = await tether(['guard', '--once', '--json', '--cgroup', root, '--cgroup-min-age', '1s'], {
      env,
    });
    expect(r.code, r.stderr).toBe(0);
    const tick = JSON.parse(r.stdout) as TickResult;
    expect(tick.cgroups.map((c) => [c.outcome, c.path, c.tag])).toEqual([['removed', dir, tag]]);
    expect(r.stderr).toContain(`removed empty session cgroup ${dir} (tag ${tag}`);
    expect(existsSync(dir)).toBe(false);
  }, 60_000);
});
