// globalSetup: compiles the C fixtures into build/ and the library into dist/ (the child Node
// programs import dist/index.js); at the end, the suite guard fails the run if any process
// carrying a TETHER_SESSION_ tag is still alive (zombies excluded), listing them.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUILD, C_FIXTURES, ROOT } from './paths.js';
import { cmdlineOf, environOfAnyThread, hasEntry, isDeadZombie, pids, readStat } from './proc.js';

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

export default function setup() {
  process.env[RUN_VAR] = runId;
  // `tether run` records in a ledger by default: this run's in a temp file, never the user's.
  // (Tests of the default path set XDG_STATE_HOME and clear TETHER_LEDGER themselves.)
  process.env.TETHER_LEDGER ??= join(mkdtempSync(join(tmpdir(), 'tether-suite-ledger-')), 'ledger.db');
  mkdirSync(BUILD, { recursive: true });
  for (const file of readdirSync(C_FIXTURES)) {
    if (!file.endsWith('.c')) continue;
    const out = join(BUILD, `zoo-${file.slice(0, -2)}`);
    execFileSync('gcc', ['-O1', '-Wall', '-o', out, join(C_FIXTURES, file), '-lpthread'], {
      timeout: 60_000,
      stdio: 'inherit',
    });
  }
  execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['-p', ROOT], {
    cwd: ROOT,
    timeout: 180_000,
    stdio: 'inherit',
  });
  execFileSync(process.execPath, [join(ROOT, 'scripts/build-helper.mjs')], {
    cwd: ROOT,
    timeout: 120_000,
    stdio: 'inherit',
  });
  // The native scan loop (optional: without a compiler the JS path is used, and the native
  // test says so).
  execFileSync(process.execPath, [join(ROOT, 'scripts/build-native.mjs'), '--host'], {
    cwd: ROOT,
    timeout: 120_000,
    stdio: 'inherit',
  });
  // Tags of sessions this run itself is part of (the suite run inside tether) are not leaks.
  const own = new Set(Object.keys(process.env).filter((k) => /^TETHER_SESSION_[0-9a-f]{32}$/.test(k)));
  return async () => {
    let left: string[] = [];
    for (let i = 0; i < 20; i++) {
      left = taggedAlive(own);
      if (left.length === 0) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    // A teardown's exception is only logged by vitest: set the exit code too.
    process.exitCode = 1;
    throw new Error(
      `suite guard: ${left.length} tagged process(es) still alive after the tests:\n  ${left.join('\n  ')}`,
    );
  };
}
