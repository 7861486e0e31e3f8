import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { defineConfig } from 'vitest/config';

// Test files that change or depend on machine-wide state run alone, one after another, after
// the others: the pid allocator (ns_last_pid, pid_max: the native scan's pid-length walk and
// the pid-reuse trials, whose exact collisions another file's forks would take). Every other
// file runs beside others (its processes carry their own tags, its cgroups, namespaces, ledgers
// and ports are its own).
const SERIAL = ['test/proc/native.test.ts', 'test/sweep/pid-reuse.test.ts'];

// The longest files (20–60 s each: a whole package build, fd exhaustion loops, real Playwright)
// start first, so that none of them is the tail of a run; vitest orders the rest by the
// durations it cached (on a fresh clone: by size, which does not tell a slow file).
const LONGEST = [
  'test/package/install.test.ts',
  'test/session/robust.test.ts',
  'test/ledger/postgres-faults.test.ts',
  'test/cli/startup.test.ts',
  'test/adapters/playwright.test.ts',
];

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (f: TestSpecification) => {
      const i = LONGEST.findIndex((name) => f.moduleId.endsWith(name));
      return i < 0 ? LONGEST.length : i;
    };
    // Array.prototype.sort is stable: the rest keep vitest's order. vitest calls this once a
    // group (sequence.groupOrder), so the serial group still runs after.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}

// What every file gets: its own forked worker, made a child subreaper that reaps the test's
// orphans (test/support/reaper.ts), its temp dirs removed after it (test/support/temp-cleanup.ts),
// its path exported to what it starts (test/support/file-mark.ts), and a minute per test or hook.
const common = {
  pool: 'forks' as const,
  setupFiles: ['test/support/reaper.ts', 'test/support/temp-cleanup.ts', 'test/support/file-mark.ts'],
  testTimeout: 60_000,
  hookTimeout: 60_000,
};

export default defineConfig({
  test: {
    // Once for the whole run, before either group: the tools probe, the build of what is stale,
    // and at the end the leak guard (test/support/global.ts).
    globalSetup: ['test/support/global.ts'],
    sequence: { sequencer: LongestFirst },
    projects: [
      {
        test: {
          ...common,
          name: 'parallel',
          include: ['test/**/*.test.ts'],
          exclude: SERIAL,
          // Most tests wait on processes and timers, not the CPU: more files than cores.
          maxWorkers: 3,
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          ...common,
          name: 'serial',
          include: SERIAL,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
