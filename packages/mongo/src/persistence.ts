import { DEFAULT_STATE_PREFIX, StowageError, createStatePersistence, describeType, type SnapshotStore, type WorkflowSnapshot } from '@stowage/core';
import type { MongoConnectionOptions } from './connection.js';
import { MongoKeyValueStore } from './kv.js';
import type { MongoDialectOption } from './server-features.js';
import { DEFAULT_COLLECTIONS } from './schema.js';

export interface MongoPersistenceOptions extends MongoConnectionOptions {
  /** The key-value collection (default `workflow_state`). */
  collection?: string;
  /** Key prefix of every snapshot (default `workflow:state:`). */
  prefix?: string;
  /** Create the collection and TTL index on first use (default `true`). */
  autoCreate?: boolean;
  /** See `MongoStoreOptions.dialect` (default `auto`). */
  dialect?: MongoDialectOption;
}

/**
 * Seed 000's `createMongoPersistence`: a ready (connected) store for awaitly's `durable.run`,
 * kept as `{ _id: prefix + id, value: <JSON>, version, updatedAt }` documents in the key-value
 * collection. Closing it closes the client only if stowage created it.
 */
export async function createMongoPersistence<TSnapshot extends object = WorkflowSnapshot>(
  options: MongoPersistenceOptions,
): Promise<SnapshotStore<TSnapshot>> {
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `createMongoPersistence needs options, got ${describeType(options)}`);
  }
  const { prefix = DEFAULT_STATE_PREFIX, collection = DEFAULT_COLLECTIONS.kv, ...rest } = options;
  if (typeof prefix !== 'string') throw new StowageError('E_INVALID_OPTION', 'prefix must be a string');
  const kv = new MongoKeyValueStore({ ...rest, collection });
  try {
    await kv.connect();
  } catch (error) {
    await kv.close();
    throw error;
  }
  return createStatePersistence<TSnapshot>(kv, prefix, { ownsStore: true });
}
