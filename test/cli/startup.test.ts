// What a fresh `tether` process loads and how (docs/cli.md, "Start-up"): bin/tether.cjs runs the
// bundle dist/cli/tether.cjs compiled from its code cache; commands other than a guard serving
// metrics never load prom-client (~35 ms of every start when they did), and `tether run` never
// loads better-sqlite3. Read off real CLI processes at exit by a `--require`d probe: the packages
// in the process's CommonJS module cache (every CommonJS package, imported or required, passes
// through it) and what bin/tether.cjs says it ran.
import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN } from '../support/cli.js';
import { testDir } from '../support/temp.js';

const execFileP = promisify(execFile);
const ROOT = join(import.meta.dirname, '../..');
const dir = testDir('tether-startup-');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const PROBE = join(dir, 'probe.cjs');
writeFileSync(
  PROBE,
  `process.on('exit', () => {
  const names = new Set();
  for (const f of Object.keys(require.cache)) {
    const m = /\\/node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(f);
    if (m) names.add(m[1]);
  }
  const loaded = globalThis[Symbol.for('tether.cli.loaded')];
  require('node:fs').writeFileSync(process.env.TETHER_TEST_PROBE_OUT, JSON.stringify({ packages: [...names].sort(), loaded }));
});
`,
);

interface Probed {
  code: number;
  stdout: string;
  stderr: string;
  packages: string[];
  loaded: { bundle: boolean; cache: string };
}

let n = 0;
async function probe(bin: string, args: string[], extra: NodeJS.ProcessEnv = {}): Promise<Probed> {
  const out = join(dir, `probe-${n++}.json`);
  const env = {
    ...process.env,
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require ${PROBE}`.trim(),
    TETHER_TEST_PROBE_OUT: out,
    XDG_STATE_HOME: join(dir, 'state'),
    TETHER_LEDGER: '',
    ...extra,
  };
  const ran = await execFileP(process.execPath, [bin, ...args], { env, timeout: 20_000 }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e) => ({ code: e.code as number, stdout: e.stdout as string, stderr: e.stderr as string }),
  );
  return { ...ran, ...(JSON.parse(readFileSync(out, 'utf8')) as Omit<Probed, 'code' | 'stdout' | 'stderr'>) };
}

describe('a fresh tether process', () => {
  it.each([
    ['run --no-ledger -- true', ['run', '--no-ledger', '--', 'true'], 'koffi', 'better-sqlite3'],
    ['run -- true (the default ledger, through its spool)', ['run', '--', 'true'], 'koffi', 'better-sqlite3'],
    ['ps (reads the ledger)', ['ps'], 'better-sqlite3', undefined],
    ['guard --help', ['guard', '--help'], undefined, 'koffi'],
  ])('%s runs the bundle from its code cache and loads no prom-client', async (_name, args, needs, never) => {
    const p = await probe(BIN, args);
    expect(p.code, p.stderr).toBe(0);
    expect(p.loaded).toEqual({ bundle: true, cache: 'accepted' });
    expect(p.packages).not.toContain('prom-client');
    // The probe sees what each command does load, and what it must not.
    if (needs) expect(p.packages).toContain(needs);
    if (never) expect(p.packages).not.toContain(never);
  });

  it('with TETHER_CLI_BUNDLE=0 runs the ES modules, the same CLI', async () => {
    const p = await probe(BIN, ['run', '--no-ledger', '--', 'sh', '-c', 'exit 7'], {
      TETHER_CLI_BUNDLE: '0',
    });
    expect(p.code).toBe(7);
    expect(p.loaded).toEqual({ bundle: false, cache: 'none' });
    expect(p.packages).toContain('commander'); // bundled otherwise: here loaded from node_modules
    expect(p.packages).not.toContain('prom-client');
  });
});

describe('TETHER_CLI_BUNDLE', () => {
  it('no-cache compiles the bundle from its source; any other value is named with the accepted ones (125)', async () => {
    const p = await probe(BIN, ['run', '--no-ledger', '--', 'sh', '-c', 'exit 4'], {
      TETHER_CLI_BUNDLE: 'no-cache',
    });
    expect([p.code, p.loaded.bundle, p.loaded.cache]).toEqual([4, true, 'off']);
    const bad = await execFileP(process.execPath, [BIN, 'run', '--', 'true'], {
      env: { ...process.env, TETHER_CLI_BUNDLE: 'yes' },
    }).catch((e) => e);
    expect(bad.code).toBe(125);
    expect(bad.stderr).toBe(
      'tether: invalid TETHER_CLI_BUNDLE "yes": expected 1 (the default), 0 or no-cache\n',
    );
  });
});

describe('--enable-source-maps', () => {
  it("loads the bundle through Node's own loader, which maps stack traces (no cache then)", async () => {
    const p = await probe(BIN, ['run', '--no-ledger', '--', 'sh', '-c', 'exit 5'], {
      NODE_OPTIONS: `--enable-source-maps --require ${PROBE}`,
    });
    expect([p.code, p.loaded.bundle, p.loaded.cache]).toEqual([5, true, 'off']);
    // The map names the bundle's modules in dist/ (a line of the bundle would name tether.cjs).
    const bundle = join(ROOT, 'dist/cli/tether.cjs');
    const traced = await execFileP(
      process.execPath,
      ['--enable-source-maps', '-e', `require(${JSON.stringify(bundle)}).main(null)`],
      { timeout: 20_000 },
    ).catch((e) => e);
    expect(traced.code).toBe(125);
    expect(traced.stderr).toContain('tether: internal error: TypeError');
    expect(traced.stderr).toContain(join(ROOT, 'dist/cli/main.js'));
  });
});

describe('a copy of the package', () => {
  // bin/, dist/, scripts/ and package.json copied; node_modules linked.
  function copy(): string {
    const pkg = mkdtempSync(join(dir, 'pkg-'));
    for (const d of ['bin', 'dist', 'scripts']) cpSync(join(ROOT, d), join(pkg, d), { recursive: true });
    cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
    symlinkSync(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
    return pkg;
  }
  const bin = (pkg: string) => join(pkg, 'bin/tether.cjs');
  const version = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version as string;
  // dist/cli's code caches (scripts/build-cli.mjs names each by the bundle's build).
  const caches = (pkg: string) =>
    readdirSync(join(pkg, 'dist/cli'))
      .filter((f) => /^tether\.cjs\.[0-9a-f]{32}\.cache$/.test(f))
      .map((f) => join(pkg, 'dist/cli', f));

  it("uses its build's cache only: another build's, another text's, a damaged one and one V8 refuses are never run, and the CLI runs either way", async () => {
    const pkg = copy();
    const bundle = join(pkg, 'dist/cli/tether.cjs');
    const [cache] = caches(pkg);
    expect(cache, 'the build made a cache').toBeDefined();
    const fresh = await probe(bin(pkg), ['--version']);
    expect([fresh.code, fresh.stdout.trim(), fresh.loaded.cache]).toEqual([0, version, 'accepted']);

    // Another build of the same length (V8's own check passes): its cache is not this one.
    const text = readFileSync(bundle, 'utf8');
    const other = text.replace(
      /tether-cli-build=([0-9a-f])/,
      (_m, c: string) => `tether-cli-build=${c === '0' ? '1' : '0'}`,
    );
    expect(other.length).toBe(text.length);
    writeFileSync(bundle, other);
    const rebuilt = await probe(bin(pkg), ['run', '--no-ledger', '--', 'sh', '-c', 'exit 3']);
    expect([rebuilt.code, rebuilt.loaded.bundle, rebuilt.loaded.cache]).toEqual([3, true, 'absent']);
    writeFileSync(bundle, text);

    // The same length and build line, another text (a hand edit): the edit runs, not the cache.
    const edited = text.replace('expected a duration such as', 'EXPECTED a duration such as');
    expect(edited.length).toBe(text.length);
    writeFileSync(bundle, edited);
    const hand = await probe(bin(pkg), ['run', '--grace', '5x', '--', 'true']);
    expect([hand.code, hand.loaded.cache]).toEqual([125, 'other-bundle']);
    expect(hand.stderr).toContain('EXPECTED a duration such as');
    writeFileSync(bundle, text);

    // One bit of V8's data flipped (Node 20's V8 would run it: crashes, hangs): never given to V8.
    const good = readFileSync(cache as string);
    const flipped = Buffer.from(good);
    const at = Math.floor(flipped.length / 2);
    flipped[at] = (flipped[at] as number) ^ 0x10;
    writeFileSync(cache as string, flipped);
    const damaged = await probe(bin(pkg), ['run', '--no-ledger', '--', 'sh', '-c', 'exit 6']);
    expect([damaged.code, damaged.loaded.cache]).toEqual([6, 'foreign']);
    writeFileSync(cache as string, Buffer.alloc(4096, 1)); // this build's name, not a cache
    const foreign = await probe(bin(pkg), ['--version']);
    expect([foreign.code, foreign.stdout.trim(), foreign.loaded.cache]).toEqual([0, version, 'foreign']);
    writeFileSync(cache as string, good);

    // Sound, but V8's flags differ from the build's: V8 refuses it.
    const flags = await probe(bin(pkg), ['--version'], {
      NODE_OPTIONS: `--max-old-space-size=100 --require ${PROBE}`,
    });
    expect([flags.code, flags.stdout.trim(), flags.loaded.cache]).toEqual([0, version, 'rejected']);

    rmSync(cache as string);
    const none = await probe(bin(pkg), ['--version']);
    expect([none.code, none.loaded.bundle, none.loaded.cache]).toEqual([0, true, 'absent']);

    // A bundle that does not compile (truncated): said, and the modules run the command.
    writeFileSync(bundle, text.slice(0, text.length >> 1));
    const truncated = await probe(bin(pkg), ['run', '--no-ledger', '--', 'sh', '-c', 'exit 9']);
    expect([truncated.code, truncated.loaded.bundle]).toEqual([9, false]);
    expect(truncated.stderr).toContain(`tether: warning: cannot use ${bundle} (`);

    rmSync(bundle);
    const modules = await probe(bin(pkg), ['run', '--no-ledger', '--', 'true']);
    expect([modules.code, modules.loaded.bundle, modules.stderr]).toEqual([0, false, '']);
  });

  it('scripts/build-cli.mjs makes the bundle and a cache it accepts, keeps both when nothing changed, and refuses a package required at the top', async () => {
    const pkg = copy();
    const bundle = join(pkg, 'dist/cli/tether.cjs');
    rmSync(bundle);
    for (const c of caches(pkg)) rmSync(c);
    const main = join(pkg, 'dist/cli/main.js');
    const build = () =>
      execFileP(process.execPath, [join(pkg, 'scripts/build-cli.mjs')], { timeout: 60_000 });
    expect((await build()).stderr).toContain('with its code cache');
    expect(caches(pkg)).toHaveLength(1);
    const p = await probe(bin(pkg), ['run', '--', 'true']);
    expect([p.code, p.loaded.bundle, p.loaded.cache]).toEqual([0, true, 'accepted']);
    // Built again from the same dist/: both files kept as they are; another build's cache (a
    // racing build's) removed.
    const times = () => [bundle, ...caches(pkg)].map((f) => statSync(f).mtimeMs);
    const before = times();
    const raced = join(pkg, 'dist/cli', `tether.cjs.${'0'.repeat(32)}.cache`);
    writeFileSync(raced, 'x');
    expect((await build()).stderr).toContain('and its code cache are up to date');
    expect(times()).toEqual(before);
    expect(existsSync(raced)).toBe(false);

    // Built under NODE_OPTIONS's V8 flags (as CI's often are): the cache is a plain start's.
    writeFileSync(main, `${readFileSync(main, 'utf8')}\n// changed\n`);
    await execFileP(process.execPath, [join(pkg, 'scripts/build-cli.mjs')], {
      env: { ...process.env, NODE_OPTIONS: '--max-old-space-size=4096' },
      timeout: 60_000,
    });
    const plain = await probe(bin(pkg), ['--version']);
    expect(plain.loaded.cache).toBe('accepted');

    // Training that cannot run (no temporary directory): a note, status 0, no cache; the
    // bundle compiles from source.
    writeFileSync(main, `${readFileSync(main, 'utf8')}\n// changed again\n`);
    const noTmp = await execFileP(process.execPath, [join(pkg, 'scripts/build-cli.mjs')], {
      env: { ...process.env, TMPDIR: join(dir, 'no-such-dir') },
      timeout: 60_000,
    });
    expect(noTmp.stderr).toContain(
      'build-cli: note: no code cache (its temporary directory could not be made',
    );
    expect(caches(pkg)).toEqual([]);
    const uncached = await probe(bin(pkg), ['--version']);
    expect([uncached.code, uncached.loaded.bundle, uncached.loaded.cache]).toEqual([0, true, 'absent']);

    // A static import of a package would be required by every command: the build fails and
    // leaves no bundle and no cache (the CLI then runs the modules).
    writeFileSync(main, `import 'prom-client';\n${readFileSync(main, 'utf8')}`);
    const refused = await build().catch((e) => e);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('requires prom-client at its top');
    expect(existsSync(bundle)).toBe(false);
    expect(caches(pkg)).toEqual([]);
  });
});
