import { defineConfig } from 'vitest/config';

// CI sets QUORUMFENCE_TEST_REPORT to a path and reads its own summary from that JSON.
const jsonReport = process.env.QUORUMFENCE_TEST_REPORT;

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    setupFiles: ['test/support/setup.ts'],
    // Fails the run naming whatever a test left in the temp or the home directory.
    globalSetup: ['test/support/leftovers.ts'],
    // Integration tests run real processes; two workers match the two cores CI has.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: jsonReport ? ['default', ['json', { outputFile: jsonReport }]] : ['default'],
  },
});
