import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    pool: 'forks',
    // Two cores: the servers need one of them.
    maxWorkers: 2,
    testTimeout: 90_000,
    hookTimeout: 180_000,
    reporters: ['default', 'json'],
    outputFile: { json: '.data/test-results.json' },
    projects: [
      {
        extends: true,
        test: {
          name: 'dev',
          include: ['test/**/*.test.ts'],
          exclude: ['test/cluster/**'],
          // One real Temporal dev server and one real PostgreSQL for the whole run, plus a worker.
          globalSetup: ['test/support/global-setup.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'cluster',
          include: ['test/cluster/**/*.test.ts'],
          // The production shape: the real Temporal server on PostgreSQL, two worker processes and
          // two API processes (docs/operations.md, Running on a cluster).
          globalSetup: ['test/support/cluster-setup.ts'],
        },
      },
    ],
  },
});
