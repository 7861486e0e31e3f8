// Where the helper binaries live in the package, one per architecture (docs/containment.md,
// "The helper"): dist/native/linux-<arch>/tether-helper. The file keeps the name
// `tether-helper`, so `ps` and /proc/<pid>/comm name the helper the same on every machine.
// scripts/build-helper.mjs builds into this layout; `helperPath` looks there.

/** The architectures (`process.arch`) a published package carries a static helper for. */
export const PREBUILT_ARCHES: readonly string[] = ['x64', 'arm64'];

/** The helper's path for `arch`, relative to the package's dist/ directory. */
export function helperFile(arch: string): string {
  return `native/linux-${arch}/tether-helper`;
}
