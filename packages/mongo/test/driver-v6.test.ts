import { MongoClient as MongoClientV6 } from 'mongodb6';
import { expect, it } from 'vitest';
import {
  MongoCacheProvider,
  MongoCircuitBreakerStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoLockProvider,
  createMongoPersistence,
} from '../src/index.js';
import { forwardPort, freePort } from './helpers.js';
import { uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * The peer dependency is `mongodb ^6 || ^7`: a v6 client passed in drives every store (errors
 * are recognised by name and code, so a client from another copy of the driver maps the same).
 */
const servers = await openTestServers('stowage_driver6');

describeEachServer(servers, 'a mongodb 6.x client passed in', (s) => {

  it('drives the stores, and duplicate keys and closes map the same', async () => {
    const client = await new MongoClientV6(s.url).connect();
    try {
      // The stores are typed against the v7 driver; v6's Db/MongoClient are structurally compatible at run time.
      const options = (stem: string) => ({ client: client as never, database: s.database, collection: uniqueName(stem) });
      const kv = await whenReady(new MongoKeyValueStore(options('v6_kv')));
      await kv.set('a', '1', { ttl: 60_000 });
      const { version } = (await kv.getEntry('a'))!;
      await expect(kv.compareAndSet('a', '2', null)).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
      expect(await kv.compareAndSet('a', '2', version)).toBeGreaterThan(version);

      const locks = await whenReady(new MongoLockProvider(options('v6_locks')));
      const handle = await locks.acquire('k', 60_000, 'me');
      expect(await locks.acquire('k', 60_000, 'other')).toBeNull(); // E11000 from the v6 driver: "held"
      expect((await locks.acquire('k', 60_000, 'me'))?.fence).toBe(handle!.fence);

      const cache = await whenReady(new MongoCacheProvider(options('v6_cache')));
      await cache.set('c', { 'a.b': ['$x'] });
      expect(await cache.get('c')).toStrictEqual({ 'a.b': ['$x'] });

      const breaker = await whenReady(new MongoCircuitBreakerStore(options('v6_circuit')));
      expect(await breaker.recordFailure('svc', 1)).toBe(1);
      expect((await breaker.getState('svc'))?.state).toBe('open');

      const idempotency = await whenReady(new MongoIdempotencyStore(options('v6_idem')));
      expect((await idempotency.reserve('op', 60_000)).status).toBe('acquired');
      expect((await idempotency.reserve('op', 60_000)).status).toBe('in-flight');

      const persistence = await createMongoPersistence({ existingClient: client as never, database: s.database, collection: uniqueName('v6_state') });
      await persistence.save('wf', { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: 'now' } });
      expect(await persistence.list()).toHaveLength(1);

      await Promise.all([kv, locks, cache, breaker, idempotency, persistence].map((store) => store.close()));
      expect(await client.db(s.database).command({ ping: 1 })).toMatchObject({ ok: 1 }); // still open
    } finally {
      await client.close();
    }
  });

  it('a v6 client whose first connect failed (server down) works once the server is up', async () => {
    // Driver 6 leaves a client whose automatic connect failed closed for good, as 7 does; the store connects it again.
    const port = await freePort();
    const client = new MongoClientV6(s.url.replace(/^mongodb:\/\/[^/?]*/, `mongodb://127.0.0.1:${port}`), { serverSelectionTimeoutMS: 2_000 });
    const kv = new MongoKeyValueStore({ client: client as never, database: s.database, collection: uniqueName('v6_recover') });
    await expect(kv.get('k')).rejects.toMatchObject({ code: 'E_UNAVAILABLE' });
    const server = await forwardPort(port, s.url);
    try {
      await kv.set('k', 'v');
      expect(await kv.get('k')).toBe('v');
      await kv.close();
    } finally {
      await client.close();
      await server.close();
    }
  });
});
