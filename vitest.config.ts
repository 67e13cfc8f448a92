import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/globalSetup.ts'],
    setupFiles: ['test/support/quietLogs.ts'],
    // Each test file gets its own database and queue prefix, so files could run in parallel; two workers
    // keep a 2-core machine responsive while Postgres does the real work.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
