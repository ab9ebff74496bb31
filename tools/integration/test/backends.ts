/**
 * The stores the awaitly client tests run against, each a real stowage adapter on a real
 * database: in-memory, PostgreSQL on embedded PGlite (through the real `pg` driver), the
 * PostgreSQL server and the MongoDB server of the environment (@stowage/test-env finders:
 * outside CI a server that is not configured is skipped with a reason; under CI=true its
 * absence fails the run).
 *
 * Every factory returns stowage's own types; the tests hand them to awaitly as they are.
 */
import { randomUUID } from 'node:crypto';
import { createStatePersistence, type LockingSnapshotStore, type SnapshotStore, type WorkflowSnapshot } from '@stowage/core';
import { MemoryKeyValueStore, createMemoryStorage, memory } from '@stowage/core/memory';
import { createMongoPersistence, mongo } from '@stowage/mongo';
import { createPostgresPersistence, postgres } from '@stowage/postgres';
import { findMongoServer, findPostgresServer, startEmbeddedPostgres, startJongodb, type FoundBackend } from '@stowage/test-env';
import type { serializeResumeState } from 'awaitly/workflow';

/** What awaitly's resume-state flow persists: `serializeResumeState(collector.getResumeState())`. */
export type SerializedResumeState = ReturnType<typeof serializeResumeState>;

/**
 * One namespace on one backend. Stores opened from it share data, like two processes on one
 * database: open a second store to play "after the restart".
 */
export interface Namespace {
  snapshots(): SnapshotStore<WorkflowSnapshot>;
  lockingSnapshots(): LockingSnapshotStore<WorkflowSnapshot>;
  resumeStates(): SnapshotStore<SerializedResumeState>;
  /** awaitly's key-value persistence (`createStatePersistence` over the backend's key-value store). */
  keyValuePersistence(): Promise<SnapshotStore<WorkflowSnapshot>>;
}

export interface Backend {
  name: string;
  /** Starts or finds the database; `null` when it is not available (outside CI only). */
  start(): Promise<{ label: string; namespace(): Namespace; stop(): Promise<void> } | null>;
}

function unique(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
}

function postgresNamespaces(found: FoundBackend) {
  return {
    label: found.label,
    namespace(): Namespace {
      // A table of its own per namespace, so runs never see each other's snapshots.
      const table = unique('awaitly_it');
      const lockTableName = `${table}_locks`;
      return {
        snapshots: () => postgres({ url: found.url, table, pool: { max: 2 } }),
        lockingSnapshots: () => postgres({ url: found.url, table, pool: { max: 2 }, lock: { lockTableName } }),
        resumeStates: () => postgres<SerializedResumeState>({ url: found.url, table, pool: { max: 2 } }),
        keyValuePersistence: () => createPostgresPersistence({ url: found.url, tableName: `${table}_kv`, pool: { max: 2 } }),
      };
    },
    stop: () => found.stop(),
  };
}

export const BACKENDS: Backend[] = [
  {
    name: 'memory',
    start: async () => ({
      label: 'in-memory (@stowage/core/memory)',
      namespace(): Namespace {
        const storage = createMemoryStorage();
        return {
          snapshots: () => memory({ storage }),
          lockingSnapshots: () => memory({ storage, lock: true }),
          resumeStates: () => memory<SerializedResumeState>({ storage }),
          keyValuePersistence: async () => createStatePersistence(new MemoryKeyValueStore({ storage }), undefined, { ownsStore: true }),
        };
      },
      stop: async () => {},
    }),
  },
  {
    name: 'postgres (embedded PGlite)',
    start: async () => postgresNamespaces(await startEmbeddedPostgres()),
  },
  {
    name: 'postgres (server)',
    start: async () => {
      const found = await findPostgresServer();
      return found && postgresNamespaces(found);
    },
  },
  {
    name: 'mongo (server)',
    start: async () => {
      const found = await findMongoServer();
      return found && mongoNamespaces(found);
    },
  },
  {
    name: 'mongo (jongodb)',
    start: async () => mongoNamespaces(await startJongodb()),
  },
];

function mongoNamespaces(found: FoundBackend) {
  return {
    label: found.label,
    namespace(): Namespace {
      const collection = unique('awaitly_it');
      const options = { url: found.url, database: 'stowage_integration', collection };
      return {
        snapshots: () => mongo(options),
        lockingSnapshots: () => mongo({ ...options, lock: { collection: `${collection}_locks` } }),
        resumeStates: () => mongo<SerializedResumeState>(options),
        keyValuePersistence: () => createMongoPersistence({ ...options, collection: `${collection}_kv` }),
      };
    },
    stop: () => found.stop(),
  };
}
