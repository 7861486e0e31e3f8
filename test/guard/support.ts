// A guard scenario: a real PID namespace (`unshare --pid --fork --mount-proc`) whose init, a
// shell, first joins a cgroup v2 the test made, so everything started in the namespace is in the
// target. The script the test writes runs there with these shell functions:
//   mark NAME CMD…   runs CMD with GUARD_MARK=NAME.<run> in its environment (the test finds
//                    every process carrying it, from the host's /proc: ground truth); in the
//                    foreground only (`mark … &` would leave a subshell of the init as parent);
//   ready            tells the test the scenario is set up, then waits for its `go`;
//   guard ARGS…      runs `tether guard ARGS` in the background under a shell (an ancestor in
//                    the target, marked `ancestor`), stdout appended to $OUT/stdout (JSON
//                    lines), stderr to $OUT/stderr, its status to $OUT/rc, one line a run;
//   guard_wait       waits (the shell's wait: no child) until the last guard run has ended;
//   park             keeps the namespace alive until the test ends it.
// At the end the cgroup is killed as a whole (cgroup.kill) and removed, and the namespace's init
// killed: nothing the test started is left.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TickResult } from '../../src/guard/guard.js';
import { findCgroup2Mount } from '../../src/proc/cgroup.js';
import { ROOT } from '../support/paths.js';
import { environOf, isAlive, type ProcessId, pids, readStat } from '../support/proc.js';
import { testDir } from '../support/temp.js';

export const TETHER = join(ROOT, 'bin/tether.cjs');
export const DIST = join(ROOT, 'dist/index.js');

/** The v2 mount, or undefined (the tests are skipped without one, or without root). */
export function cgroupMount(): string | undefined {
  const found = findCgroup2Mount();
  return 'mount' in found ? found.mount : undefined;
}

export const canRun = process.getuid?.() === 0 && cgroupMount() !== undefined;

/**
 * The command (file and argv) that runs `argv` as PID 1 of a new PID namespace with its own
 * /proc (`unshare --pid --fork --kill-child --mount-proc`): SIGKILL to the process spawned ends
 * the namespace with it. With `cgroup`, a cgroup v2 directory, that process joins it first, so the
 * namespace's init and all it starts are in it (a container's init is in the container's cgroup).
 */
export function inPidNamespace(argv: readonly string[], cgroup?: string): [string, string[]] {
  const unshare = ['unshare', '--pid', '--fork', '--kill-child', '--mount-proc'];
  if (cgroup === undefined) return [unshare[0] as string, [...unshare.slice(1), ...argv]];
  const join = 'echo $$ > "$1/cgroup.procs" || exit 97; shift; exec "$@"';
  return ['sh', ['-c', join, 'sh', cgroup, ...unshare, ...argv]];
}

export interface Scenario {
  run: string;
  out: string;
  cgroup: string;
  init: ChildProcess;
  /** Every live process carrying `GUARD_MARK=<name>.<run>`, by host pid and start time. */
  find(name: string): ProcessId[];
  /** The host pid of the namespace's init (for nsenter). */
  initPid(): number;
  go(): void;
  /** Waits (bounded, 50 ms timers) until `$OUT/<file>` exists; its text. */
  waitFile(file: string, ms?: number): Promise<string>;
  /** The tick results printed so far (one JSON document a line). */
  ticks(): TickResult[];
  stderr(): string;
  end(): Promise<void>;
}

const PRELUDE = `
set -u
echo 0 > "$CG/cgroup.procs" || exit 97
mark() { name=$1; shift; env GUARD_MARK="$name.$RUN" "$@"; }
ready() { echo ok > "$OUT/ready"; while [ ! -e "$OUT/go" ]; do sleep 0.02; done; }
cat > "$OUT/run-guard.sh" <<'EOS'
"$NODE" "$TETHER" guard "$@" >> "$OUT/stdout" 2>> "$OUT/stderr"
echo $? >> "$OUT/rc"
EOS
guard() { env GUARD_MARK="ancestor.$RUN" sh "$OUT/run-guard.sh" "$@" & GUARD_JOB=$!; }
guard_wait() { wait "$GUARD_JOB"; }
park() { exec sleep 100000; }
`;

/**
 * Starts a scenario running `script` (after the prelude) in a new PID namespace and cgroup. With
 * `init` (e.g. `['/usr/bin/tini', '--']`), PID 1 is that init and the script's shell its child:
 * the init stays outside the test cgroup, the shell and all it starts are in it.
 */
export async function startScenario(
  script: string,
  { init: initArgv = [] as string[] } = {},
): Promise<Scenario> {
  const run = `${process.pid}-${Date.now()}-${Math.random().toString(16).slice(2, 8)}`;
  const out = testDir('tether-guard-');
  const cgroup = join(cgroupMount() as string, `tether-guard-test-${run}`);
  mkdirSync(cgroup);
  const init = spawn(...inPidNamespace([...initArgv, 'sh', '-c', PRELUDE + dedent(script)]), {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      ...process.env,
      CG: cgroup,
      OUT: out,
      RUN: run,
      NODE: process.execPath,
      TETHER,
      DIST,
      MOUNT: cgroupMount(),
      TETHER_GUARD_STATE: join(out, 'state'),
    },
  });
  let initErr = '';
  init.stderr?.on('data', (d) => (initErr += d));
  const s: Scenario = {
    run,
    out,
    cgroup,
    init,
    find(name) {
      const entry = `GUARD_MARK=${name}.${run}`;
      const found: ProcessId[] = [];
      for (const pid of pids()) {
        const stat = readStat(pid);
        if (!stat || stat.state === 'Z') continue;
        if (environOf(pid).split('\0').includes(entry)) found.push({ pid, startTime: stat.startTime });
      }
      return found;
    },
    initPid() {
      // unshare's child: PID 1 inside (the shell, or the init given).
      const child = pids().find((pid) => readStat(pid)?.ppid === init.pid);
      if (child === undefined) throw new Error('the namespace init is gone');
      return child;
    },
    go() {
      writeFileSync(join(out, 'go'), '');
    },
    async waitFile(file, ms = 30_000) {
      const path = join(out, file);
      const deadline = performance.now() + ms;
      while (!existsSync(path)) {
        if (performance.now() > deadline || init.exitCode !== null) {
          throw new Error(`no ${file} after ${ms} ms (init exit ${init.exitCode}): ${initErr}${s.stderr()}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      return readFileSync(path, 'utf8');
    },
    ticks() {
      const path = join(out, 'stdout');
      if (!existsSync(path)) return [];
      return readFileSync(path, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as TickResult);
    },
    stderr() {
      const path = join(out, 'stderr');
      return existsSync(path) ? readFileSync(path, 'utf8') : '';
    },
    async end() {
      try {
        writeFileSync(join(cgroup, 'cgroup.kill'), '1');
      } catch {
        // already gone
      }
      init.kill('SIGKILL');
      const deadline = performance.now() + 10_000;
      for (;;) {
        try {
          rmdirSync(cgroup);
          break;
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === 'ENOENT') break;
          if (performance.now() > deadline) throw error;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    },
  };
  return s;
}

// The script without the indentation common to its lines (heredoc ends must start a line).
function dedent(text: string): string {
  const lines = text.split('\n');
  const indents = lines
    .filter((l) => l.trim() !== '')
    .map((l) => (/^ */.exec(l) as RegExpExecArray)[0].length);
  const cut = Math.min(...indents);
  return lines.map((l) => l.slice(cut)).join('\n');
}

/** Waits (50 ms timers, bounded) until none of `ids` is alive; true when that happened. */
export async function allGone(ids: ProcessId[], ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (ids.some(isAlive)) {
    if (performance.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

/** Waits (50 ms timers, bounded) until `check` holds; its last value. */
export async function until<T>(check: () => T, ms: number): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const v = check();
    if (v || performance.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}
