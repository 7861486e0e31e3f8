// The tools the tests run and the repository does not hold (shells, qemu-user, a cross compiler,
// Postgres…): probed once by globalSetup (test/support/global.ts), which prints the list before
// any test runs and hands it to every test file through vitest's provide/inject. A test that
// needs a tool this machine lacks is skipped with `missing(name)` as its stated reason — the
// tool and the Debian package that provides it — decided before the suite runs, never found out
// by a timeout. `.ci/run` installs every one of them.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { inject } from 'vitest';
import { readElf } from '../../src/containment/elf.js';

/** One tool as the probe found it. */
export interface ToolState {
  name: string;
  /** Where it was found (after symlinks), or undefined when it is missing. */
  path?: string;
  /** What kind it is, where that matters to a test (`static` or `dynamic` for busybox). */
  kind?: string;
  /**
   * busybox only: its sh runs its own applets before looking on PATH (a build with
   * FEATURE_SH_STANDALONE, as Debian's busybox-static): a command put first on PATH is not run.
   */
  appletsFirst?: boolean;
  /** The Debian package(s) that provide it: `apt-get install PACKAGE`. */
  package: string;
  /** The tests that need it (what a missing one skips). */
  needed: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    tetherTools: ToolState[];
  }
}

/** The first executable regular file named `command` on PATH, or undefined. */
export function onPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const path = join(dir, command);
    try {
      const st = statSync(path);
      if (st.isFile() && (st.mode & 0o111) !== 0) return path;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

// The other prebuilt architecture (the package carries linux-x64 and linux-arm64 helpers).
const OTHER = process.arch === 'arm64' ? 'x64' : 'arm64';
/** qemu-user's static binary for each architecture (Debian's qemu-user-static names). */
export const QEMU: Record<string, string> = { x64: 'qemu-x86_64-static', arm64: 'qemu-aarch64-static' };
/** The cross compiler for each architecture, and its Debian packages (compiler + static libc). */
export const CROSS: Record<string, { command: string; package: string }> = {
  x64: { command: 'x86_64-linux-gnu-gcc', package: 'gcc-x86-64-linux-gnu libc6-dev-amd64-cross' },
  arm64: { command: 'aarch64-linux-gnu-gcc', package: 'gcc-aarch64-linux-gnu libc6-dev-arm64-cross' },
};
const PG_ROOT = '/usr/lib/postgresql';

interface Spec {
  name: string;
  package: string;
  needed: string;
  /** Finds it: its path, or undefined. Default: `name` on PATH. */
  find?: () => string | undefined;
  kind?: (path: string) => string | undefined;
  /** Records what else a test must know of it. */
  traits?: (path: string, state: ToolState) => void;
}

const SPECS: Spec[] = [
  { name: 'dash', package: 'dash', needed: 'the shells suites under dash' },
  { name: 'bash', package: 'bash', needed: 'the shells suites under bash' },
  { name: 'mksh', package: 'mksh', needed: 'the shells suites under mksh' },
  {
    name: 'busybox',
    package: 'busybox (or busybox-static)',
    needed: 'the shells suites under busybox sh, the busybox-only container',
    // A static busybox (busybox-static) links no library: its container root holds it alone.
    kind: (path) => {
      const elf = readElf(path);
      return elf.kind === 'elf' ? (elf.dynamic ? 'dynamic' : 'static') : elf.kind;
    },
    traits: (path, state) => {
      // With no PATH at all, only an applet can answer `grep`: 1 (no match), where a busybox
      // that looks on PATH first says 127 (not found).
      const ran = spawnSync(path, ['sh', '-c', 'grep -q x </dev/null; echo $?'], {
        env: { PATH: '/nonexistent' },
        encoding: 'utf8',
        timeout: 10_000,
      });
      if (ran.stdout.trim() === '1') state.appletsFirst = true;
    },
  },
  {
    name: 'python3',
    package: 'python3',
    needed: 'the full non-blocking stdout tests of the sandbox shells; a Postgres started for the tests',
  },
  { name: 'file', package: 'file', needed: "file(1)'s check of the prebuilt helpers" },
  {
    name: 'tini',
    package: 'tini',
    needed: "the guard's init-service tests (a container whose PID 1 is tini)",
  },
  {
    name: 'dumb-init',
    package: 'dumb-init',
    needed: "the guard's init-service tests (a container whose PID 1 is dumb-init)",
  },
  {
    name: QEMU[OTHER] as string,
    package: 'qemu-user-static',
    needed: `the linux-${OTHER} prebuilt helper's run`,
  },
  {
    name: CROSS[OTHER]?.command as string,
    package: CROSS[OTHER]?.package as string,
    needed: `the linux-${OTHER} prebuilt helper (built by npm run build) and its checks`,
  },
  {
    name: 'libsodium.a',
    package: 'libsodium-dev',
    needed:
      "this architecture's helper's resident mode (test/sandbox/resident.test.ts): npm run build again once installed",
    // Where scripts/build-helper.mjs looks (Debian's multiarch directory).
    find: () => {
      const triplet = ({ x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' } as Record<string, string>)[
        process.arch
      ];
      const lib = triplet && `/usr/lib/${triplet}/libsodium.a`;
      return lib && existsSync(lib) ? lib : undefined;
    },
  },
  {
    name: 'pg_ctl',
    package: 'postgresql',
    needed: 'the ledger conformance suite on Postgres (unless TETHER_TEST_POSTGRES_URL is set)',
    // Where scripts/test-postgres.sh looks: Debian's versioned directories.
    find: () => {
      if (!existsSync(PG_ROOT)) return undefined;
      const found = readdirSync(PG_ROOT)
        .map((v) => join(PG_ROOT, v, 'bin/pg_ctl'))
        .filter((p) => existsSync(p));
      return found.sort().at(-1);
    },
  },
];

/** Probes every tool the tests use (globalSetup calls it once). */
export function probeTools(): ToolState[] {
  return SPECS.map((spec) => {
    const found = spec.find ? spec.find() : onPath(spec.name);
    let path: string | undefined;
    try {
      path = found && realpathSync(found);
    } catch {
      path = undefined; // a dangling link
    }
    const state: ToolState = { name: spec.name, package: spec.package, needed: spec.needed };
    if (path) {
      state.path = path;
      const kind = spec.kind?.(path);
      if (kind) state.kind = kind;
      spec.traits?.(path, state);
    }
    return state;
  });
}

/** The probe's list as lines for the terminal: each tool, where it is or what its absence skips. */
export function describeTools(tools: ToolState[]): string[] {
  const width = Math.max(...tools.map((t) => t.name.length));
  return tools.map((t) => {
    const name = t.name.padEnd(width);
    return t.path
      ? `  ${name}  ${t.path}${t.kind ? ` (${t.kind}${t.appletsFirst ? ', its sh runs its applets before PATH' : ''})` : ''}`
      : `  ${name}  MISSING: skips ${t.needed} (apt-get install ${t.package})`;
  });
}

let local: ToolState[] | undefined;

/** The probe's results: globalSetup's (provided), or this worker's own probe when none was provided. */
export function tools(): ToolState[] {
  let provided: ToolState[] | undefined;
  try {
    provided = inject('tetherTools');
  } catch {
    provided = undefined; // not under vitest's runner
  }
  if (provided) return provided;
  local ??= probeTools();
  return local;
}

/** The tool's state; throws for a name the registry does not hold (a typo in a test). */
export function tool(name: string): ToolState {
  const found = tools().find((t) => t.name === name);
  if (!found) throw new Error(`test/support/tools.ts: no tool named ${name} (add it to SPECS)`);
  return found;
}

/**
 * Why a test that needs these tools skips — `mksh is not installed (apt-get install mksh)` — or
 * '' when every one is there. Use as `it.skipIf(missing('mksh') !== '')(…)`, with the reason in
 * the test's name (see `skipNote`).
 */
export function missing(...names: string[]): string {
  return names
    .map(tool)
    .filter((t) => !t.path)
    .map((t) => `${t.name} is not installed (apt-get install ${t.package})`)
    .join('; ');
}

/** `' (skipped: REASON)'` for a test's name when a tool is missing, else ''. */
export function skipNote(...names: string[]): string {
  const why = missing(...names);
  return why ? ` (skipped: ${why})` : '';
}

/**
 * The python3 interpreter itself (`sys.executable`), not a version manager's shim: a pyenv shim
 * may run `pyenv rehash`, whose lock file stays behind when it is killed mid-way (a sweep, a test
 * run cut short), and then every later python3 call waits 60 s for that lock. '' where
 * globalSetup found no python3 (its tests skip, named, with `missing('python3')`).
 */
export function pythonInterpreter(): string {
  if (missing('python3')) return '';
  return execFileSync(tool('python3').path as string, ['-c', 'import sys; print(sys.executable)'], {
    encoding: 'utf8',
  }).trim();
}
