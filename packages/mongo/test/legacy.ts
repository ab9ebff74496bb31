import type { Collection, Db, Document } from 'mongodb';

/*
 * Collections and documents as awaitly-mongo and go-go-scope's MongoDB adapters create and
 * write them (the same commands, with the same values): the adoption tests start from these.
 */

/** Creates an index as those adapters do; a server without TTL indexes (FerretDB 1.x) refuses the option, and they would have nothing there. */
async function createIndexAsGiven(collection: Collection, key: Document, options: Document = {}): Promise<void> {
  try {
    await collection.createIndex(key, options);
  } catch (error) {
    if ((error as { code?: unknown }).code !== 238) throw error; // NotImplemented: expireAfterSeconds
  }
}

/** awaitly-mongo's collection: created when missing, then its TTL index `expiresAt_ttl` (its docs' "Automatic Collection and Index Creation"). */
export async function awaitlyMongoCollection(db: Db, name: string): Promise<Collection<Document>> {
  await db.createCollection(name).catch(() => undefined); // jongodb has no `create`: the first insert creates it
  const collection = db.collection(name);
  await createIndexAsGiven(collection, { expiresAt: 1 }, { expireAfterSeconds: 0, name: 'expiresAt_ttl' });
  return collection;
}

/** awaitly-mongo's `set(key, value, { ttl })` (ttl in seconds). */
export async function awaitlyMongoSet(collection: Collection<Document>, key: string, value: string, ttlSeconds?: number): Promise<void> {
  const expiresAt = ttlSeconds ? new Date(Date.now() + ttlSeconds * 1000) : undefined;
  const update: Document = { $set: { value, updatedAt: new Date(), ...(expiresAt !== undefined ? { expiresAt } : {}) } };
  if (expiresAt === undefined) update.$unset = { expiresAt: '' };
  await collection.updateOne({ _id: key as never }, update, { upsert: true });
}

export interface GoGoScopeCollections {
  locks: Collection<Document>;
  circuit: Collection<Document>;
  cache: Collection<Document>;
  idempotency: Collection<Document>;
  checkpoints: Collection<Document>;
}

/** go-go-scope's `MongoDBAdapter.connect()` and `MongoDBIdempotencyAdapter.connect()` indexes, and the checkpoint indexes its docs list. */
export async function goGoScopeCollections(db: Db, names: Record<keyof GoGoScopeCollections, string>): Promise<GoGoScopeCollections> {
  const collections = {
    locks: db.collection(names.locks),
    circuit: db.collection(names.circuit),
    cache: db.collection(names.cache),
    idempotency: db.collection(names.idempotency),
    checkpoints: db.collection(names.checkpoints),
  };
  await createIndexAsGiven(collections.locks, { key: 1 }, { unique: true });
  await createIndexAsGiven(collections.locks, { expiresAt: 1 }, { expireAfterSeconds: 0 });
  await createIndexAsGiven(collections.circuit, { key: 1 }, { unique: true });
  await createIndexAsGiven(collections.cache, { key: 1 }, { unique: true });
  await createIndexAsGiven(collections.cache, { expiresAt: 1 }, { expireAfterSeconds: 0 });
  await createIndexAsGiven(collections.idempotency, { key: 1 }, { unique: true });
  await createIndexAsGiven(collections.idempotency, { expiresAt: 1 }, { expireAfterSeconds: 0 });
  await createIndexAsGiven(collections.checkpoints, { taskId: 1, sequence: 1 }, { unique: true });
  await createIndexAsGiven(collections.checkpoints, { taskId: 1 });
  return collections;
}

/** The writes of go-go-scope's adapters, for `keyPrefix` (its `MongoDBAdapter` option). */
export function goGoScopeWriter(collections: GoGoScopeCollections, keyPrefix: string) {
  return {
    /** `acquire(key, ttl, owner)`: an insert; a held lock is a duplicate key. */
    acquire: (key: string, ttl: number, owner: string) =>
      collections.locks.insertOne({ key: `${keyPrefix}lock:${key}`, owner, expiresAt: new Date(Date.now() + ttl), createdAt: new Date() }),
    setState: (key: string, state: { state: string; failureCount: number; lastFailureTime?: number; lastSuccessTime?: number }) =>
      collections.circuit.updateOne(
        { key: `${keyPrefix}circuit:${key}` },
        {
          $set: {
            state: state.state,
            failureCount: state.failureCount,
            lastFailureTime: state.lastFailureTime ? new Date(state.lastFailureTime) : undefined,
            lastSuccessTime: state.lastSuccessTime ? new Date(state.lastSuccessTime) : undefined,
            updatedAt: new Date(),
          },
        },
        { upsert: true },
      ),
    cacheSet: (key: string, value: unknown, ttl?: number) =>
      collections.cache.updateOne(
        { key: `${keyPrefix}cache:${key}` },
        { $set: { key: `${keyPrefix}cache:${key}`, value, expiresAt: ttl ? new Date(Date.now() + ttl) : undefined, updatedAt: new Date() } },
        { upsert: true },
      ),
    /** `MongoDBIdempotencyAdapter#set`, whose own keyPrefix is `idempotencyPrefix`. */
    idempotencySet: (key: string, value: unknown, ttl?: number, idempotencyPrefix = '') =>
      collections.idempotency.updateOne(
        { key: idempotencyPrefix + key },
        { $set: { key: idempotencyPrefix + key, value, expiresAt: ttl ? new Date(Date.now() + ttl) : undefined, updatedAt: new Date() } },
        { upsert: true },
      ),
    /** A checkpoint in the shape of go-go-scope's checkpoint providers (`id`, `taskId`, …, the data as it is). */
    saveCheckpoint: (checkpoint: { id: string; taskId: string; sequence: number; timestamp: number; progress: number; data: unknown }) =>
      collections.checkpoints.insertOne({ ...checkpoint, createdAt: new Date() }),
  };
}
