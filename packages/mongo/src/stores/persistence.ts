import { DEFAULT_STATE_PREFIX, StowageError, type SnapshotStore, type WorkflowSnapshot } from '@stowage/core';
import { describeType, openStatePersistence } from '@stowage/core/adapter';
import type { MongoStoreOptions } from '../options.js';
import { MongoKeyValueStore } from './kv.js';

export interface MongoPersistenceOptions extends MongoStoreOptions {
  /** Key prefix of every snapshot (default `workflow:state:`). The collection defaults to `workflow_state`. */
  prefix?: string;
}

/**
 * Seed 000's `createMongoPersistence`: a ready (connected) store for awaitly's `durable.run`,
 * kept as key-value documents `{ _id: prefix + id, value: <JSON>, version, updatedAt }` in the
 * key-value collection, once the prefix is recorded there (`E_INVALID_OPTION` when another prefix
 * in the collection starts like it). Closing it closes the client only if stowage created it.
 */
export async function createMongoPersistence<TSnapshot extends object = WorkflowSnapshot>(
  options: MongoPersistenceOptions,
): Promise<SnapshotStore<TSnapshot>> {
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `createMongoPersistence needs options, got ${describeType(options)}`);
  }
  const { prefix = DEFAULT_STATE_PREFIX, ...rest } = options;
  if (typeof prefix !== 'string') throw new StowageError('E_INVALID_OPTION', 'prefix must be a string');
  const kv = new MongoKeyValueStore(rest);
  try {
    await kv.ready();
    return await openStatePersistence<TSnapshot>(kv, prefix, { ownsStore: true });
  } catch (error) {
    await kv.close();
    throw error;
  }
}
