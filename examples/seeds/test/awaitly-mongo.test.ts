/**
 * The awaitly-mongo docs' samples (src/awaitly-mongo/), each run as written on the MongoDB
 * stand-in (STOWAGE_MONGO_URL as MONGODB_URI, with a database of this run as its default).
 */
import type { SnapshotStore, WorkflowSnapshot } from '@stowage/core';
import type { MongoClient } from 'mongodb';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freshModules, mongoServer, resourcesOf, runSample, setEnv, type Closable, type MongoTarget } from './harness.ts';

type Calls = { calls: { fetchUser: number; createOrder: number } };
type DurableResult = { ok: boolean; value?: unknown; error?: unknown };

/** A workflow snapshot as durable.run saves it after `fetch-user`. */
const snapshot: WorkflowSnapshot = {
  formatVersion: 1,
  steps: { 'fetch-user': { ok: true, value: { id: '123', name: 'Ada' } } },
  execution: { status: 'running', lastUpdated: '2024-01-15T10:30:00.000Z' },
};

describe('awaitly-mongo samples on the MongoDB stand-in', () => {
  let mongo: MongoTarget | null;
  let restoreEnv = () => {};
  const opened: Closable[] = [];

  beforeAll(async () => {
    mongo = await mongoServer();
    if (mongo) {
      console.log(`[seeds] awaitly-mongo samples on ${mongo.label}`);
      restoreEnv = setEnv({ MONGODB_URI: mongo.uri });
    }
  });
  beforeEach(() => freshModules());
  afterAll(async () => {
    await Promise.all(opened.map((resource) => resource.close()));
    restoreEnv();
    await mongo?.stop();
  });

  /** Runs a sample with MONGODB_URI set; what it opened is closed after the file. */
  async function run<T extends object>(context: { skip(note?: string): never }, path: string): Promise<T & Calls> {
    if (!mongo) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL)');
    const exports = await runSample<T>(`awaitly-mongo/${path}`);
    opened.push(...resourcesOf(exports));
    return { ...exports, ...(await runSample<Calls>('deps.ts')) };
  }

  it('Quick Start, as written: awaitly 1.35.0 calls the workflow with ({ step, deps }), so it fails inside awaitly', async (context) => {
    const { result, store, calls } = await run<{ result: DurableResult; store: SnapshotStore }>(context, 'quick-start.ts');
    expect(result.ok).toBe(false);
    expect(String((result.error as { cause?: unknown }).cause)).toContain("Cannot destructure property 'fetchUser'");
    expect(calls).toEqual({ fetchUser: 0, createOrder: 0 });
    expect(await store.load('checkout-123')).toBeNull(); // the store was created and is fine
  });

  it("Quick Start, with awaitly 1.35.0's workflow function: completes, and its state is removed", async (context) => {
    const { result, store, calls } = await run<{ result: DurableResult; store: SnapshotStore }>(context, 'quick-start.changed.ts');
    expect(result).toEqual({ ok: true, value: { orderId: 'order-for-123', total: 42 } });
    expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });
    expect(await store.load('checkout-123')).toBeNull();
  });

  it('With Database and Collection Names: saved in myapp.custom_workflow_state under myapp:workflow:', async (context) => {
    const { store } = await run<{ store: SnapshotStore }>(context, 'database-and-collection-names.ts');
    await store.save('wf-1', snapshot);
    expect(await store.load('wf-1')).toEqual(snapshot);
    const document = await mongo!.client.db('myapp').collection<{ _id: string }>('custom_workflow_state').findOne({ _id: 'myapp:workflow:wf-1' });
    expect(document).not.toBeNull();
    await store.delete('wf-1');
  });

  it('Using Existing Client: the store works in myapp; closing it leaves the client open', async (context) => {
    const { store, client } = await run<{ store: SnapshotStore; client: MongoClient }>(context, 'existing-client.ts');
    await store.save('wf-2', snapshot);
    expect(await store.list()).toEqual([expect.objectContaining({ id: 'wf-2' })]);
    expect(await client.db('myapp').collection('workflow_state').countDocuments({ _id: 'workflow:state:wf-2' as never })).toBe(1);
    await store.delete('wf-2');
    await store.close();
    expect(await client.db('myapp').command({ ping: 1 })).toMatchObject({ ok: 1 });
  });

  it('Using Existing Database: the store works in the given Db', async (context) => {
    const { store, db } = await run<{ store: SnapshotStore; db: import('mongodb').Db }>(context, 'existing-database.ts');
    await store.save('wf-3', snapshot);
    expect(await db.collection('workflow_state').countDocuments({ _id: 'workflow:state:wf-3' as never })).toBe(1);
    await store.delete('wf-3');
    expect(await store.load('wf-3')).toBeNull();
  });

  it('Client Options: the store works with the given pool and timeout', async (context) => {
    const { store } = await run<{ store: SnapshotStore }>(context, 'client-options.ts');
    await store.save('wf-4', snapshot);
    expect(await store.load('wf-4')).toEqual(snapshot);
    await store.delete('wf-4');
  });

  it("Direct KeyValueStore Access: createStatePersistence over MongoKeyValueStore keeps snapshots under 'custom:prefix:'", async (context) => {
    const { store, persistence } = await run<{ store: import('@stowage/core').KeyValueStore; persistence: SnapshotStore }>(
      context,
      'direct-key-value-store.ts',
    );
    await persistence.save('wf-5', snapshot);
    expect(await store.keys('custom:prefix:*')).toEqual(['custom:prefix:wf-5']);
    expect(await persistence.load('wf-5')).toEqual(snapshot);
    await persistence.delete('wf-5');
  });

  it('Connection Pooling (production): the store works with the given pool settings', async (context) => {
    const { store } = await run<{ store: SnapshotStore }>(context, 'connection-pooling.ts');
    await store.save('wf-6', snapshot);
    expect(await store.list({ prefix: 'wf-' })).toEqual([expect.objectContaining({ id: 'wf-6' })]);
    await store.delete('wf-6');
  });

  it("Collection Schema: documents awaitly-mongo wrote ({ _id, value, expiresAt? }) are read by the samples' store as they are", async (context) => {
    if (!mongo) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL)');
    // The collection "With Database and Collection Names" names, as awaitly-mongo made it
    // ("Automatic Collection and Index Creation"), with the documents of "Collection Schema".
    const collection = mongo.client.db('myapp').collection('custom_workflow_state');
    await collection.drop().catch(() => undefined); // what the sample above left
    await mongo.client.db('myapp').createCollection('custom_workflow_state');
    await collection.createIndex({ expiresAt: 1 }, { expireAfterSeconds: 0, name: 'expiresAt_ttl' }).catch((error: { code?: number }) => {
      if (error.code !== 238) throw error; // FerretDB 1.x has no TTL indexes: awaitly-mongo's collection would have none there
    });
    await collection.insertMany([
      { _id: 'myapp:workflow:legacy-1' as never, value: JSON.stringify(snapshot) },
      { _id: 'myapp:workflow:legacy-2' as never, value: JSON.stringify(snapshot), expiresAt: new Date(Date.now() + 3_600_000) },
      { _id: 'myapp:workflow:legacy-3' as never, value: JSON.stringify(snapshot), expiresAt: new Date(Date.now() - 60_000) },
    ]);
    const { store } = await run<{ store: SnapshotStore }>(context, 'database-and-collection-names.ts');
    expect(await store.load('legacy-1')).toEqual(snapshot);
    expect(await store.load('legacy-2')).toEqual(snapshot);
    expect(await store.load('legacy-3')).toBeNull(); // expired
    expect((await store.list()).map((item) => item.id).sort()).toEqual(['legacy-1', 'legacy-2']);
    // A document without a version reads as version 1; the next save gives it one above.
    expect((await store.loadVersioned('legacy-1'))!.version).toBe(1);
    await store.save('legacy-1', snapshot, { expectedVersion: 1 });
    expect((await store.loadVersioned('legacy-1'))!.version).toBeGreaterThan(1);
    await store.delete('legacy-2');
    expect(await store.load('legacy-2')).toBeNull();
  });
});
