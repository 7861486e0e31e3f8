#!/usr/bin/env node
// Builds the native scan loop (native/scan.c) and the spool's file operations (native/spool.c)
// as one shared library for each architecture a
// package carries, into dist/native/linux-<arch>/libtether-proc.so, which src/proc/native.ts
// loads through koffi. It is optional: one that is missing, fails to build or fails to load
// leaves tether on its JS path (src/proc/), the same reads with the same results, slower.
//
//   node scripts/build-native.mjs               every prebuilt architecture (npm run build)
//   node scripts/build-native.mjs --host        only this machine's
//   --out DIR                                   instead of dist/native
//
// Compilers as scripts/build-helper.mjs: this machine's with $CC_<ARCH>, else $CC, else cc;
// another with $CC_<ARCH>, else Debian's cross compiler. A missing one: a note, exit 0.
// An output newer than its sources and this script is kept as is.
import { execFile } from 'node:child_process';
import { mkdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { CROSS, compilerFor, mtime } from './compilers.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const outFlag = args.indexOf('--out');
const unknown = args.find((a, i) => a !== '--host' && a !== '--out' && i !== outFlag + 1);
if (unknown !== undefined || (outFlag >= 0 && !args[outFlag + 1])) {
  console.error(
    `build-native: ${unknown === undefined ? '--out needs a directory' : `unknown argument ${unknown}`}`,
  );
  process.exit(2);
}
const nativeDir = outFlag >= 0 ? args[outFlag + 1] : join(root, 'dist/native');
const sources = ['native/scan.c', 'native/spool.c'].map((f) => join(root, f));
// The contract both sides share (src/proc/native.ts's koffi table is checked against it). Both
// sources include it; it is also forced in first (-include), so that a source that forgot the
// include is still held to its declarations; _GNU_SOURCE defined empty, as the sources define it,
// before any system header.
const header = join(root, 'native/tether.h');
const arches = args.includes('--host') ? [process.arch] : Object.keys(CROSS);
const run = promisify(execFile);

/** The library's path for `arch` under a dist/native directory (src/proc/native.ts looks there). */
function libraryFor(arch) {
  return join(nativeDir, `linux-${arch}`, 'libtether-proc.so');
}

async function build(arch) {
  const out = libraryFor(arch);
  mkdirSync(dirname(out), { recursive: true });
  const inputs = Math.max(
    ...[...sources, header].map((s) => mtime(s) ?? 0),
    mtime(fileURLToPath(import.meta.url)) ?? 0,
  );
  if ((mtime(out) ?? -1) >= inputs) return undefined;
  const cc = compilerFor(arch);
  if (!cc) return `linux-${arch}: no compiler known for it (set CC_${arch.toUpperCase()})`;
  // Beside the output, then renamed over it: a process loading it meanwhile maps the old file or
  // the new one, never a half-written one.
  const temp = `${out}.${process.pid}.tmp`;
  try {
    const flags = ['-O2', '-Wall', '-Wextra', '-shared', '-fPIC', '-D_GNU_SOURCE=', '-include', header];
    await run(cc, [...flags, '-o', temp, ...sources], {
      timeout: 120_000,
    });
    renameSync(temp, out);
    return undefined;
  } catch (error) {
    // An older library is not kept: it may read by older rules than this checkout's JS path.
    rmSync(out, { force: true });
    const why =
      error.code === 'ENOENT' ? 'not installed' : String(error.stderr || error.message).split('\n')[0];
    return `linux-${arch}: the native scan loop was not built with ${cc} (${why}); the JS scan is used there`;
  } finally {
    rmSync(temp, { force: true });
  }
}

const notes = (await Promise.all(arches.map(build))).filter(Boolean);
for (const n of notes) console.warn(`tether: ${n}.`);
