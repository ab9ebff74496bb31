import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Several files start many OS processes (20-process first use, SIGKILL crash tests) and
    // wait for them; on a 2-core CI machine they must not compete with each other.
    fileParallelism: false,
    projects: [
      {
        extends: true,
        test: { name: 'postgres', include: ['test/**/*.test.ts'], exclude: ['test/conformance*.pglite.test.ts'] },
      },
      {
        // Embedded PGlite is one database session behind a multiplexer that can interleave the
        // extended-protocol messages of concurrent connections (a Bind can reach another
        // connection's statement). Its suite therefore uses one connection, and runs its cases
        // one at a time so that lease extensions are never queued behind other cases' work.
        extends: true,
        test: { name: 'pglite', include: ['test/conformance*.pglite.test.ts'], maxConcurrency: 1 },
      },
    ],
  },
});
