#!/usr/bin/env node
// Builds the subreaper helper (native/helper.c) into dist/native/tether-helper with the
// machine's C compiler ($CC, else cc). Without one, tether still works with the env tag alone
// and says so (a NO_HELPER warning in every report): this script warns and exits 0.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist/native/tether-helper');
mkdirSync(dirname(out), { recursive: true });
const cc = process.env.CC || 'cc';
const source = join(root, 'native/helper.c');
// Built beside the output, then renamed over it: a session starting a helper while this runs
// (a test run, a rebuild during work) execs the old binary or the new one, never a half-written
// file or none (the linker removes its output before writing it).
const temp = `${out}.${process.pid}.tmp`;
// A build killed part-way left its temp file: not shipped, not kept (one whose builder still
// runs is another build's, in progress).
for (const name of readdirSync(dirname(out))) {
  const builder = /^tether-helper\.(\d+)\.tmp$/.exec(name)?.[1];
  if (builder && !existsSync(`/proc/${builder}`)) rmSync(join(dirname(out), name), { force: true });
}
const flags = ['-O2', '-Wall', '-Wextra', '-o', temp, source];
// Static first: no dynamic loader at each start (the helper starts once per command), and a
// smaller resident set. Without a static libc (libc.a), a dynamic build.
function build(extra) {
  execFileSync(cc, [...extra, ...flags], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 120_000 });
}
try {
  build(['-static']);
  renameSync(temp, out);
} catch {
  try {
    build([]);
    renameSync(temp, out);
  } catch (error) {
    rmSync(temp, { force: true });
    console.warn(
      `tether: cannot build the subreaper helper with ${cc} (${String(error.stderr || error.message).split('\n')[0]}).\n` +
        'tether will find processes by the env tag only (NO_HELPER warning); install a C compiler and run `npm run build`.',
    );
  }
}
