import {
  DEFAULT_STATE_PREFIX,
  StowageError,
  createStatePersistence,
  type SnapshotStore,
  type WorkflowSnapshot,
} from '@stowage/core';
import { PostgresKeyValueStore, type PostgresKeyValueStoreOptions } from './kv.js';

export interface PostgresPersistenceOptions extends PostgresKeyValueStoreOptions {
  /** Key prefix of the snapshots in the table (default `workflow:state:`). */
  prefix?: string;
}

/**
 * Seed 002: a `durable.run` store kept in the key-value table (default
 * `awaitly_workflow_state`), one row per workflow under `prefix + id`. Resolves once the
 * table exists; `close()` ends the pool unless you passed your own.
 *
 * ```ts
 * const store = await createPostgresPersistence({ connectionString: process.env.DATABASE_URL });
 * ```
 */
export async function createPostgresPersistence<TSnapshot extends object = WorkflowSnapshot>(
  options: PostgresPersistenceOptions | string,
): Promise<SnapshotStore<TSnapshot>> {
  const parsed: PostgresPersistenceOptions = typeof options === 'string' ? { url: options } : options;
  if (parsed === null || typeof parsed !== 'object') {
    throw new StowageError('E_INVALID_OPTION', 'options must be a URL or an object');
  }
  const kv = new PostgresKeyValueStore(parsed);
  try {
    await kv.ready();
    return createStatePersistence<TSnapshot>(kv, parsed.prefix ?? DEFAULT_STATE_PREFIX, { ownsStore: true });
  } catch (error) {
    await kv.close();
    throw error;
  }
}
