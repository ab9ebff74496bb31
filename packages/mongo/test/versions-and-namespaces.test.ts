import type { JsonObject } from '@stowage/core';
import { expect, it } from 'vitest';
import { MongoCacheProvider, MongoKeyValueStore, MongoLockProvider, createMongoPersistence, mongo, type MongoDialectName } from '../src/index.js';
import { serverTime, storeOptions } from './helpers.js';
import { describeEachServer, openTestServers } from './server.js';
import { whenReady } from './mongo-adapter.js';

/**
 * What the Mongo documents do for the versions, namespaces and fences of the conformance
 * suite, looked at in the collections themselves: tombstones, versions ahead of this
 * process's clock, documents of awaitly's own persistence, `_id`s of namespaces.
 */
const servers = await openTestServers('stowage_versions');

describeEachServer(servers, 'versions, tombstones, namespaces and fences in the documents', (s) => {
  const db = () => s.admin.db(s.database);
  const serverNow = () => serverTime(s);
  const dialects: MongoDialectName[] = s.product === 'mongodb' ? ['pipeline', 'classic'] : ['classic'];

  for (const dialect of dialects) {
    it(`${dialect}: a delete leaves a tombstone that keeps the version; clearExpired removes it only after the grace`, async () => {
      const options = { ...storeOptions(s, 'tomb'), dialect };
      const kv = await whenReady(new MongoKeyValueStore(options));
      await kv.set('a', '1');
      const before = (await kv.getEntry('a'))!.version;
      expect(await kv.delete('a')).toBe(true);
      const tombstone = await db().collection(options.collection).findOne({ _id: 'a' as never });
      expect(tombstone).toMatchObject({ version: before, expiresAt: expect.any(Date) });
      expect(tombstone).not.toHaveProperty('value');
      expect(await kv.get('a')).toBeNull();
      expect(await kv.getEntry('a')).toBeNull();
      expect(await kv.keys()).toEqual([]);
      expect(await kv.delete('a')).toBe(false);
      expect(await kv.clearExpired()).toBe(0); // within the grace
      expect(await kv.compareAndSet('a', 'again', null)).toBeGreaterThan(before);
      await kv.delete('a');
      // A tombstone older than the grace goes.
      await db().collection(options.collection).updateOne({ _id: 'a' as never }, { $set: { expiresAt: new Date((await serverNow()) - 60_000) } });
      expect(await kv.clearExpired()).toBe(1);
      expect(await db().collection(options.collection).countDocuments()).toBe(0);
      await kv.close();
    });

    it(`${dialect}: a stored version ahead of this process's clock (another process, a clock step back) is still exceeded`, async () => {
      const options = { ...storeOptions(s, 'ahead'), dialect };
      const kv = await whenReady(new MongoKeyValueStore(options));
      const ahead = (await serverNow()) * 1000 + 1e9; // 1000 s ahead
      const collection = db().collection(options.collection);
      await collection.insertOne({ _id: 'k' as never, value: 'v', version: ahead, updatedAt: new Date() });
      await kv.set('k', 'set');
      const afterSet = (await kv.getEntry('k'))!.version;
      expect(afterSet).toBeGreaterThan(ahead);
      await kv.setMany([{ key: 'k', value: 'setMany' }]);
      const afterSetMany = (await kv.getEntry('k'))!.version;
      expect(afterSetMany).toBeGreaterThan(afterSet);
      // Ahead of this process again, in the middle of a batch (jongodb reports that statement's
      // collision for the whole command, and skips the statements after it).
      const further = afterSetMany + 1e9;
      await collection.updateOne({ _id: 'k' as never }, { $set: { version: further } });
      await kv.setMany([{ key: 'a', value: '1' }, { key: 'k', value: 'batch' }, { key: 'z', value: '2' }]);
      expect(await kv.getMany(['a', 'k', 'z'])).toEqual(['1', 'batch', '2']);
      expect((await kv.getEntry('k'))!.version).toBeGreaterThan(further);
      const beforeCas = (await kv.getEntry('k'))!.version;
      const afterCas = await kv.compareAndSet('k', 'cas', beforeCas);
      expect(afterCas).toBeGreaterThan(beforeCas);
      await kv.delete('k');
      const recreated = await kv.compareAndSet('k', 'created', null);
      expect(recreated).toBeGreaterThan(afterCas);
      expect(await kv.getEntry('k')).toMatchObject({ value: 'created', version: recreated });

      const snapshotOptions = { ...storeOptions(s, 'ahead_snap'), dialect, prefix: 'p' };
      const snapshots = await whenReady(mongo<JsonObject>(snapshotOptions));
      await db().collection(snapshotOptions.collection).insertOne({ _id: 'p\u0000wf' as never, ns: 'p', value: '{}', version: ahead, updatedAt: new Date() });
      await snapshots.save('wf', { n: 1 });
      const saved = (await snapshots.loadVersioned('wf'))!.version;
      expect(saved).toBeGreaterThan(ahead);
      await snapshots.delete('wf');
      await snapshots.save('wf', { n: 2 }, { expectedVersion: null });
      expect((await snapshots.loadVersioned('wf'))!.version).toBeGreaterThan(saved);
      await Promise.all([kv.close(), snapshots.close()]);
    });
  }

  it('documents of awaitly\'s own Mongo persistence ({ _id, value, expiresAt? }, no version) stay readable', async () => {
    const options = storeOptions(s, 'legacy');
    const collection = db().collection(options.collection);
    const snapshot = { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: 'now' } };
    await collection.insertMany([
      { _id: 'workflow:state:wf' as never, value: JSON.stringify(snapshot) },
      { _id: 'plain' as never, value: 'v', expiresAt: new Date((await serverNow()) + 600_000) },
    ]);
    const kv = await whenReady(new MongoKeyValueStore(options));
    expect(await kv.get('plain')).toBe('v');
    expect(await kv.getEntry('plain')).toMatchObject({ value: 'v', version: 1, updatedAt: new Date(0), expiresAt: expect.any(Date) });
    expect(await kv.keys()).toEqual(['plain', 'workflow:state:wf']);
    expect(await kv.compareAndSet('plain', 'w', 1)).toBeGreaterThan(1);
    await kv.close();
    const persistence = await createMongoPersistence(options);
    expect(await persistence.load('wf')).toEqual(snapshot);
    expect(await persistence.list()).toEqual([{ id: 'wf', updatedAt: new Date(0).toISOString() }]);
    await persistence.close();
  });

  it('each prefix is a namespace: _id = prefix + U+0000 + key, and a prefix that extends another shares nothing with it', async () => {
    const options = storeOptions(s, 'ns_cache');
    const outer = await whenReady(new MongoCacheProvider({ ...options, prefix: 'users:' }));
    const inner = await whenReady(new MongoCacheProvider({ ...options, prefix: 'users:admin:' }));
    await outer.set('admin:1', 'outer');
    await inner.set('1', 'inner');
    const ids = (await db().collection(options.collection).find().toArray()).map((document) => document._id).sort();
    expect(ids).toEqual(['users:\u0000admin:1', 'users:admin:\u00001']);
    await outer.clear();
    expect(await inner.keys()).toEqual(['1']);
    await Promise.all([outer.close(), inner.close()]);

    const snapshotOptions = storeOptions(s, 'ns_snap');
    const store = await whenReady(mongo<JsonObject>({ ...snapshotOptions, prefix: 'orders:' }));
    await store.save('1', { n: 1 });
    expect(await db().collection(snapshotOptions.collection).findOne({})).toMatchObject({ _id: 'orders:\u00001', ns: 'orders:', value: '{"n":1}' });
    await store.delete('1');
    // The tombstone leaves the namespace (no `ns`), so listings never meet it.
    expect(await db().collection(snapshotOptions.collection).findOne({})).not.toHaveProperty('ns');
    expect(await store.list()).toEqual([]);
    expect(await store.clearExpired()).toBe(0);
    await db().collection(snapshotOptions.collection).updateOne({}, { $set: { expiresAt: new Date((await serverNow()) - 60_000) } });
    expect(await store.clearExpired()).toBe(1);
    await store.close();
  });

  it('fences count grants: an acquisition that is refused consumes none', async () => {
    const options = storeOptions(s, 'fences');
    const [a, b] = await Promise.all([whenReady(new MongoLockProvider(options)), whenReady(new MongoLockProvider(options))]);
    const first = await a.acquire('k', 60_000, 'owner-a');
    for (let i = 0; i < 5; i++) expect(await b.acquire('k', 60_000, 'owner-b')).toBeNull();
    expect((await a.acquire('k', 60_000, 'owner-a'))!.fence).toBe(first!.fence); // the holder renewing keeps it
    await first!.release();
    expect((await b.acquire('k', 60_000, 'owner-b'))!.fence).toBe(first!.fence + 1);
    expect(await db().collection(options.collection).findOne({ _id: 'k' as never })).toMatchObject({ fence: first!.fence + 1, owner: 'owner-b' });
    await Promise.all([a.close(), b.close()]);
  });
});
