/**
 * go-go-scope's MongoDB persistence page (src/go-go-scope-mongo/basic-usage.ts) on the MongoDB
 * stand-in: every method the page lists, on `goGoScopePersistence(db, { keyPrefix })`.
 */
import type { GoGoScopePersistence } from '@stowage/core/go-go-scope';
import type { Db, Document, MongoClient } from 'mongodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshModules, mongoServer, resourcesOf, runSample, setEnv, type Closable, type MongoTarget } from './harness.ts';

describe("go-go-scope's MongoDB persistence page on the MongoDB stand-in", () => {
  let mongo: MongoTarget | null;
  let restoreEnv = () => {};
  const opened: Closable[] = [];

  beforeAll(async () => {
    mongo = await mongoServer();
    if (mongo) {
      console.log(`[seeds] go-go-scope MongoDB page on ${mongo.label}`);
      restoreEnv = setEnv({ MONGODB_URI: mongo.uri });
    }
  });
  afterAll(async () => {
    await Promise.all(opened.map((resource) => resource.close()));
    restoreEnv();
    await mongo?.stop();
  });

  it('Basic Usage: locks, cache, circuit breaker and idempotency under the keyPrefix, in the go_goscope_* collections', async (context) => {
    if (!mongo) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL)');
    freshModules();
    const sample: Record<string, unknown> & { persistence: GoGoScopePersistence; client: MongoClient; db: Db } = await runSample('go-go-scope-mongo/basic-usage.ts');
    opened.push(...resourcesOf({ persistence: sample.persistence }), ...resourcesOf({ client: sample.client }));
    expect(sample.handle).not.toBeNull();
    expect(sample.extended).toBe(true);
    expect(sample.heldElsewhere).toBeNull();
    expect(sample.user).toEqual({ name: 'Ada' });
    expect(sample.hasUser).toBe(true);
    expect(sample.userKeys).toEqual(['user:1', 'user:2']);
    expect(sample.failures).toBe(1);
    expect(sample.halfOpen).toMatchObject({ state: 'half-open', failureCount: 1 });
    expect(sample.closed).toMatchObject({ state: 'closed', failureCount: 0 });
    expect(sample.cached).toMatchObject({ value: [undefined, { chargeId: 'ch_1' }], expiresAt: expect.any(Number) });

    const collections = (await sample.db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name);
    expect(collections).toEqual(
      expect.arrayContaining(['go_goscope_locks', 'go_goscope_circuit', 'go_goscope_cache', 'go_goscope_checkpoints', 'go_goscope_idempotency']),
    );
    // The key prefix is part of what is stored.
    expect(await sample.persistence.stores.idempotency.get('myapp:charge:order-1')).not.toBeNull();
  });

  it("Basic Usage on the collections go-go-scope's own MongoDBAdapter made and wrote: its documents are adopted at connect(), its held locks still exclude", async (context) => {
    if (!mongo) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL)');
    const db = mongo.client.db('myapp');
    for (const name of ['go_goscope_locks', 'go_goscope_circuit', 'go_goscope_cache', 'go_goscope_idempotency', 'go_goscope_checkpoints']) {
      await db.collection(name).drop().catch(() => undefined); // what the sample above left
    }
    // The page's "Collections and Indexes" (MongoDBAdapter.connect() and MongoDBIdempotencyAdapter.connect()).
    const index = (name: string, key: Document, options: Document = {}) =>
      db.collection(name).createIndex(key, options).catch((error: { code?: number }) => {
        if (error.code !== 238) throw error; // FerretDB 1.x has no TTL indexes
      });
    await index('go_goscope_locks', { key: 1 }, { unique: true });
    await index('go_goscope_locks', { expiresAt: 1 }, { expireAfterSeconds: 0 });
    await index('go_goscope_circuit', { key: 1 }, { unique: true });
    await index('go_goscope_cache', { key: 1 }, { unique: true });
    await index('go_goscope_cache', { expiresAt: 1 }, { expireAfterSeconds: 0 });
    await index('go_goscope_idempotency', { key: 1 }, { unique: true });
    await index('go_goscope_checkpoints', { taskId: 1, sequence: 1 }, { unique: true });
    await index('go_goscope_checkpoints', { taskId: 1 });
    // Documents as `new MongoDBAdapter(db, { keyPrefix: 'myapp:' })` and `new MongoDBIdempotencyAdapter(db)` write them.
    const now = Date.now();
    await db.collection('go_goscope_locks').insertMany([
      { key: 'myapp:lock:resource:123', owner: 'worker-1', expiresAt: new Date(now + 60_000), createdAt: new Date(now) },
      { key: 'myapp:lock:report:nightly', owner: 'worker-9', expiresAt: new Date(now + 60_000), createdAt: new Date(now) },
    ]);
    await db.collection('go_goscope_circuit').insertOne({ key: 'myapp:circuit:inventory-api', state: 'open', failureCount: 5, lastFailureTime: new Date(now), lastSuccessTime: null, updatedAt: new Date(now) });
    await db.collection('go_goscope_cache').insertOne({ key: 'myapp:cache:session:7', value: { user: 'Ada' }, expiresAt: null, updatedAt: new Date(now) });
    await db.collection('go_goscope_idempotency').insertOne({ key: 'charge:order-0', value: [null, { chargeId: 'ch_0' }], expiresAt: new Date(now + 3_600_000), updatedAt: new Date(now) });

    freshModules();
    const sample: Record<string, unknown> & { persistence: GoGoScopePersistence; client: MongoClient } = await runSample('go-go-scope-mongo/basic-usage.ts');
    opened.push(...resourcesOf({ persistence: sample.persistence }), ...resourcesOf({ client: sample.client }));
    // The sample as before: worker-1 held resource:123 under go-go-scope and renews it under stowage.
    expect(sample.handle).toMatchObject({ owner: 'worker-1', fence: 1 });
    expect(sample.extended).toBe(true);
    expect(sample.heldElsewhere).toBeNull();
    expect(sample.userKeys).toEqual(['user:1', 'user:2']);
    const { lock, circuitBreaker, idempotency } = sample.persistence;
    expect(await lock.acquire('report:nightly', 10_000, 'worker-2')).toBeNull(); // still worker-9's
    expect(await circuitBreaker.getState('inventory-api')).toEqual({ state: 'open', failureCount: 5, lastFailureTime: now });
    expect(await idempotency.get('charge:order-0')).toMatchObject({ value: [null, { chargeId: 'ch_0' }] });
    for (const name of ['go_goscope_locks', 'go_goscope_circuit', 'go_goscope_cache', 'go_goscope_idempotency']) {
      expect(await db.collection(name).countDocuments({ key: { $exists: true } }), name).toBe(0);
      expect((await db.collection(name).listIndexes().toArray()).map((found) => found.name), name).not.toContain('key_1');
    }
  });
});
