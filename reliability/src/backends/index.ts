import { findMongoServer, findPgBouncer, findPostgresServer, isCI, startEmbeddedPostgres, startJongodb } from '@stowage/test-env';
import type { Backend, BackendName, BackendTarget } from './types.ts';

/** Opens a backend from its target; workers call this with what their parent sent them. */
export async function openBackend(target: BackendTarget): Promise<Backend> {
  switch (target.name) {
    case 'memory':
      return (await import('./memory.ts')).memoryBackend(target);
    case 'pglite':
    case 'postgres':
    case 'pgbouncer':
      return (await import('./postgres.ts')).postgresBackend(target);
    case 'mongo':
    case 'jongodb':
      return (await import('./mongo.ts')).mongoBackend(target);
  }
}

export type FoundTarget =
  | { name: BackendName; target: BackendTarget; stop(): Promise<void> }
  | { name: BackendName; unavailable: string; fails: boolean };

/**
 * Finds one backend the way every stowage test does (@stowage/test-env). A backend that is not
 * there is reported, and under CI=true it fails the run.
 */
export async function findTarget(name: BackendName, namespace: string): Promise<FoundTarget> {
  const missing = (reason: string): FoundTarget => ({ name, unavailable: reason, fails: isCI });
  try {
    switch (name) {
      case 'memory':
        return { name, target: { name, label: 'in-memory adapter (@stowage/core/memory)', url: null, namespace }, stop: async () => {} };
      case 'pglite': {
        const found = await startEmbeddedPostgres({ maxConnections: 100, separateProcess: true });
        return { name, target: { name, label: found.label, url: found.url, namespace }, stop: () => found.stop() };
      }
      case 'postgres': {
        const found = await findPostgresServer();
        if (!found) return missing('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
        return { name, target: { name, label: found.label, url: found.url, namespace }, stop: () => found.stop() };
      }
      case 'pgbouncer': {
        // The same adapter and server, every connection through PgBouncer in transaction mode.
        const found = await findPgBouncer();
        if (!found) return missing('no PgBouncer (set STOWAGE_PGBOUNCER_URL; `.ci/pgbouncer.sh start` prints one)');
        return { name, target: { name, label: found.label, url: found.url, namespace }, stop: () => found.stop() };
      }
      case 'mongo': {
        const found = await findMongoServer();
        if (!found) return missing('no MongoDB server (set STOWAGE_MONGO_URL)');
        return { name, target: { name, label: found.label, url: found.url, namespace }, stop: () => found.stop() };
      }
      case 'jongodb': {
        // The second MongoDB-wire stand-in, always there (an npm binary): atomic updates, so the
        // lock-safety and lost-updates rows run on it, unlike on FerretDB 1.x.
        const found = await startJongodb();
        return { name, target: { name, label: found.label, url: found.url, namespace }, stop: () => found.stop() };
      }
    }
  } catch (error) {
    return { name, unavailable: (error as Error).message, fails: true };
  }
}

/** Checks that the adapter package for a backend loads (it may not be built or written yet). */
export async function adapterLoads(target: BackendTarget): Promise<string | null> {
  try {
    const backend = await openBackend(target);
    await backend.close();
    return null;
  } catch (error) {
    return `adapter did not load: ${(error as Error).message}`;
  }
}
