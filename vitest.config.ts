import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // e2e tests spawn CLI processes; two cores, so keep the fan-out small.
    maxWorkers: 2,
    // Runs keep a journal for the dashboard (live progress, log lines); the suite's runs keep theirs out of $HOME,
    // one folder per worker.
    setupFiles: ['test/helpers/journal-per-worker.ts'],
  },
});
