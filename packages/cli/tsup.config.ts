import { defineConfig } from 'tsup';

export default defineConfig({
  entry: { cli: 'src/cli.ts' },
  format: ['esm'],
  dts: false,
  clean: true,
  sourcemap: true,
  target: 'node22',
  // Drivers and adapters are the user's (peer dependencies), loaded only for the backend a URL names.
  external: ['pg', 'mongodb', '@stowage/core', '@stowage/postgres', '@stowage/mongo'],
});
