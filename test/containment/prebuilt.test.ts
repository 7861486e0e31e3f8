// The prebuilt helpers (docs/containment.md, "The helper"): one static binary per architecture
// in dist/native/linux-<arch>/ (built by globalSetup's scripts/build-helper.mjs), each run where
// it can run — natively, or under qemu-user — through the real client (`startHelper`); the ELF
// check that refuses a binary that cannot exec here before exec; the build's warnings and
// prepack's refusal. Ground truth from /proc.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readElf } from '../../src/containment/elf.js';
import { HelperStartError, helperPath, startHelper } from '../../src/containment/helper.js';
import { helperFile, PREBUILT_ARCHES } from '../../src/containment/prebuilt.js';
import type { Identity } from '../../src/index.js';
import { BUILD, FIXTURES, ROOT } from '../support/paths.js';
import { identityOf, isAlive, ppidOf, stateOf } from '../support/proc.js';
import { testDir } from '../support/temp.js';
import { CROSS as CROSS_TOOLS, missing, QEMU, skipNote } from '../support/tools.js';

const BIN = join(ROOT, 'bin/tether.cjs');
const CROSS: Record<string, string> = Object.fromEntries(
  Object.entries(CROSS_TOOLS).map(([arch, t]) => [arch, t.command]),
);
/** What `file -b` says of each architecture's ELF machine. */
const FILE_SAYS: Record<string, RegExp> = { x64: /x86-64/, arm64: /ARM aarch64/ };
const OTHER_ARCH = PREBUILT_ARCHES.find((a) => a !== process.arch) ?? 'arm64';

const binary = (arch: string) => join(ROOT, 'dist', helperFile(arch));

// The tools an architecture's helper needs here, as globalSetup found them (test/support/tools.ts):
// another architecture's is built by its cross compiler and run under qemu-user.
const builtWith = (arch: string): string[] => (arch === process.arch ? [] : [CROSS[arch] as string]);
const runWith = (arch: string): string[] =>
  arch === process.arch ? [] : [CROSS[arch] as string, QEMU[arch] as string];

function which(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const path = join(dir, command);
    try {
      if (statSync(path).isFile()) return path;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

const started: Identity[] = [];
afterEach(() => {
  for (const id of started.splice(0)) if (isAlive(id)) process.kill(id.pid, 'SIGKILL');
});

function premiseBuilt(arch: string): string {
  const path = binary(arch);
  if (!existsSync(path)) {
    throw new Error(
      `premise broken: ${path} is missing (npm run build did not build linux-${arch}: see its warning)`,
    );
  }
  return path;
}

describe('each prebuilt helper is a static executable of its architecture', () => {
  for (const arch of PREBUILT_ARCHES) {
    it.skipIf(missing(...builtWith(arch)) !== '')(
      `linux-${arch}: its ELF header names the machine, 64-bit LE, and no dynamic loader${skipNote(...builtWith(arch))}`,
      () => {
        const head = readElf(premiseBuilt(arch));
        expect(head, `dist/${helperFile(arch)}`).toEqual({
          kind: 'elf',
          target: { arch, bits: 64, endian: 'LE' },
          dynamic: false,
        });
        expect(statSync(binary(arch)).mode & 0o111, 'the helper is executable').toBe(0o111);
      },
    );
  }

  const forFile = ['file', ...builtWith(OTHER_ARCH)];
  it.skipIf(missing(...forFile) !== '')(
    `file(1) agrees: each is a statically linked ELF of its machine${skipNote(...forFile)}`,
    () => {
      for (const arch of PREBUILT_ARCHES) {
        const says = execFileSync('file', ['-b', premiseBuilt(arch)], { encoding: 'utf8' });
        expect(says, `file says of linux-${arch}`).toMatch(FILE_SAYS[arch] as RegExp);
        expect(says, `file says of linux-${arch}`).toMatch(/statically linked/);
      }
    },
  );
});

// How to run `arch`'s helper here: the binary itself (this machine's), or through a wrapper
// that execs qemu-user on it. Debian 12's qemu 7.2 refuses prctl(PR_SET_CHILD_SUBREAPER)
// (EINVAL, without asking the kernel): then the shipped binary is checked to report exactly that,
// and the run uses build/zoo-subreaper-exec (the subreaper setting survives exec) and a build of
// the same helper.c whose one prctl takes that EINVAL as done (test/fixtures/qemu-subreaper.h).
function helperFor(arch: string): { path: string; how: string } {
  const shipped = premiseBuilt(arch);
  if (arch === process.arch) return { path: shipped, how: 'natively' };
  const qemu = which(QEMU[arch] as string) as string;
  const dir = testDir(`tether-qemu-${arch}-`);
  const wrap = (name: string, exec: string) => {
    const path = join(dir, name);
    writeFileSync(path, `#!/bin/sh\nexec ${exec} "$@"\n`);
    chmodSync(path, 0o755);
    return path;
  };
  const direct = wrap('direct', `${qemu} ${shipped}`);
  try {
    const probe = startHelper(direct, {
      command: 'true',
      args: [],
      env: process.env,
      stdio: 'ignore',
      graceMs: 300,
      killAfterMs: 1000,
      pidns: false,
      procRoot: '/proc',
    });
    started.push(probe.helper);
    probe.release();
    return { path: direct, how: `under ${QEMU[arch]}` };
  } catch (error) {
    // The helper ran (its `helper` line, then `error subreaper 22`): anything else is a failure.
    expect(error).toBeInstanceOf(HelperStartError);
    expect((error as Error).message).toBe('the helper could not start the payload (subreaper: EINVAL)');
  }
  const cc = which(CROSS[arch] as string);
  if (!cc) throw new Error(`premise broken: ${CROSS[arch]} is missing (it built dist/${helperFile(arch)})`);
  const shimmed = join(dir, 'tether-helper');
  execFileSync(cc, [
    '-static',
    '-O2',
    '-include',
    join(FIXTURES, 'qemu-subreaper.h'),
    '-o',
    shimmed,
    join(ROOT, 'native/helper.c'),
  ]);
  return {
    path: wrap('subreaper', `${join(BUILD, 'zoo-subreaper-exec')} ${qemu} ${shimmed}`),
    how: `under ${QEMU[arch]} (made a subreaper before qemu)`,
  };
}

describe('each prebuilt helper starts a payload, reports it, and reaps the orphan it leaves', () => {
  for (const arch of PREBUILT_ARCHES) {
    it.skipIf(missing(...runWith(arch)) !== '')(`linux-${arch}${skipNote(...runWith(arch))}`, async () => {
      const { path, how } = helperFor(arch);
      const dir = testDir('tether-prebuilt-');
      const orphanFile = join(dir, 'orphan');
      const helper = startHelper(path, {
        command: 'sh',
        // The orphan outlives the payload by about 0.7 s: long enough to see whose child it is.
        args: [
          '-c',
          `sleep 1 & echo "$! $(cut -d' ' -f22 /proc/$!/stat)" > ${orphanFile}; sleep 0.3; exit 7`,
        ],
        env: process.env,
        stdio: 'ignore',
        graceMs: 300,
        killAfterMs: 1000,
        pidns: false,
        procRoot: '/proc',
      });
      started.push(helper.helper, helper.payload);
      const exited = new Promise((r) => helper.child.once('exit', r));
      // `helper PID START` and `started PID START` on fd 3: both identities are the live processes.
      expect(helper.helper.pid, `${how}: the helper names itself`).toBe(helper.child.pid);
      // (qemu-user fakes /proc/self/stat for the program it runs — state 0, a start time of its
      // own reckoning — so there the helper's own start time is qemu's, and not compared.)
      if (arch === process.arch)
        expect(isAlive(helper.helper), `the helper's start time is its own`).toBe(true);
      expect(identityOf(helper.payload.pid), `${how}: the started line names the payload`).toEqual(
        helper.payload,
      );
      expect(ppidOf(helper.payload.pid), `${how}: the payload is the helper's child`).toBe(helper.helper.pid);
      // `exit code 7`
      expect(await helper.end, `${how}: the exit line`).toEqual({ kind: 'exit', exitCode: 7, signal: null });
      const [pid, startTime] = readFileSync(orphanFile, 'utf8').trim().split(' ').map(Number);
      const orphan = { pid: pid as number, startTime: startTime as number };
      started.push(orphan);
      expect(isAlive(orphan), `premise broken: the orphan ${orphan.pid} ended before its payload`).toBe(true);
      expect(ppidOf(orphan.pid), `${how}: the orphan reparented to the helper, a subreaper`).toBe(
        helper.helper.pid,
      );
      for (let i = 0; i < 150 && stateOf(orphan.pid) !== 'gone'; i++) await pause(20);
      expect(
        stateOf(orphan.pid),
        `${how}: orphan ${orphan.pid} after its end (Z: the helper did not reap it)`,
      ).toBe('gone');
      let childless = helper.childless();
      for (let i = 0; i < 50 && childless !== true; i++) {
        await pause(20);
        childless = helper.childless();
      }
      expect(childless, `${how}: the helper answers that its subtree is gone`).toBe(true);
      helper.release();
      await exited;
      expect(isAlive(helper.helper), `${how}: the helper exits at release`).toBe(false);
    });
  }
});

// Runs `tether run --json -- sh -c 'echo payload-ran'` with TETHER_HELPER set.
function runWithHelper(helper: string): { status: number | null; stdout: string; stderr: string } {
  const ran = spawnSync(process.execPath, [BIN, 'run', '--json', '--', 'sh', '-c', 'echo payload-ran'], {
    env: { ...process.env, TETHER_HELPER: helper },
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { status: ran.status, stdout: ran.stdout, stderr: ran.stderr };
}

function warningsOf(stderr: string): { code: string; message: string }[] {
  const json = stderr.split('\n').find((l) => l.startsWith('{'));
  if (!json) throw new Error(`premise broken: no JSON report on stderr: ${stderr}`);
  return JSON.parse(json).warnings;
}

describe('a helper that cannot exec here is refused before exec, naming why', () => {
  it.skipIf(missing(...builtWith(OTHER_ARCH)) !== '')(
    `another architecture's helper (linux-${OTHER_ARCH}) as TETHER_HELPER: NO_HELPER names both architectures, the command runs, no shell runs the binary${skipNote(...builtWith(OTHER_ARCH))}`,
    () => {
      const other = premiseBuilt(OTHER_ARCH);
      const ran = runWithHelper(other);
      expect(ran.stdout).toBe('payload-ran\n');
      expect(ran.status).toBe(0);
      const noHelper = warningsOf(ran.stderr).find((w) => w.code === 'NO_HELPER');
      expect(noHelper?.message).toContain(`is built for linux-${OTHER_ARCH}, 64-bit LE`);
      expect(noHelper?.message).toContain(`not for this process's linux-${process.arch}`);
      // ENOEXEC would make execvp(3) run the ELF file through /bin/sh: "ELF…: not found", "Syntax error".
      const noise = ran.stderr
        .split('\n')
        .filter((l) => l !== '' && !l.startsWith('{') && !l.startsWith('tether: '));
      expect(noise, 'lines on stderr that tether did not write').toEqual([]);
    },
  );

  it('an executable that is neither ELF nor a #! script: NO_HELPER says so, and no shell runs it', () => {
    const dir = testDir('tether-not-elf-');
    const fake = join(dir, 'tether-helper');
    writeFileSync(fake, 'echo the-file-ran-through-sh >&2\n');
    chmodSync(fake, 0o755);
    const ran = runWithHelper(fake);
    expect(ran.stdout).toBe('payload-ran\n');
    expect(ran.stderr).not.toContain('the-file-ran-through-sh');
    const noHelper = warningsOf(ran.stderr).find((w) => w.code === 'NO_HELPER');
    expect(noHelper?.message).toContain('is not an ELF executable (no ELF magic) nor a #! script');
  });

  it('an architecture without a prebuilt helper: the reason names it and the command that builds one with cc', () => {
    const arch = Object.getOwnPropertyDescriptor(process, 'arch') as PropertyDescriptor;
    Object.defineProperty(process, 'arch', { ...arch, value: 'riscv64' });
    let found: ReturnType<typeof helperPath>;
    try {
      found = helperPath();
    } finally {
      Object.defineProperty(process, 'arch', arch);
    }
    const script = join(ROOT, 'scripts/build-helper.mjs');
    expect(found).toEqual({
      reason: `this package carries no helper for linux-riscv64 (prebuilt: linux-x64, linux-arm64): \`node ${script} --host\` compiles one (musl-gcc where installed, else cc)`,
    });
    expect(existsSync(script), 'the named script is in the package').toBe(true);
  });
});

// Runs scripts/build-helper.mjs into a temporary directory.
function buildInto(out: string, args: string[], env: NodeJS.ProcessEnv) {
  return spawnSync(process.execPath, [join(ROOT, 'scripts/build-helper.mjs'), '--out', out, ...args], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('the build: each architecture it can, and prepack refuses a package without every one', () => {
  const foreign = OTHER_ARCH.toUpperCase();
  const noCross = { [`CC_${foreign}`]: `/nonexistent/${CROSS[OTHER_ARCH]}` };

  it(`without linux-${OTHER_ARCH}'s compiler: a warning naming it, this machine's helper still built, exit 0`, () => {
    const out = testDir('tether-build-');
    const ran = buildInto(out, [], noCross);
    expect(ran.status, ran.stderr).toBe(0);
    expect(ran.stderr).toContain(
      `tether: linux-${OTHER_ARCH}: cannot build the helper with /nonexistent/${CROSS[OTHER_ARCH]} (not installed).`,
    );
    const own = readElf(join(out, `linux-${process.arch}/tether-helper`));
    expect(own.kind === 'elf' && own.target.arch).toBe(process.arch);
    expect(existsSync(join(out, `linux-${OTHER_ARCH}/tether-helper`))).toBe(false);
  });

  it.skipIf(missing(...builtWith(OTHER_ARCH)) !== '')(
    `a helper older than its source that cannot be rebuilt is removed, not kept${skipNote(...builtWith(OTHER_ARCH))}`,
    () => {
      const out = testDir('tether-build-');
      const stale = join(out, `linux-${OTHER_ARCH}/tether-helper`);
      mkdirSync(join(out, `linux-${OTHER_ARCH}`));
      execFileSync('cp', [premiseBuilt(OTHER_ARCH), stale]);
      utimesSync(stale, 0, 0);
      const ran = buildInto(out, [], noCross);
      expect(ran.status, ran.stderr).toBe(0);
      expect(existsSync(stale), 'a stale helper (it may speak an older protocol) was kept').toBe(false);
    },
  );

  it(`--require-all (prepack) refuses when linux-${OTHER_ARCH} is missing, naming it`, () => {
    const out = testDir('tether-build-');
    const ran = buildInto(out, ['--require-all'], noCross);
    expect(ran.status).toBe(1);
    expect(ran.stderr).toContain(
      'tether: refusing to pack: a package must carry a static helper for each of',
    );
    expect(ran.stderr).toContain(`linux-${OTHER_ARCH}: missing`);
  });

  const cross = PREBUILT_ARCHES.flatMap(builtWith);
  it.skipIf(missing(...cross) !== '')(
    `--require-all passes with both compilers (what .ci/run installs)${skipNote(...cross)}`,
    () => {
      const ran = buildInto(join(ROOT, 'dist/native'), ['--require-all'], {});
      expect(ran.status, ran.stderr).toBe(0);
    },
  );

  it("--host (the fallback the NO_HELPER warning names) builds this machine's helper only", () => {
    const out = testDir('tether-build-');
    const ran = buildInto(out, ['--host'], {});
    expect(ran.status, ran.stderr).toBe(0);
    // Nothing but the line that says what was built, and with what.
    expect(ran.stderr).toMatch(
      new RegExp(`^tether: helper: linux-${process.arch} (musl|glibc[^(]*) \\([^)]+\\)\\n$`),
    );
    const own = readElf(join(out, `linux-${process.arch}/tether-helper`));
    expect(own.kind === 'elf' && own.target.arch).toBe(process.arch);
    expect(existsSync(join(out, `linux-${OTHER_ARCH}`)), 'no other architecture was tried').toBe(false);
  });

  it('an unknown argument is refused, naming the accepted ones', () => {
    const ran = buildInto(testDir('tether-build-'), ['--arch'], {});
    expect(ran.status).toBe(2);
    expect(ran.stderr).toContain('unknown argument --arch (accepted: --host, --require-all, --out DIR)');
  });
});
