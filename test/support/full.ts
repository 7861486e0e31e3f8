// Long loops (rounds of shapes, cut points, clean ends, pid-reuse trials) run a representative
// sample by default and their full count with TETHER_TEST_FULL=1, which `npm run stress` sets
// (stress/suite-full.stress.js; docs/benchmarks.md, "Stress"). The assertions are the same
// either way; the test's name says which count it ran.

/** True when TETHER_TEST_FULL=1: every loop runs its full count. */
export const full: boolean = process.env.TETHER_TEST_FULL === '1';

/** `n` by default (never more than `fullN`), `fullN` under TETHER_TEST_FULL=1. */
export function sample(n: number, fullN: number): number {
  return full ? fullN : Math.min(n, fullN);
}

/**
 * Names the count a loop ran, for its test's name: "110 cut points" at full count, "a sample of
 * 20 of 110 cut points (TETHER_TEST_FULL=1 for all)" otherwise.
 */
export function counted(n: number, fullN: number, what: string): string {
  return n >= fullN
    ? `${fullN} ${what}`
    : `a sample of ${n} of ${fullN} ${what} (TETHER_TEST_FULL=1 for all)`;
}

/**
 * `n` of `items`, spread evenly over the list (the first and the last among them), in their
 * order: deterministic, so a failure names a sample that the next run repeats. All of them when
 * `n` ≥ their count.
 */
export function spread<T>(items: readonly T[], n: number): T[] {
  if (n >= items.length) return [...items];
  if (n <= 0) return [];
  if (n === 1) return [items[0] as T];
  return Array.from({ length: n }, (_, i) => items[Math.round((i * (items.length - 1)) / (n - 1))] as T);
}
