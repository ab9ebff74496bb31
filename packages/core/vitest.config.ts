import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The conformance cases mostly wait out short TTLs; running more at once keeps the suite quick.
    maxConcurrency: 20,
  },
});
