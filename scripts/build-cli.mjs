#!/usr/bin/env node
// Bundles the CLI (dist/cli/main.js and every module it imports, with commander and picomatch)
// into one CommonJS script, dist/cli/tether.cjs, and builds its V8 code cache,
// dist/cli/tether.cjs.<build>.cache, which bin/tether.cjs compiles the bundle from (docs/cli.md,
// "Start-up"; docs/benchmarks.md §10). <build> is a hash of the bundle, named on its last line.
// Run by `npm run build` after tsc.
//
//   node scripts/build-cli.mjs          bundle, then train the cache
//   node scripts/build-cli.mjs --no-cache   bundle only (no cache left)
//
// The cache holds the bytecode of every function that ran in a few real commands, run with
// TETHER_BUILD_CODE_CACHE set (bin/tether.cjs writes the cache at exit), one after another so
// each adds to the last: `--help`, `run --no-ledger -- true`, `run -- true` with a ledger in a
// temporary directory, `ls`, `ps`, `recover --dry-run`. A command that fails, or a cache a plain
// start would not use, leaves no cache (a note, exit 0): the CLI then compiles the bundle from
// source, slower and the same. The cache's header (bin/code-cache.cjs) names the bundle bytes it
// was made from; V8 itself refuses one made by another V8 version or with other flags.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { rolldown } from 'rolldown';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const unknown = args.find((a) => a !== '--no-cache');
if (unknown !== undefined) {
  console.error(`build-cli: unknown argument ${unknown} (accepted: --no-cache)`);
  process.exit(2);
}

// It must stay in dist/cli/: every module finds its files relative to its own URL, two levels
// below the package root (dist/<dir>/x.js), and in the bundle that URL is the bundle's.
const out = join(root, 'dist/cli/tether.cjs');

// Loaded where they are: native addons (koffi, better-sqlite3), the optional peer pg, and
// prom-client, which only a guard serving --metrics loads. Each is required where it is used
// (`createRequire`), never imported: the bundle requires an imported package at its top,
// whatever command runs, and it has no loader for an `import()`.
const EXTERNAL = ['koffi', 'better-sqlite3', 'pg', 'prom-client'];
const bundle = await rolldown({
  input: join(root, 'dist/cli/main.js'),
  platform: 'node',
  external: (id) => id.startsWith('node:') || EXTERNAL.some((p) => id === p || id.startsWith(`${p}/`)),
  logLevel: 'warn',
});
const { output } = await bundle.generate({
  format: 'cjs',
  codeSplitting: false,
  sourcemap: true,
  entryFileNames: 'tether.cjs',
  dir: dirname(out), // the map's sources relative to it
  strict: true, // as the ES modules it is made of
});
await bundle.close();
const bundled = output.find((o) => o.type === 'chunk')?.code;
const map = output.find((o) => o.type === 'asset' && o.fileName === 'tether.cjs.map')?.source;
if (bundled === undefined || map === undefined) {
  console.error('build-cli: rolldown gave no tether.cjs and tether.cjs.map');
  process.exit(1);
}
// The build line bin/tether.cjs reads (after the source map's line: no mapping moves).
const build = createHash('sha256').update(bundled).digest('hex').slice(0, 32);
const code = `${bundled.endsWith('\n') ? bundled : `${bundled}\n`}//# tether-cli-build=${build}\n`;
const cache = `${out}.${build}.cache`;

// What the bundle must not hold: a package required at its top (loaded by every command), or
// an `import()` (bin/tether.cjs compiles it with no loader for one: Node 20's vm loses it with a
// code cache).
const problems = [
  ...[...code.matchAll(/^(?:(?:let|const|var) \w+ = )?require\("([^"]+)"\)/gm)]
    .map((m) => m[1])
    .filter((id) => !id.startsWith('node:'))
    .map((id) => `requires ${id} at its top (require it where it is used, with createRequire)`),
  ...(/\bimport\(/.test(code.replace(/\/\*[\s\S]*?\*\/|\/\/[^\n]*/g, ''))
    ? ['holds a dynamic import()']
    : []),
];
if (problems.length > 0) {
  rmSync(out, { force: true });
  removeCaches();
  for (const p of problems) console.error(`build-cli: ${out} ${p}`);
  process.exit(1);
}

// The environment the cache is made and checked in: a plain start's. V8 refuses a cache made
// under other V8 flags (NODE_OPTIONS=--max-old-space-size=… in CI), and TETHER_CLI_BUNDLE or
// --enable-source-maps would not compile the bundle from a cache at all.
const plain = { ...process.env };
for (const k of ['NODE_OPTIONS', 'TETHER_CLI_BUNDLE', 'TETHER_BUILD_CODE_CACHE']) delete plain[k];

// Unchanged, with a cache a plain start accepts: kept as is (a test suite's `npm pack` rebuilds
// dist/ while other tests start tether from it).
const noCache = args.includes('--no-cache');
if (!noCache && readOr(out) === code && readOr(`${out}.map`) === map && cacheProblem(cache) === undefined) {
  removeCaches(cache); // another build's, left by one that raced this one
  console.error(`build-cli: ${out} and its code cache are up to date`);
  process.exit(0);
}
// Each file replaced whole: a process starting now reads the old bundle or the new one, and
// either finds its own cache or none (a cache names the bytes it was made from).
replace(`${out}.map`, map);
replace(out, code);
removeCaches();
if (noCache) process.exit(0);

// Trained into a file of its own, renamed over the cache once every command has added to it
// and a plain start accepts it.
const training = `${cache}.tmp-${process.pid}`;
const TRAINING = [
  ['--help'],
  ['run', '--no-ledger', '--', 'true'],
  ['run', '--', 'true'],
  ['ls'],
  ['ps'],
  ['recover', '--dry-run'],
];
let step = 'its temporary directory could not be made';
let state;
try {
  state = mkdtempSync(join(tmpdir(), 'tether-build-cli-'));
  const env = {
    ...plain,
    XDG_STATE_HOME: state,
    TETHER_LEDGER: join(state, 'ledger.db'),
    TETHER_BUILD_CODE_CACHE: training,
  };
  for (const command of TRAINING) {
    step = `tether ${command.join(' ')} failed`;
    execFileSync(process.execPath, [join(root, 'bin/tether.cjs'), ...command], { env, stdio: 'pipe' });
  }
  step = 'the cache made is not accepted';
  const problem = cacheProblem(training);
  if (problem !== undefined) throw new Error(problem);
  renameSync(training, cache);
  removeCaches(cache); // one a racing build renamed in meanwhile
  console.error(`build-cli: ${out} with its code cache (${statSync(cache).size} bytes)`);
} catch (error) {
  rmSync(training, { force: true });
  const said = (error.stderr?.toString() ?? error.message).trim();
  console.error(
    `build-cli: note: no code cache (${step}${said ? `: ${said}` : ''}); the CLI compiles ${out} itself`,
  );
} finally {
  if (state) rmSync(state, { recursive: true, force: true });
}

// Why a plain start of bin/tether.cjs would not compile the bundle from the cache at `path`
// (bin/code-cache.cjs's check, then V8's), or undefined when it would.
function cacheProblem(path) {
  const check = `
    const { readFileSync } = require('node:fs');
    const { cachedData } = require(${JSON.stringify(join(root, 'bin/code-cache.cjs'))});
    const bundle = readFileSync(process.argv[1]);
    let file;
    try { file = readFileSync(process.argv[2]); } catch { console.log('absent'); process.exit(); }
    const read = cachedData(file, bundle);
    if (!read.data) { console.log(read.problem); process.exit(); }
    const script = new (require('node:vm').Script)(require('node:module').wrap(bundle.toString('utf8')), { filename: process.argv[1], cachedData: read.data });
    console.log(script.cachedDataRejected ? 'rejected by V8' : 'ok');`;
  const said = execFileSync(process.execPath, ['-e', check, out, path], {
    env: plain,
    encoding: 'utf8',
  }).trim();
  return said === 'ok' ? undefined : said;
}

function readOr(path) {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

// Every code cache in dist/cli/ but `keep` (and a training's left by a killed build).
function removeCaches(keep) {
  const dir = dirname(out);
  for (const name of readdirSync(dir))
    if (/^tether\.cjs\.[0-9a-f]{32}\.cache(\.tmp-\d+)*$/.test(name) && join(dir, name) !== keep)
      rmSync(join(dir, name), { force: true });
}

function replace(path, text) {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}
