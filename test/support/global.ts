// globalSetup: probes the tools the tests need and prints what it found first (test/support/
// tools.ts: a missing one skips the tests that need it, named), compiles what is stale of the C
// fixtures into build/ and of the library into dist/ (the child Node programs import
// dist/index.js; test/support/stale.ts); at the end, the suite guard fails the run if any
// process this run started carrying a TETHER_SESSION_ tag is still alive (zombies excluded), or
// any session cgroup of this run's sessions still exists, listing them; and the temp check
// fails it if a directory this run made through testDir (test/support/temp.ts) is still in the
// temp directory (it is named, then removed), and names — a warning only — the other `tether-*`
// entries that appeared there during the run (on a shared machine they may be another process's,
// so they are never removed).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { FILE_VAR, ourSessionCgroups, watchRegistrations } from './leak-guard.js';
import { BUILD, ROOT } from './paths.js';
import { cmdlineOf, entryOf, environOfAnyThread, hasEntry, isDeadZombie, pids, readStat } from './proc.js';
import { recordLibraryBuild, staleBuilds } from './stale.js';
import { loggedTestDirs, removeTestDirs, TEMPS_LOG_VAR } from './temp.js';
import { describeTools, onPath, probeTools } from './tools.js';

/** Exported to everything this run starts, so that the guard looks only at this run's processes. */
const RUN_VAR = 'TETHER_ZOO_RUN';
const runId = `${process.pid}-${Date.now()}`;
const TAG = /(?:^|\0)(TETHER_SESSION_[0-9a-f]{32})=1(?=\0|$)/g;

/** The `tether-*` entries of the temp directory now. */
function tetherEntries(): Set<string> {
  try {
    return new Set(readdirSync(tmpdir()).filter((n) => n.startsWith('tether-')));
  } catch {
    return new Set();
  }
}

/**
 * The temp check: `made` are the suite directories the global setup made itself, `log` the file
 * every testDir of the run is appended to, `before` the `tether-*` entries at the start. Removes
 * `made`, and the logged directories a test file left (its after-hook removes them: one still
 * here is a file whose cleanup did not run or failed); returns the problems (fail the run) and
 * the warnings (entries not made by this run as far as the suite can tell).
 */
function checkTemps(
  made: string[],
  log: string,
  before: Set<string>,
): { problems: string[]; warnings: string[] } {
  const logged = loggedTestDirs(log);
  const left = logged.filter((dir) => existsSync(dir));
  const notRemoved = removeTestDirs(left);
  const notRemovedSuite = removeTestDirs(made);
  const ours = new Set([...logged, ...made].map((p) => p.slice(tmpdir().length + 1)));
  const foreign = [...tetherEntries()].filter((n) => !before.has(n) && !ours.has(n)).sort();
  const problems = [
    ...(left.length
      ? [
          `${left.length} temp dir(s) a test file made through testDir were left after it (removed now unless named below):`,
          ...left,
        ]
      : []),
    ...(notRemoved.length || notRemovedSuite.length
      ? ['temp dir(s) of this run that could not be removed:', ...notRemoved, ...notRemovedSuite]
      : []),
  ];
  const warnings = foreign.length
    ? [
        `${foreign.length} tether-* entr(y/ies) appeared in ${tmpdir()} during the run, not made through testDir (another process on this machine, tether itself, or a test that made its own; left as they are):`,
        ...foreign.map((n) => join(tmpdir(), n)),
      ]
    : [];
  return { problems, warnings };
}

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
    const file = entryOf(environ, FILE_VAR) ?? '(no test file in its environment)';
    const pool = entryOf(environ, 'VITEST_POOL_ID') ?? '?';
    found.push(
      `pid ${pid} state ${stat.state} ppid ${stat.ppid} (${cmdlineOf(pid)}) tags ${tags.join(',')}; started from ${file} (worker ${pool})`,
    );
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
  // After the builds (a setup that throws gets no teardown to remove these).
  const tempsBefore = tetherEntries();
  // The suite's own directories: removed at the end (those given in the environment are not ours).
  const suiteDirs: string[] = [];
  const suiteDir = (prefix: string) => {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    suiteDirs.push(dir);
    return dir;
  };
  const tempsLog = join(suiteDir('tether-suite-temps-'), 'made');
  process.env[TEMPS_LOG_VAR] = tempsLog;
  // `tether run` records in a ledger by default: this run's in a temp file, never the user's.
  // (Tests of the default path set XDG_STATE_HOME and clear TETHER_LEDGER themselves.)
  process.env.TETHER_LEDGER ??= join(suiteDir('tether-suite-ledger-'), 'ledger.db');
  // Live-session registrations (src/containment/live-session.ts) in this run's own directory,
  // never the machine's /run/tether/sessions — one level down, as the default is: the resident
  // helper's records go beside it (src/sandbox/resident-record.ts: its parent's `resident`), in
  // this run's directory too, not in a `/tmp/resident` every run shares and none removes.
  process.env.TETHER_SESSIONS_DIR ??= join(suiteDir('tether-suite-sessions-'), 'sessions');
  const sessions = process.env.TETHER_SESSIONS_DIR;
  // Guard registrations (a session that keeps a service writes one: src/session/keep-registrations.ts)
  // in this run's own state directory, never the machine's /run/tether.
  process.env.TETHER_GUARD_STATE ??= suiteDir('tether-suite-guard-state-');
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
      if (left.length === 0 && cgroups.length === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    watcher.close();
    const temps = checkTemps(suiteDirs, tempsLog, tempsBefore);
    if (temps.warnings.length) console.warn(`suite temp check (warning): ${temps.warnings.join('\n  ')}`);
    const problems = [
      ...(left.length ? [`${left.length} tagged process(es) still alive after the tests:`, ...left] : []),
      ...(cgroups.length
        ? [`${cgroups.length} session cgroup(s) this run made still exist:`, ...cgroups]
        : []),
      ...temps.problems,
    ];
    if (problems.length === 0) return;
    // A teardown's exception is only logged by vitest: set the exit code too.
    process.exitCode = 1;
    throw new Error(`suite guard: ${problems.join('\n  ')}`);
  };
}
