/** Opens stowage's Mongo adapter on a MongoClient the bench owns. */
import { MongoCacheProvider, MongoKeyValueStore, MongoLockProvider, mongo } from '@stowage/mongo';
import type { MongoClient } from 'mongodb';
import type { StowageSet } from '../ops.ts';

export interface OpenedMongoStowage {
  set: StowageSet;
  close(): Promise<void>;
}

export async function openStowageMongo(client: MongoClient, database: string): Promise<OpenedMongoStowage> {
  const set: StowageSet = {
    kv: new MongoKeyValueStore({ client, database }),
    snapshots: mongo({ client, database, lock: true }),
    locks: new MongoLockProvider({ client, database }),
    cache: new MongoCacheProvider({ client, database, prefix: 'bench' }),
  };
  return {
    set,
    close: async () => {
      await Promise.all(Object.values(set).map((resource) => resource.close()));
    },
  };
}

/** A lock provider on its own client (wake-ups by change streams where the server has them). */
export async function openMongoLockProvider(client: MongoClient, database: string): Promise<MongoLockProvider> {
  return new MongoLockProvider({ client, database }).connect();
}
