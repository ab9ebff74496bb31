/** Opens stowage's Mongo adapter on a MongoClient the bench owns. */
import { MongoCacheProvider, MongoKeyValueStore, MongoLockProvider, mongo } from '@stowage/mongo';
import type { MongoClient } from 'mongodb';
import { ANCHOR_CACHE_PREFIX, ANCHOR_COLLECTIONS } from '../anchor-mongo.ts';
import type { AnchorStores, StowageSet } from '../ops.ts';

export interface OpenedMongoStowage {
  set: StowageSet;
  /** The key-value store and cache on the anchor collections, with coalescing (default) and without. */
  anchor: AnchorStores;
  anchorVariant: AnchorStores;
  close(): Promise<void>;
}

export async function openStowageMongo(client: MongoClient, database: string): Promise<OpenedMongoStowage> {
  const set: StowageSet = {
    kv: new MongoKeyValueStore({ client, database }),
    snapshots: mongo({ client, database, lock: true }),
    locks: new MongoLockProvider({ client, database }),
    cache: new MongoCacheProvider({ client, database, prefix: 'bench' }),
  };
  const anchorOn = (coalesce: boolean): AnchorStores => ({
    kv: new MongoKeyValueStore({ client, database, collection: ANCHOR_COLLECTIONS.kv, coalesce }),
    cache: new MongoCacheProvider({ client, database, collection: ANCHOR_COLLECTIONS.cache, prefix: ANCHOR_CACHE_PREFIX, coalesce }),
  });
  const anchor = anchorOn(true);
  const anchorVariant = anchorOn(false);
  const all = [...Object.values(set), ...Object.values(anchor), ...Object.values(anchorVariant)];
  return {
    set,
    anchor,
    anchorVariant,
    close: async () => {
      await Promise.all(all.map((resource) => resource.close()));
    },
  };
}
