import { defineConfig } from 'tsup';
import { libraryBuild } from '../../tsup.packages.js';

export default defineConfig({
  entry: {
    index: 'src/index.ts',
    adapter: 'src/adapter/index.ts',
    memory: 'src/memory/index.ts',
    // go-go-scope's persistence providers on stowage stores.
    'go-go-scope': 'src/go-go-scope/index.ts',
    // OpenTelemetry spans and metrics from the kit's diagnostics channels; the only entry that imports @opentelemetry/api.
    telemetry: 'src/telemetry/index.ts',
    conformance: 'src/conformance/index.ts',
    // The multi-process crash test, for adapters' worker scripts and tests.
    'conformance/crash': 'src/conformance/crash-scenario.ts',
  },
  ...libraryBuild,
  // One copy of each module across the entry points, for CommonJS too: a StowageError thrown by
  // the kit (`@stowage/core/adapter`) must be an `instanceof` the one users import from the root.
  splitting: true,
  external: ['vitest', '@opentelemetry/api'],
});
