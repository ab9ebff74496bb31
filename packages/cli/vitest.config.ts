import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Each file starts servers (PGlite, jongodb, PgBouncer) and runs the built CLI as child
    // processes; on a 2-core CI machine they run one file at a time.
    fileParallelism: false,
    globalSetup: ['./test/global-setup.ts'],
  },
});
