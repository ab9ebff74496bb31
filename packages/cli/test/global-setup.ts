import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from '@stowage/test-env';

/*
 * One embedded PGlite for every test file (its start costs seconds of WASM compilation, many
 * on a loaded machine); each file works in a schema of its own. The CLI's child processes
 * reach it over TCP like any server.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const pglite = await startEmbeddedPostgres({ maxConnections: 8 });
  project.provide('pgliteUrl', pglite.url);
  return () => pglite.stop();
}

declare module 'vitest' {
  export interface ProvidedContext {
    pgliteUrl: string;
  }
}
