import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // One real Temporal dev server and one real PostgreSQL for the whole run, plus a worker.
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    // Two cores: the servers need one of them.
    maxWorkers: 2,
    testTimeout: 90_000,
    hookTimeout: 180_000,
    reporters: ['default', 'json'],
    outputFile: { json: '.data/test-results.json' },
  },
});
