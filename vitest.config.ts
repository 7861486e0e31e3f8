import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    fileParallelism: false,
    globalSetup: ['test/support/global.ts'],
    setupFiles: ['test/support/reaper.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
