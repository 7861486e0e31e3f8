#!/usr/bin/env node
// Builds the subreaper helper (native/helper.c, which includes native/helper-sweep.c) for each architecture a package carries, into
// dist/native/linux-<arch>/tether-helper (src/containment/prebuilt.ts), static, so that an
// install needs no compiler and no install script (docs/containment.md, "The helper").
//
//   node scripts/build-helper.mjs                 every prebuilt architecture (npm run build)
//   node scripts/build-helper.mjs --host          only this machine's (any architecture: the
//                                                 fallback where the package has none)
//   node scripts/build-helper.mjs --require-all   also exit 1 unless every prebuilt one is there,
//                                                 static and of its architecture (prepack)
//   --out DIR                                     instead of dist/native
//
// Compilers: this machine's architecture with $CC_<ARCH> (CC_X64, CC_ARM64…), else $CC, else cc;
// another with $CC_<ARCH>, else Debian's cross compiler (aarch64-linux-gnu-gcc,
// x86_64-linux-gnu-gcc). One that is missing or fails: a warning naming it, the others are still
// built, exit 0 — tether then runs with the env tag alone on that architecture (NO_HELPER) —
// unless --require-all. An output newer than native/helper.c, native/helper-sweep.c and this
// script is kept as is.
// Needs dist/containment/ (tsc) to check what it built.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { CROSS, compilerFor, mtime } from './compilers.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const outFlag = args.indexOf('--out');
const known = new Set(['--host', '--require-all', '--out']);
const unknown = args.find((a, i) => !known.has(a) && i !== outFlag + 1);
if (unknown !== undefined || (outFlag >= 0 && !args[outFlag + 1])) {
  console.error(
    `build-helper: ${unknown === undefined ? '--out needs a directory' : `unknown argument ${unknown}`} (accepted: --host, --require-all, --out DIR)`,
  );
  process.exit(2);
}
const hostOnly = args.includes('--host');
const requireAll = args.includes('--require-all');

let elf;
let prebuilt;
try {
  elf = await import(pathToFileURL(join(root, 'dist/containment/elf.js')).href);
  prebuilt = await import(pathToFileURL(join(root, 'dist/containment/prebuilt.js')).href);
} catch (error) {
  console.error(`build-helper: dist/containment/ is missing (${error.code}): run tsc (npm run build) first`);
  process.exit(2);
}
const { PREBUILT_ARCHES, helperFile } = prebuilt;
const nativeDir = outFlag >= 0 ? args[outFlag + 1] : join(root, 'dist/native');
const source = join(root, 'native/helper.c');
// Included by helper.c: a change to it rebuilds the helper too.
const included = [join(root, 'native/helper-sweep.c')];
const run = promisify(execFile);

// The unsuffixed dist/native/tether-helper of the one-architecture layout: a stale binary an
// `npm pack` would ship (the package's files list holds dist/).
rmSync(join(nativeDir, 'tether-helper'), { force: true });

// Why the file at `out` is not a helper for `arch` that can ship (undefined: it is one).
function unfit(out, arch, needStatic) {
  let head;
  try {
    head = elf.readElf(out);
  } catch (error) {
    return error.code === 'ENOENT' ? 'missing' : `unreadable (${error.code})`;
  }
  if (head.kind !== 'elf') return `not an ELF executable (${head.kind})`;
  if (!elf.runsOn(head.target, elf.hostTarget(arch))) return `built for ${elf.describeTarget(head.target)}`;
  if (needStatic && head.dynamic)
    return 'dynamically linked (it needs the libc of the machine that built it)';
  return undefined;
}

// A build killed part-way left its temp file: not shipped, not kept (one whose builder still
// runs is another build's, in progress).
function removeDeadTemps(dir) {
  for (const name of readdirSync(dir)) {
    const builder = /^tether-helper\.(\d+)\.tmp$/.exec(name)?.[1];
    if (builder && !existsSync(`/proc/${builder}`)) rmSync(join(dir, name), { force: true });
  }
}

// Builds one architecture's helper; resolves to a warning, or undefined when it is there.
async function build(arch) {
  const out = join(nativeDir, helperFile(arch).replace(/^native\//, ''));
  const dir = dirname(out);
  mkdirSync(dir, { recursive: true });
  removeDeadTemps(dir);
  const inputs = Math.max(
    mtime(source) ?? 0,
    ...included.map((f) => mtime(f) ?? 0),
    mtime(fileURLToPath(import.meta.url)) ?? 0,
  );
  if ((mtime(out) ?? -1) >= inputs && unfit(out, arch, requireAll || arch !== process.arch) === undefined)
    return undefined;
  const cc = compilerFor(arch);
  if (!cc) return `linux-${arch}: no compiler known for it (set CC_${arch.toUpperCase()})`;
  // Built beside the output, then renamed over it: a session starting a helper while this runs
  // (a test run, a rebuild during work) execs the old binary or the new one, never a
  // half-written file or none (the linker removes its output before writing it).
  const temp = `${out}.${process.pid}.tmp`;
  const flags = ['-O2', '-Wall', '-Wextra', '-o', temp, source];
  // Static: no dynamic loader at each start (the helper starts once per command), a smaller
  // resident set, and a binary that runs on any Linux of its architecture (glibc or musl).
  // Only this machine's own may fall back to a dynamic build (without libc.a): it serves this
  // checkout, and --require-all refuses to ship it.
  const attempts = arch === process.arch ? [['-static'], []] : [['-static']];
  let failure;
  for (const extra of attempts) {
    try {
      await run(cc, [...extra, ...flags], { timeout: 120_000 });
      renameSync(temp, out);
      return undefined;
    } catch (error) {
      failure =
        error.code === 'ENOENT' ? 'not installed' : String(error.stderr || error.message).split('\n')[0];
    } finally {
      rmSync(temp, { force: true });
    }
  }
  // An older binary is not kept: it may speak an older protocol than this checkout's client.
  rmSync(out, { force: true });
  return `linux-${arch}: cannot build the helper with ${cc} (${failure})`;
}

const arches = hostOnly ? [process.arch] : PREBUILT_ARCHES;
const warnings = (await Promise.all(arches.map(build))).filter(Boolean);
for (const w of warnings) {
  console.warn(`tether: ${w}.`);
}
if (warnings.length > 0) {
  const cross = Object.values(CROSS).join(', ');
  console.warn(
    'tether: on an architecture without its helper, tether finds processes by the env tag only (NO_HELPER warning). ' +
      `Install a C compiler (cc; for the other architectures Debian's ${cross} with libc6-dev-<arch>-cross) and run \`npm run build\`.`,
  );
}
if (requireAll) {
  const missing = PREBUILT_ARCHES.map((arch) => {
    const why = unfit(join(nativeDir, helperFile(arch).replace(/^native\//, '')), arch, true);
    return why && `linux-${arch}: ${why}`;
  }).filter(Boolean);
  if (missing.length > 0) {
    console.error(
      `tether: refusing to pack: a package must carry a static helper for each of ${PREBUILT_ARCHES.map((a) => `linux-${a}`).join(', ')}:\n  ${missing.join('\n  ')}`,
    );
    process.exit(1);
  }
}
