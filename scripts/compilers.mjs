// What scripts/build-helper.mjs and scripts/build-native.mjs share: which C compiler builds for
// which architecture, and a file's modification time.
import { statSync } from 'node:fs';

/** The architectures a package carries prebuilt (src/containment/prebuilt.ts PREBUILT_ARCHES), with Debian's cross compiler for each. */
export const CROSS = { x64: 'x86_64-linux-gnu-gcc', arm64: 'aarch64-linux-gnu-gcc' };

/**
 * The compiler for `arch` (a `process.arch` name): `$CC_<ARCH>` when set; for this machine's
 * architecture `$CC`, else `cc`; for another, its cross compiler from `CROSS` (undefined for an
 * architecture it does not list).
 */
export function compilerFor(arch) {
  const own = process.env[`CC_${arch.toUpperCase()}`];
  if (own) return own;
  if (arch === process.arch) return process.env.CC || 'cc';
  return CROSS[arch];
}

/** The modification time of `path` in ms since the epoch, or undefined when it does not exist. */
export function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
}
