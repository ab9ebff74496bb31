import { DEFAULT_STATE_PREFIX, type SnapshotStore, type WorkflowSnapshot } from '@stowage/core';
import { openStatePersistence } from '@stowage/core/adapter';
import { postgresSettings } from '../options.js';
import { PostgresKeyValueStore, type PostgresKeyValueStoreOptions } from './kv.js';

export interface PostgresPersistenceOptions extends PostgresKeyValueStoreOptions {
  /** Key prefix of the snapshots in the table (default `workflow:state:`). */
  prefix?: string;
}

/**
 * awaitly's Postgres persistence: a `durable.run` store kept in the key-value table (default
 * `awaitly_workflow_state`), one row per workflow under `prefix + id`. Resolves once the
 * table exists and the prefix is recorded in it (`E_INVALID_OPTION` when another prefix in the
 * table starts like it); `close()` ends the pool unless you passed your own.
 *
 * ```ts
 * const store = await createPostgresPersistence({ connectionString: process.env.DATABASE_URL });
 * ```
 */
export async function createPostgresPersistence<TSnapshot extends object = WorkflowSnapshot>(
  options: PostgresPersistenceOptions | string,
): Promise<SnapshotStore<TSnapshot>> {
  const { options: given } = postgresSettings(options);
  const kv = new PostgresKeyValueStore(given);
  try {
    await kv.ready();
    return await openStatePersistence<TSnapshot>(kv, given.prefix ?? DEFAULT_STATE_PREFIX, { ownsStore: true });
  } catch (error) {
    await kv.close();
    throw error;
  }
}
