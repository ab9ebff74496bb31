import { ClientClockSkew } from '@stowage/core/conformance';
import { expect, it } from 'vitest';
import { MongoCacheProvider, MongoKeyValueStore, MongoLockProvider, type MongoDialectName } from '../src/index.js';
import { storeOptions } from './helpers.js';
import { describeEachServer, openTestServers } from './server.js';
import { whenReady } from './mongo-adapter.js';

const servers = await openTestServers('stowage_clock');

const TEN_MINUTES = 10 * 60_000;

describeEachServer(servers, 'server clock and capabilities', (s) => {
  const serverNow = async () => ((await s.admin.db('admin').command({ hello: 1 })).localTime as Date).getTime();

  it('capabilities are detected from the server, once, at connect', async () => {
    const locks = new MongoLockProvider(storeOptions(s));
    // Before it knows its server a store promises only what holds everywhere.
    expect(locks.capabilities).toMatchObject({ serverClock: false, fencing: true, crossProcess: true, changeFeed: false, transactions: false });
    expect(locks.dialect).toBeUndefined();
    await locks.ready();
    const kv = await whenReady(new MongoKeyValueStore(storeOptions(s)));
    const replicated = /replica set|mongos/.test(s.description);
    if (s.product === 'ferretdb') {
      // FerretDB 1.x: no update pipelines or $$NOW, no TTL indexes, no change streams, and updates are a read then a write.
      expect(kv.dialect).toBe('classic');
      expect(kv.capabilities).toEqual({
        serverClock: true,
        fencing: true,
        ttlIndex: false,
        changeFeed: false,
        wakeups: false,
        transactions: false,
        crossProcess: true,
        atomicUpdates: false,
      });
    } else if (s.product === 'jongodb') {
      // jongodb: a replica set with atomic updates, but transactions that do not isolate (a commit
      // writes back the whole collection: documents-and-writes.test.ts), no update pipelines, no
      // change streams (probed: the replica-set name alone would have said yes), no TTL monitor,
      // and no time reported anywhere (no hello.localTime, serverStatus, $currentDate, $$NOW or
      // operationTime): the process's own clock, and serverClock false.
      expect(kv.dialect).toBe('classic');
      expect(kv.capabilities).toEqual({
        serverClock: false,
        fencing: true,
        ttlIndex: false,
        changeFeed: false,
        wakeups: false,
        transactions: false,
        crossProcess: true,
        atomicUpdates: true,
      });
    } else {
      expect(kv.dialect).toBe('pipeline');
      expect(kv.capabilities).toMatchObject({ serverClock: true, ttlIndex: true, changeFeed: replicated, transactions: replicated, atomicUpdates: true });
    }
    expect(locks.capabilities.wakeups).toBe(locks.capabilities.changeFeed); // locks wait on change streams where there are some
    expect(kv.capabilities.wakeups).toBe(false);
    expect(locks.capabilities.ttlIndex).toBe(false); // lock documents keep their fence: never TTL-deleted
    await Promise.all([locks.close(), kv.close()]);
  });

  const dialects: MongoDialectName[] = s.product === 'mongodb' ? ['pipeline', 'classic'] : ['classic'];
  for (const dialect of dialects) {
    for (const skew of [TEN_MINUTES, -TEN_MINUTES]) {
      it(`${dialect} dialect, client clock ${skew > 0 ? '10 min ahead' : '10 min behind'}, store opened while skewed: times are the server's`, async (context) => {
        if (s.product === 'jongodb') return context.skip('needs serverClock: jongodb reports its time nowhere, so stores on it use the process clock');
        const clock = new ClientClockSkew();
        clock.set(skew);
        try {
          const kv = await whenReady(new MongoKeyValueStore({ ...storeOptions(s), dialect }));
          const locks = await whenReady(new MongoLockProvider({ ...storeOptions(s), dialect }));
          const cache = await whenReady(new MongoCacheProvider({ ...storeOptions(s), dialect }));
          const before = await serverNow();
          await kv.set('short', 'v', { ttl: 1_500 });
          await cache.set('short', 'v', 1_500);
          const handle = await locks.acquire('lease', 1_500);
          const after = await serverNow();
          const entry = await kv.getEntry('short');
          // Written on the server's clock: within the window of the server's own readings (plus
          // hello's millisecond rounding and half a round trip of offset error), never 10 minutes off.
          expect(entry!.updatedAt.getTime()).toBeGreaterThanOrEqual(before - 250);
          expect(entry!.updatedAt.getTime()).toBeLessThanOrEqual(after + 250);
          expect(entry!.expiresAt!.getTime() - entry!.updatedAt.getTime()).toBe(1_500);
          expect(handle!.expiresAt.getTime()).toBeGreaterThanOrEqual(before + 1_500 - 250);
          expect(handle!.expiresAt.getTime()).toBeLessThanOrEqual(after + 1_500 + 250);
          expect(await kv.get('short')).toBe('v');
          expect(await cache.has('short')).toBe(true);
          expect(await locks.acquire('lease', 60_000)).toBeNull();
          clock.set(-skew); // the client clock jumps 20 minutes: nothing the store decides moves
          expect(await kv.get('short')).toBe('v');
          expect(await locks.acquire('lease', 60_000)).toBeNull();
          await new Promise((resolve) => setTimeout(resolve, 1_800));
          expect(await kv.get('short')).toBeNull();
          expect(await cache.has('short')).toBe(false);
          expect(await locks.acquire('lease', 60_000)).not.toBeNull();
          await Promise.all([kv.close(), locks.close(), cache.close()]);
        } finally {
          clock.restore();
        }
      });
    }
  }
});
