// `tether recover` removes the empty session cgroups no session claims (docs/ledger.md,
// "Recover", step 5): a `tether-<hex>` under `<cgroup2 mount>/tether` that holds nothing, whose
// tag has no live session and no running row, and that is older than the age bound. A populated
// one, a fresh one, one whose tag a running row names and one whose tag a live process carries
// stay. Real cgroups (root, a cgroup v2 mount and unshare(1) needed), the real CLI run in a cgroup
// namespace rooted in a private tree (so it sees no other test's cgroups); nothing is signalled.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { Ledger } from '../../src/ledger/index.js';
import { cgroup2Mount, cgroupName } from '../../src/proc/cgroup.js';
import { createTag } from '../../src/proc/tag.js';
import { removeMadeCgroups } from '../support/cgroups.js';
import { ROOT } from '../support/paths.js';
import { identityOf, isAlive } from '../support/proc.js';
import { cleanup, sleep, started, tempDir } from '../support/zoo.js';

const mount = cgroup2Mount();
const usable = mount !== undefined && process.getuid?.() === 0 && existsSync('/usr/bin/unshare');
const made: string[] = [];
const CLI = join(ROOT, 'bin/tether.cjs');
const run = promisify(execFile);

afterEach(async () => {
  cleanup();
  await removeMadeCgroups(made);
});

// A private cgroup tree for one test: `<mount>/tether-recover-test-<hex>`, whose `tether/` the
// recover below sees as `<cgroup2 mount>/tether` (so it never touches another test's cgroups).
function privateTree(): string {
  const root = join(mount as string, `tether-recover-test-${createTag().name.slice(-12)}`);
  mkdirSync(root);
  made.push(root);
  mkdirSync(join(root, 'tether'));
  made.push(join(root, 'tether'));
  return root;
}

// A session cgroup `tether-<tag's hex>` under the tree's `tether/`. Looked up at once (stat), as a
// session's own writes to it do: cgroupfs dates a directory from its first lookup.
function sessionCgroup(root: string, tag: string): string {
  const dir = join(root, 'tether', cgroupName(tag));
  mkdirSync(dir);
  made.push(dir);
  statSync(dir);
  return dir;
}

/**
 * `tether recover --json --ledger DB ARGS` run inside `root` in a cgroup namespace rooted there,
 * with its own cgroup2 mount: what it sees as `<mount>/tether` is `root/tether`.
 */
async function recoverIn(root: string, db: string, ...args: string[]) {
  const view = tempDir();
  const argv = [CLI, 'recover', '--json', '--ledger', db, '-k', '1s', '--kill-budget', '1s', ...args];
  const inner = `mount -t cgroup2 cgroup2 "$1" && shift && exec "$@"`;
  const outer = `echo $$ > "$1/cgroup.procs" && shift && exec unshare -Cm --propagation private sh -c '${inner}' inner "$@"`;
  try {
    const { stdout, stderr } = await run(
      'sh',
      ['-c', outer, 'outer', root, view, process.execPath, ...argv],
      {
        timeout: 60_000,
      },
    );
    return { code: 0, json: JSON.parse(stdout), stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, json: e.stdout ? JSON.parse(e.stdout) : null, stderr: e.stderr };
  }
}

function sleeper(env: NodeJS.ProcessEnv = process.env) {
  const child = spawn('sleep', ['600'], { stdio: 'ignore', env });
  const id = identityOf(child.pid ?? 0);
  if (!id) throw new Error('premise broken: the sleeper is gone');
  started.push(id);
  return id;
}

type Removed = { path: string; tag: string; outcome: string };
const named = (list: Removed[]) => list.map((c) => [c.tag, c.outcome, c.path.split('/').slice(-2).join('/')]);

describe.skipIf(!usable)('recover removes the empty session cgroups no session claims', () => {
  it('an empty old one with no row and no live session is removed (named in the JSON); populated, fresh, a running row’s and a live carrier’s stay', async () => {
    const root = privateTree();
    const db = join(tempDir(), 'ledger.db');
    const [stale, populated, ofRow, carried, fresh] = [1, 2, 3, 4, 5].map(() => createTag().name) as string[];
    const staleDir = sessionCgroup(root, stale as string);
    const populatedDir = sessionCgroup(root, populated as string);
    const member = sleeper();
    writeFileSync(join(populatedDir, 'cgroup.procs'), String(member.pid));
    const ofRowDir = sessionCgroup(root, ofRow as string);
    const ledger = await Ledger.open(db);
    // A running row whose supervisor (this process) is alive: recover leaves it, and its cgroup.
    await ledger.begin({ tag: ofRow as string, command: ['x'], location: { kind: 'local' } });
    await ledger.close();
    const carriedDir = sessionCgroup(root, carried as string);
    const carrier = sleeper({ ...process.env, [carried as string]: '1' });
    // Old ones 6.5 s, the fresh one younger than the 5 s bound across both runs (each an unshare,
    // a Node start and a /proc walk: a few seconds at most on a loaded machine).
    await sleep(6500);
    const freshDir = sessionCgroup(root, fresh as string);
    const where = `tether/${cgroupName(stale as string)}`;

    const dry = await recoverIn(root, db, '--dry-run', '--cgroup-min-age', '5s');
    expect(dry.code, dry.stderr).toBe(0);
    expect(named(dry.json.cgroups)).toEqual([[stale, 'would-remove', where]]);
    expect(existsSync(staleDir), 'a dry run removed a cgroup').toBe(true);

    const r = await recoverIn(root, db, '--cgroup-min-age', '5s');
    expect(r.code, r.stderr).toBe(0);
    expect(named(r.json.cgroups)).toEqual([[stale, 'removed', where]]);
    expect(existsSync(staleDir)).toBe(false);
    for (const kept of [populatedDir, ofRowDir, carriedDir, freshDir])
      expect(existsSync(kept), kept).toBe(true);
    expect(isAlive(member), 'the populated cgroup’s process was signalled').toBe(true);
    expect(isAlive(carrier)).toBe(true);
    expect(readFileSync(join(populatedDir, 'cgroup.procs'), 'utf8').trim()).toBe(String(member.pid));
  }, 60_000);

  it('with no ledger at all, an empty unclaimed cgroup is removed once older than the bound, not before', async () => {
    const root = privateTree();
    const db = join(tempDir(), 'ledger.db');
    const tag = createTag().name;
    const dir = sessionCgroup(root, tag);
    await sleep(1500);
    const young = await recoverIn(root, db, '--cgroup-min-age', '60s');
    expect(young.code, young.stderr).toBe(0);
    expect(young.json.cgroups).toEqual([]);
    expect(existsSync(dir)).toBe(true);
    const old = await recoverIn(root, db, '--cgroup-min-age', '1s');
    expect(old.code, old.stderr).toBe(0);
    expect(named(old.json.cgroups)).toEqual([[tag, 'removed', `tether/${cgroupName(tag)}`]]);
    expect(existsSync(dir)).toBe(false);
    expect(existsSync(db), 'recover created a ledger').toBe(false);
  }, 60_000);
});
