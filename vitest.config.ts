import { defineConfig } from 'vitest/config';
import LongFilesFirstSequencer from './test/support/long-files-first.js';

/**
 * CHARGEGUARD_TEST_FIXTURE=failing|passing|broken-suite runs one of test/fixtures/exit-status/
 * through the dev project instead of the suite: the exit-status check (scripts/check-test-exit-status.sh)
 * proves that a failing run exits non-zero under this very config and its global setup.
 */
const exitStatusFixture = process.env.CHARGEGUARD_TEST_FIXTURE;
if (exitStatusFixture !== undefined && !/^(failing|passing|broken-suite)$/.test(exitStatusFixture)) {
  throw new Error(`CHARGEGUARD_TEST_FIXTURE must be failing, passing or broken-suite, not ${JSON.stringify(exitStatusFixture)}`);
}

export default defineConfig({
  test: {
    pool: 'forks',
    // Two cores: the servers need one of them.
    maxWorkers: 2,
    // Without recorded timings (a fresh clone, CI) the files that run for minutes start first, not last.
    sequence: { sequencer: LongFilesFirstSequencer },
    testTimeout: 90_000,
    hookTimeout: 180_000,
    reporters: ['default', 'json'],
    outputFile: { json: '.data/test-results.json' },
    projects: [
      {
        extends: true,
        test: {
          name: 'dev',
          include: exitStatusFixture === undefined ? ['test/**/*.test.ts'] : [`test/fixtures/exit-status/${exitStatusFixture}.fixture.ts`],
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
