// What the global setup (test/support/global.ts) must build before the tests run, by comparing
// each output's mtime with its inputs' (make's rule): on a built tree nothing is, and one small
// test file from the command line costs its tests' own time, not a rebuild of dist/.
import { type Dirent, mkdirSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { BUILD, C_FIXTURES, ROOT } from './paths.js';

/** A C fixture to compile: `test/fixtures/c/NAME.c` → `build/zoo-NAME`. */
export interface FixtureBuild {
  source: string;
  out: string;
}

/** What is stale: the C fixtures to compile, and whether tsc must run. */
export interface StaleBuilds {
  fixtures: FixtureBuild[];
  /**
   * A `src/**\/*.ts` (or tsconfig.json) changed since the last tsc this setup ran began, or newer
   * than its `dist/**\/*.js`, or without one.
   */
  library: boolean;
}

// mtime in ms, or undefined when the path is absent.
function mtime(path: string): number | undefined {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
}

// Every file under `dir` (recursive) whose name passes `keep`.
function filesUnder(dir: string, keep: (name: string) => boolean): string[] {
  let entries: Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name), keep) : keep(e.name) ? [join(dir, e.name)] : [],
  );
}

/** When the last tsc the global setup ran began: the stamp's mtime (build/, not shipped). */
export const LIBRARY_STAMP = join(BUILD, 'tsc-began');

/** Records that a tsc which began at `beganMs` (ms since the epoch) has succeeded. */
export function recordLibraryBuild(beganMs: number): void {
  mkdirSync(BUILD, { recursive: true });
  writeFileSync(LIBRARY_STAMP, '');
  utimesSync(LIBRARY_STAMP, beganMs / 1000, beganMs / 1000);
}

/** Compares sources to outputs; reads mtimes only (a few ms on this tree). */
export function staleBuilds(): StaleBuilds {
  // A fixture includes the headers beside it (fixture.h, hopper.h): a newer one makes them all stale.
  const header = Math.max(0, ...filesUnder(C_FIXTURES, (n) => n.endsWith('.h')).map((h) => mtime(h) ?? 0));
  const fixtures = filesUnder(C_FIXTURES, (n) => n.endsWith('.c'))
    .map((source) => ({ source, out: join(BUILD, `zoo-${relative(C_FIXTURES, source).slice(0, -2)}`) }))
    .filter(({ source, out }) => (mtime(out) ?? -1) < Math.max(mtime(source) ?? 0, header));

  const src = join(ROOT, 'src');
  const config = mtime(join(ROOT, 'tsconfig.json')) ?? 0;
  // An output newer than its source is not enough: a tsc that read a source just before it was
  // edited writes an output newer than the edit. The stamp holds when the last tsc began.
  const began = mtime(LIBRARY_STAMP) ?? -1;
  const library = filesUnder(src, (n) => n.endsWith('.ts') && !n.endsWith('.d.ts')).some((file) => {
    const out = join(ROOT, 'dist', `${relative(src, file).slice(0, -3)}.js`);
    const input = Math.max(mtime(file) ?? 0, config);
    return input >= began || (mtime(out) ?? -1) < input;
  });

  return { fixtures, library };
}
