import { MongoClient } from 'mongodb';
import { expect, it } from 'vitest';
import { MongoKeyValueStore, MongoLockingSnapshotStore, MongoSnapshotStore, connect } from '../src/index.js';
import { eventually, openSockets } from './helpers.js';
import { uniqueName } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

/** `connect()`: every store on one client, with the methods and shape of @stowage/postgres's `connect()`. */
const servers = await openTestServers('stowage_connect');

describeEachServer(servers, 'connect()', (s) => {
  it('hands out every store on one client it opened; close() closes every store, then the client', async () => {
    const baseline = openSockets();
    // Client options of this test's own, so that no store of another test lends its client.
    const db = connect({ url: s.url, database: s.database, clientOptions: { appName: uniqueName('connect') }, cleanupInterval: false });
    const name = (stem: string) => ({ collection: uniqueName(stem) });
    const kv = db.kv(name('kv'));
    const snapshots = db.snapshots<{ n: number }>({ ...name('snapshots'), lock: { collection: uniqueName('wflocks') } });
    const plain = db.snapshots(name('plain'));
    const locks = db.locks(name('locks'));
    const cache = db.cache({ ...name('cache'), prefix: 'c:' });
    const breaker = db.circuitBreaker(name('circuit'));
    const checkpoints = db.checkpoints(name('checkpoints'));
    const idempotency = db.idempotency(name('idempotency'));
    const backend = db.process(name('process'));
    expect(snapshots).toBeInstanceOf(MongoLockingSnapshotStore);
    expect(plain).toBeInstanceOf(MongoSnapshotStore);
    expect(plain).not.toBeInstanceOf(MongoLockingSnapshotStore);
    expect(kv.collectionName).toMatch(/^kv_/);

    await Promise.all([kv, snapshots, plain, locks, cache, breaker, checkpoints, idempotency, backend].map((store) => store.ready()));
    await kv.set('k', 'v');
    await snapshots.save('wf', { n: 1 });
    expect(await snapshots.tryAcquire('wf')).not.toBeNull();
    await (await locks.acquire('job', 10_000))?.release();
    await cache.set('k', 1);
    await breaker.recordFailure('k', 5);
    await checkpoints.save({ id: 'c1', taskId: 't', sequence: 1, timestamp: 0, progress: 0, data: {} });
    await idempotency.set('k', 'done');
    await backend.createItem({ process: 'orders', id: 'a', state: 'new', data: {} });
    expect(await kv.get('k')).toBe('v');
    expect(await cache.get('k')).toBe(1);

    // A store closed on its own leaves the client to the others.
    await kv.close();
    expect(await cache.get('k')).toBe(1);
    await db.close();
    await db.close(); // idempotent
    for (const store of [snapshots, plain, locks, cache, breaker, checkpoints, idempotency, backend]) expect(store.isClosed).toBe(true);
    await expect(cache.get('k')).rejects.toMatchObject({ code: 'E_CLOSED' });
    expect(() => db.kv()).toThrow(expect.objectContaining({ code: 'E_CLOSED' }));
    expect(await eventually(() => openSockets() <= baseline), `open sockets ${openSockets()}, baseline ${baseline}`).toBe(true);
  });

  it('given a MongoClient, uses it and leaves it open; a URL string alone works too', async () => {
    const client = new MongoClient(s.url);
    try {
      const db = connect(client);
      const kv = db.kv({ collection: uniqueName('byo_kv') });
      await kv.set('k', 'v');
      await db.close();
      expect(kv.isClosed).toBe(true);
      expect(await client.db(s.database).command({ ping: 1 })).toMatchObject({ ok: 1 });
    } finally {
      await client.close();
    }
    const db = connect(s.url);
    const kv = db.kv({ collection: uniqueName('url_kv') });
    await kv.set('k', 'v');
    expect(await kv.get('k')).toBe('v');
    await db.close();
  });

  it('takes the connection settings once: a store given its own is E_INVALID_OPTION; bad settings are refused before a client opens', () => {
    const db = connect({ url: s.url, database: s.database });
    for (const misplaced of [{ url: s.url }, { connectionString: s.url }, { database: 'other' }, { client: {} }, { existingDb: {} }, { clientOptions: {} }]) {
      expect(() => db.kv(misplaced as never)).toThrow(
        expect.objectContaining({ code: 'E_INVALID_OPTION', message: expect.stringContaining('connection settings belong to connect(), not to one store') }),
      );
    }
    expect(() => db.locks(null as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    // Store options are checked per store, as on a store created directly.
    expect(() => db.cache({ collection: 'a$b' })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    expect(() => connect({ url: s.url, cleanupInterval: -1 })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION', message: expect.stringMatching(/^cleanupInterval must be/) }));
    expect(() => connect({ url: 'http://example.invalid' })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    expect(() => connect(42 as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    return db.close();
  });

  it('the shared store options reach every store, and a store’s own options win', async () => {
    const db = connect({ url: s.url, database: s.database, dialect: 'classic', cleanupInterval: false });
    const classic = db.kv({ collection: uniqueName('shared_kv') });
    const own = db.kv({ collection: uniqueName('own_kv'), dialect: 'auto' });
    try {
      await Promise.all([classic.ready(), own.ready()]);
      expect(classic.dialect).toBe('classic');
      const auto = new MongoKeyValueStore({ url: s.url, database: s.database, collection: uniqueName('direct_kv') });
      await auto.ready();
      expect(own.dialect).toBe(auto.dialect);
      await auto.close();
    } finally {
      await db.close();
    }
  });
});
