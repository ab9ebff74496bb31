import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

/** Config for the child run of the *.fixture.ts files (see conformance-catches-bugs.test.ts). */
export default defineConfig({
  // Keep vite's cache out of the source tree.
  cacheDir: join(tmpdir(), 'stowage-core-broken-vite'),
  test: {
    root: import.meta.dirname,
    include: ['*.fixture.ts'],
    maxConcurrency: 20,
    testTimeout: 30_000,
  },
});
