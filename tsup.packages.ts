import type { Options } from 'tsup';

/**
 * The build settings every published library package shares (core, postgres, mongo): ESM and
 * CommonJS with type declarations, for Node 22 and later.
 */
export const libraryBuild = {
  format: ['esm', 'cjs'],
  dts: true,
  clean: true,
  // No source maps: they were half of every tarball, and dist is unminified, readable JavaScript.
  sourcemap: false,
  target: 'node22',
} satisfies Options;
