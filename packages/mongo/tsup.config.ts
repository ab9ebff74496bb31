import { defineConfig } from 'tsup';
import { libraryBuild } from '../../tsup.packages.js';

export default defineConfig({
  entry: { index: 'src/index.ts' },
  ...libraryBuild,
  external: ['mongodb', '@stowage/core'],
});
