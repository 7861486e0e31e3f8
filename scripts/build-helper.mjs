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
// Compilers: this machine's architecture with $CC_<ARCH> (CC_X64, CC_ARM64…), else $CC, else
// musl-gcc -static when it is on PATH (Debian's musl-tools), else cc; another with $CC_<ARCH>,
// else Debian's cross compiler (aarch64-linux-gnu-gcc, x86_64-linux-gnu-gcc). One that is missing
// or fails: a warning naming it, the others are still built, exit 0 — tether then runs with the
// env tag alone on that architecture (NO_HELPER) — unless --require-all; a musl-gcc that fails
// falls back to cc, with a warning. One line on stderr says which libc and compiler each output
// was built with. An output newer than native/helper.c, native/helper-sweep.c and this script,
// whose record (tether-helper.built beside it; left out of the package by package.json's
// "files") names the compiler this run would choose, is kept as is: installing musl-tools,
// setting $CC or upgrading cc rebuilds it.
// Needs dist/containment/ (tsc) to check what it built.
import { execFile } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
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
const included = [join(root, 'native/helper-sweep.c'), join(root, 'native/helper-serve.c')];
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

// A build killed part-way left its temp file (the binary's or its record's): not shipped, not
// kept (one whose builder still runs is another build's, in progress).
function removeDeadTemps(dir) {
  for (const name of readdirSync(dir)) {
    const builder = /^tether-helper(?:\.built)?\.(\d+)\.tmp$/.exec(name)?.[1];
    if (builder && !existsSync(`/proc/${builder}`)) rmSync(join(dir, name), { force: true });
  }
}

// Where `command` resolves, symlinks followed, as execFile would find it on PATH (a name with a
// slash is itself); undefined when it is not there.
function resolve(command) {
  const dirs = command.includes('/') ? [''] : (process.env.PATH ?? '').split(delimiter).filter(Boolean);
  for (const dir of dirs) {
    try {
      const path = realpathSync(join(dir, command));
      if (statSync(path).isFile()) return path;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

// The builds to try for `arch`, the preferred first: what compilerFor names — this machine's
// static, then dynamic — preceded, for this machine's own when neither $CC_<ARCH> nor $CC is set,
// by musl-gcc -static where it is installed. A musl-static helper is about 120 KB (250 KB with
// libsodium: sodiumFor) against glibc's
// 930 KB: a sandbox session hashes it with sha256sum in the container about five times and pushes
// it once per container (docs/benchmarks.md, "A musl-built helper"). Not for the cross builds
// (Debian has no musl cross toolchain) nor for build-native.mjs's shared library, which Node's
// glibc process loads.
function attemptsFor(arch) {
  const cc = compilerFor(arch);
  if (!cc) return [];
  if (arch !== process.arch) return [{ cc, extra: ['-static'] }];
  const own = [
    { cc, extra: ['-static'] },
    { cc, extra: [] },
  ];
  const chosen = process.env[`CC_${arch.toUpperCase()}`] || process.env.CC;
  return !chosen && resolve(MUSL_CC) ? [{ cc: MUSL_CC, extra: ['-static'] }, ...own] : own;
}
const MUSL_CC = 'musl-gcc';

// Debian's multiarch directory for each prebuilt architecture, where libsodium-dev (for another
// architecture: libsodium-dev:<arch>) puts libsodium.a.
const TRIPLET = { x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' };

// libsodium for `arch` (its SHA-256 and X25519: the resident helper's key, native/helper-serve.c),
// when Debian's libsodium-dev is installed for it: { lib, include }, else undefined — the helper is
// then built without the resident mode (`--serve` says `unsupported`, and tether keeps the checked
// path per call). `include` holds only sodium's headers, so that musl-gcc, which must not see
// glibc's /usr/include, finds them.
function sodiumFor(arch) {
  const lib = TRIPLET[arch] && `/usr/lib/${TRIPLET[arch]}/libsodium.a`;
  if (!lib || !existsSync(lib) || !existsSync('/usr/include/sodium.h')) return undefined;
  const include = join(root, 'build/sodium-include');
  mkdirSync(include, { recursive: true });
  for (const name of ['sodium.h', 'sodium']) {
    const link = join(include, name);
    if (!existsSync(link)) symlinkSync(`/usr/include/${name}`, link);
  }
  return { lib, include };
}

// The libc `cc` compiles against, from the macros its <stdio.h> defines: glibc's version, or
// musl, which on purpose defines none of its own (uClibc and bionic define theirs).
async function libcOf(cc) {
  let macros;
  try {
    macros = (
      await run(cc, ['-E', '-dM', '-include', 'stdio.h', '-x', 'c', '/dev/null'], { timeout: 60_000 })
    ).stdout;
  } catch {
    return 'libc unknown';
  }
  const define = (name) => new RegExp(`^#define ${name} (\\d+)$`, 'm').exec(macros)?.[1];
  if (/^#define __UCLIBC__\b/m.test(macros)) return 'uClibc';
  if (/^#define __BIONIC__\b/m.test(macros)) return 'bionic';
  const major = define('__GLIBC__');
  return major ? `glibc ${major}.${define('__GLIBC_MINOR__')}` : 'musl';
}

// The record beside an output: which compiler was chosen (its name and where it resolved), which
// built it and against which libc. The choice is what decides whether an output is current.
const recordFile = (out) => `${out}.built`;
function readRecord(out) {
  try {
    return JSON.parse(readFileSync(recordFile(out), 'utf8'));
  } catch {
    return undefined;
  }
}
// Best effort: an output without its record (a full disk) is built again by the next run.
function writeRecord(out, record) {
  const temp = `${recordFile(out)}.${process.pid}.tmp`;
  try {
    writeFileSync(temp, `${JSON.stringify(record)}\n`);
    renameSync(temp, recordFile(out));
  } catch (error) {
    rmSync(temp, { force: true });
    console.warn(`tether: ${recordFile(out)} not written (${error.code}): the next build builds it again.`);
  }
}

// Builds one architecture's helper; resolves to { warning } or to its record and whether it was
// kept.
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
  // Static: no dynamic loader at each start (the helper starts once per command), a smaller
  // resident set, and a binary that runs on any Linux of its architecture (glibc or musl).
  // Only this machine's own may fall back to a dynamic build (without libc.a): it serves this
  // checkout, and --require-all refuses to ship it.
  const sodium = sodiumFor(arch);
  // Each compiler with libsodium first, then without: a link that fails for it still gives a helper.
  const attempts = attemptsFor(arch).flatMap((a) => (sodium ? [{ ...a, sodium }, a] : [a]));
  if (attempts.length === 0)
    return { warning: `linux-${arch}: no compiler known for it (set CC_${arch.toUpperCase()})` };
  // By name and by file: another compiler chosen, or cc upgraded under the same name, rebuilds.
  // libsodium installed or removed rebuilds as well.
  const chosen = `${attempts[0].cc} (${resolve(attempts[0].cc) ?? 'not found'})${sodium ? ` + ${sodium.lib}` : ''}`;
  const record = readRecord(out);
  if (
    (mtime(out) ?? -1) >= inputs &&
    record?.chosen === chosen &&
    unfit(out, arch, requireAll || arch !== process.arch) === undefined
  )
    return { record, kept: true };
  // Gone before the build starts: a build that fails or is killed leaves no record, and the
  // next run builds again.
  rmSync(recordFile(out), { force: true });
  // Built beside the output, then renamed over it: a session starting a helper while this runs
  // (a test run, a rebuild during work) execs the old binary or the new one, never a
  // half-written file or none (the linker removes its output before writing it).
  const temp = `${out}.${process.pid}.tmp`;
  const flags = ['-O2', '-Wall', '-Wextra', '-o', temp];
  const failures = new Map();
  for (const { cc, extra, sodium: with_ } of attempts) {
    const linked = with_ ? ['-DTETHER_SODIUM', `-I${with_.include}`, source, with_.lib] : [source];
    try {
      await run(cc, [...extra, ...flags, ...linked], { timeout: 120_000 });
      renameSync(temp, out);
      const built = {
        chosen,
        built: [cc, ...extra].join(' '),
        libc: await libcOf(cc),
        // libsodium found but its build failed (a compile error in the resident mode's code) is
        // said as such: 'no libsodium.a' would hide it, and every resident test would then fail.
        serve: with_
          ? `libsodium ${with_.lib}`
          : sodium
            ? `none (the build with ${sodium.lib} failed: ${failures.get(`${cc} with libsodium`) ?? 'unknown'})`
            : 'none (no libsodium.a)',
      };
      writeRecord(out, built);
      // Only the preferred musl-gcc may fail before another succeeds: said once, as the record
      // keeps this output until its inputs or the choice change.
      for (const [failed, why] of failures)
        if (failed !== cc)
          console.warn(
            `tether: linux-${arch}: ${failed} failed (${why}); built with ${cc} (${built.libc}) instead.`,
          );
      return { record: built, kept: false };
    } catch (error) {
      failures.set(
        with_ ? `${cc} with libsodium` : cc,
        error.code === 'ENOENT' ? 'not installed' : String(error.stderr || error.message).split('\n')[0],
      );
    } finally {
      rmSync(temp, { force: true });
    }
  }
  // An older binary is not kept: it may speak an older protocol than this checkout's client.
  rmSync(out, { force: true });
  const last = attempts.at(-1).cc;
  return { warning: `linux-${arch}: cannot build the helper with ${last} (${failures.get(last)})` };
}

const arches = hostOnly ? [process.arch] : PREBUILT_ARCHES;
const results = await Promise.all(arches.map(build));
const built = arches
  .map((arch, i) => {
    const { record, kept } = results[i];
    return (
      record &&
      `linux-${arch} ${record.libc} (${record.built}${kept ? ', up to date' : ''}; resident mode: ${record.serve ?? 'none'})`
    );
  })
  .filter(Boolean);
// On stderr, as every build script's word: stdout is npm's (`npm pack --json` prints its JSON there
// after prepare has run this).
if (built.length > 0) console.error(`tether: helper: ${built.join('; ')}`);
const warnings = results.map((r) => r.warning).filter(Boolean);
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
