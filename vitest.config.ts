import { defineConfig } from 'vitest/config';

// Test files that change or depend on machine-wide state run alone, one after another, after
// the others: the pid allocator (ns_last_pid, pid_max: the native scan's pid-length walk and
// the pid-reuse trials, whose exact collisions another file's forks would take). Every other
// file runs beside others (its processes carry their own tags, its cgroups, namespaces, ledgers
// and ports are its own).
const SERIAL = ['test/proc/native.test.ts', 'test/sweep/pid-reuse.test.ts'];

// What every file gets: its own forked worker, made a child subreaper that reaps the test's
// orphans (test/support/reaper.ts), and a minute per test or hook.
const common = {
  pool: 'forks' as const,
  setupFiles: ['test/support/reaper.ts'],
  testTimeout: 60_000,
  hookTimeout: 60_000,
};

export default defineConfig({
  test: {
    // Once for the whole run, before either group: the tools probe, the build of what is stale,
    // and at the end the leak guard (test/support/global.ts).
    globalSetup: ['test/support/global.ts'],
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
