import { defineConfig } from 'tsup';

export default defineConfig({
  entry: { index: 'src/index.ts' },
  format: ['esm', 'cjs'],
  dts: true,
  clean: true,
  // No source maps: they were half of every tarball, and dist is unminified, readable JavaScript.
  sourcemap: false,
  target: 'node22',
  external: ['mongodb', '@stowage/core'],
});
