// globalSetup: probes the tools the tests need and prints what it found first (test/support/
// tools.ts: a missing one skips the tests that need it, named), compiles what is stale of the C
// fixtures into build/ and of the library into dist/ (the child Node programs import
// dist/index.js; test/support/stale.ts); at the end, the suite guard fails the run if any
// process this run started carrying a TETHER_SESSION_ tag is still alive (zombies excluded), or
// any session cgroup of this run's sessions still exists, listing them.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { ourSessionCgroups, watchRegistrations } from './leak-guard.js';
import { BUILD, ROOT } from './paths.js';
import { cmdlineOf, environOfAnyThread, hasEntry, isDeadZombie, pids, readStat } from './proc.js';
import { recordLibraryBuild, staleBuilds } from './stale.js';
import { describeTools, onPath, probeTools } from './tools.js';

/** Exported to everything this run starts, so that the guard looks only at this run's processes. */
const RUN_VAR = 'TETHER_ZOO_RUN';
const runId = `${process.pid}-${Date.now()}`;
const TAG = /(?:^|\0)(TETHER_SESSION_[0-9a-f]{32})=1(?=\0|$)/g;

function taggedAlive(ignore: Set<string>): string[] {
  const found: string[] = [];
  for (const pid of pids()) {
    if (pid === process.pid) continue;
    const stat = readStat(pid);
    if (!stat || isDeadZombie(stat)) continue; // gone, or only its exit status left
    const environ = environOfAnyThread(pid); // '' when gone or unreadable
    if (!hasEntry(environ, `${RUN_VAR}=${runId}`)) continue; // not started by this run
    const tags = [...environ.matchAll(TAG)].map((m) => m[1] as string).filter((t) => !ignore.has(t));
    if (tags.length === 0) continue;
    found.push(`pid ${pid} state ${stat.state} ppid ${stat.ppid} (${cmdlineOf(pid)}) tags ${tags.join(',')}`);
  }
  return found;
}

export default function setup(project: TestProject) {
  const tools = probeTools();
  console.log(
    [
      'tools the tests use (probed once, before any test; a missing one skips the tests that need it):',
      ...describeTools(tools),
    ].join('\n'),
  );
  project.provide('tetherTools', tools);
  // Where every tool was installed (.ci/run), a missing one is a broken machine, not a skip.
  if (process.env.TETHER_TEST_REQUIRE_TOOLS === '1') {
    const absent = tools.filter(
      (t) => !t.path && !(t.name === 'pg_ctl' && process.env.TETHER_TEST_POSTGRES_URL),
    );
    if (absent.length > 0) {
      throw new Error(
        `TETHER_TEST_REQUIRE_TOOLS=1 and ${absent.map((t) => `${t.name} is not installed (apt-get install ${t.package})`).join('; ')}`,
      );
    }
  }
  if (!onPath('gcc')) {
    throw new Error('gcc is not installed: the C fixtures need it (apt-get install gcc libc6-dev)');
  }
  process.env[RUN_VAR] = runId;
  // `tether run` records in a ledger by default: this run's in a temp file, never the user's.
  // (Tests of the default path set XDG_STATE_HOME and clear TETHER_LEDGER themselves.)
  process.env.TETHER_LEDGER ??= join(mkdtempSync(join(tmpdir(), 'tether-suite-ledger-')), 'ledger.db');
  // Live-session registrations (src/containment/live-session.ts) in this run's own directory,
  // never the machine's /run/tether/sessions.
  process.env.TETHER_SESSIONS_DIR ??= mkdtempSync(join(tmpdir(), 'tether-suite-sessions-'));
  const sessions = process.env.TETHER_SESSIONS_DIR;
  // Guard registrations (a session that keeps a service writes one: src/session/keep-registrations.ts)
  // in this run's own state directory, never the machine's /run/tether.
  process.env.TETHER_GUARD_STATE ??= mkdtempSync(join(tmpdir(), 'tether-suite-guard-state-'));
  mkdirSync(BUILD, { recursive: true });
  const stale = staleBuilds();
  for (const { source, out } of stale.fixtures) {
    execFileSync('gcc', ['-O1', '-Wall', '-o', out, source, '-lpthread'], {
      timeout: 60_000,
      stdio: 'inherit',
    });
  }
  if (stale.library) {
    const began = Date.now();
    execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['-p', ROOT], {
      cwd: ROOT,
      timeout: 180_000,
      stdio: 'inherit',
    });
    recordLibraryBuild(began);
  }
  // The helper for every architecture a package carries, the native scan loop (optional:
  // without a compiler the JS path is used, and the native test says so), and the CLI's bundle
  // that bin/tether.cjs runs (from dist/cli/, with its code cache), and the JSON Schemas of what
  // tether writes (dist/schemas/). Each script keeps outputs
  // that are up to date (under a second in all on a built tree).
  const scripts: [string, string[]][] = [
    ['scripts/build-helper.mjs', []],
    ['scripts/build-native.mjs', ['--host']],
    ['scripts/build-cli.mjs', []],
    ['scripts/build-schemas.mjs', []],
  ];
  for (const [script, args] of scripts) {
    execFileSync(process.execPath, [join(ROOT, script), ...args], {
      cwd: ROOT,
      timeout: 120_000,
      stdio: 'inherit',
    });
  }
  mkdirSync(sessions, { recursive: true, mode: 0o700 });
  const ours = new Set<string>();
  const watcher = watchRegistrations(sessions, ours);
  // Tags of sessions this run itself is part of (the suite run inside tether) are not leaks.
  const own = new Set(Object.keys(process.env).filter((k) => /^TETHER_SESSION_[0-9a-f]{32}$/.test(k)));
  return async () => {
    let left: string[] = [];
    let cgroups: string[] = [];
    for (let i = 0; i < 20; i++) {
      left = taggedAlive(own);
      cgroups = ourSessionCgroups(ours);
      if (left.length === 0 && cgroups.length === 0) {
        watcher.close();
        return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    watcher.close();
    // A teardown's exception is only logged by vitest: set the exit code too.
    process.exitCode = 1;
    const problems = [
      ...(left.length ? [`${left.length} tagged process(es) still alive after the tests:`, ...left] : []),
      ...(cgroups.length
        ? [`${cgroups.length} session cgroup(s) this run made still exist:`, ...cgroups]
        : []),
    ];
    throw new Error(`suite guard: ${problems.join('\n  ')}`);
  };
}
