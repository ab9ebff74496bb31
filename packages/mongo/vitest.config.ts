import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // The conformance cases sleep through 1 s leases against a real server: a few at a time keeps
    // a slow or shared server (FerretDB on a busy 2-core CI machine answers in 50-200 ms under
    // load) inside those margins.
    maxConcurrency: 3,
    fileParallelism: false,
  },
});
