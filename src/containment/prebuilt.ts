// Where the helper binaries live in the package, one per architecture (docs/containment.md,
// "The helper"): dist/native/linux-<arch>/tether-helper. The file keeps the name
// `tether-helper`, so `ps` and /proc/<pid>/comm name the helper the same on every machine.
// scripts/build-helper.mjs builds into this layout; `helperPath` looks there.
import { fileURLToPath } from 'node:url';

/** The architectures (`process.arch`) a published package carries a static helper for. */
export const PREBUILT_ARCHES: readonly string[] = ['x64', 'arm64'];

/** The helper's path for `arch`, relative to the package's dist/ directory. */
export function helperFile(arch: string): string {
  return `native/linux-${arch}/tether-helper`;
}

/**
 * `uname -m` (the kernel's machine name, utsname(2)) → the architecture whose prebuilt helper
 * runs there. A machine not named here has no prebuilt helper: 32-bit personalities (`i686`,
 * `armv8l` under `linux32`) included — a 64-bit helper would run there, but such a target asked
 * to look 32-bit, and it is not what a package tests.
 */
export const MACHINE_ARCH: Readonly<Record<string, string>> = {
  x86_64: 'x64',
  amd64: 'x64',
  aarch64: 'arm64',
  arm64: 'arm64',
};

/**
 * Where the package's helper for `arch` may be, in the order looked at: dist/native/… beside
 * this module's dist/ (an installed package), then the checkout's dist/ (this module run from
 * src/, as under the tests). The same places as `helperPath`'s, without its TETHER_HELPER
 * override (that names this machine's helper, not a target's).
 */
export function prebuiltCandidates(arch: string): string[] {
  const file = helperFile(arch);
  return [`../${file}`, `../../dist/${file}`].map((relative) =>
    fileURLToPath(new URL(relative, import.meta.url)),
  );
}
