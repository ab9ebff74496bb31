import { MongoClient } from 'mongodb';
import { describe, expect, it } from 'vitest';
import { MongoCacheProvider, MongoKeyValueStore, MongoLockProvider, mongo } from '../src/index.js';
import { assertSimpleCollation } from '../src/schema.js';
import { monitoredClient, storeOptions } from './helpers.js';
import { uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * Collections that exist before stowage starts (shared, migrated by hand, left by an older
 * version): what stowage accepts, converts or refuses at start-up.
 */
const servers = await openTestServers('stowage_existing');

describe('the default collation of a collection (as listCollections or its _id index has it)', () => {
  it('simple or none is accepted; any other collation is refused with E_INVALID_OPTION', () => {
    expect(() => assertSimpleCollation('c', null)).not.toThrow();
    expect(() => assertSimpleCollation('c', { name: 'c', options: {} })).not.toThrow();
    expect(() => assertSimpleCollation('c', { name: 'c', options: { collation: { locale: 'simple' } } })).not.toThrow();
    expect(() => assertSimpleCollation('c', { name: 'c', options: { collation: { locale: 'en', strength: 2 } } })).toThrow(
      expect.objectContaining({ code: 'E_INVALID_OPTION', message: expect.stringContaining('simple (binary) collation') }),
    );
  });
});

describeEachServer(servers, 'existing collections', (s) => {
  const db = () => s.admin.db(s.database);

  it('a lock collection with a TTL index is refused at start-up (a TTL deletion would reset fences)', async (context) => {
    if (s.product === 'ferretdb') return context.skip('FerretDB 1.x cannot build a TTL index, so no lock collection there can have one');
    const locksName = uniqueName('ttl_locks');
    await db().collection(locksName).createIndexes([{ key: { expiresAt: 1 }, name: 'expiresAt_ttl', expireAfterSeconds: 0 }]);
    const refused = expect.objectContaining({ code: 'E_INVALID_OPTION', message: expect.stringContaining('fencing counter') });
    await expect(new MongoLockProvider({ ...storeOptions(s), collection: locksName }).ready()).rejects.toEqual(refused);
    await expect(new MongoLockProvider({ ...storeOptions(s), collection: locksName, autoCreate: false }).ready()).rejects.toEqual(refused);
    const snapshots = mongo({ ...storeOptions(s), lock: { collection: locksName } });
    await expect(snapshots.tryAcquire('wf')).rejects.toEqual(refused);
    await snapshots.close();
    expect(await db().collection(locksName).countDocuments()).toBe(0); // nothing was granted
  });

  it('an existing plain { expiresAt: 1 } index does not block the TTL index: converted with collMod where the server can', async () => {
    const options = storeOptions(s, 'plain_ttl');
    await db().collection(options.collection).createIndexes([{ key: { expiresAt: 1 }, name: 'expiresAt_1' }]);
    const kv = await whenReady(new MongoKeyValueStore(options));
    const onExpiresAt = (await db().collection(options.collection).listIndexes().toArray()).filter((index) => JSON.stringify(index.key) === '{"expiresAt":1}');
    if (s.product === 'mongodb') {
      // MongoDB refuses a second index on the key (IndexOptionsConflict 85): the plain one became a TTL index.
      expect(onExpiresAt).toEqual([expect.objectContaining({ name: 'expiresAt_1', expireAfterSeconds: 0 })]);
      expect(kv.capabilities.ttlIndex).toBe(true);
    } else if (s.product === 'ferretdb') {
      expect(onExpiresAt).toEqual([expect.objectContaining({ name: 'expiresAt_1' })]); // no TTL indexes: the plain one serves clearExpired
      expect(kv.capabilities.ttlIndex).toBe(false);
    } else {
      // jongodb accepts a second index on the same key and has no TTL monitor.
      expect(onExpiresAt.map((index) => index.name).sort()).toEqual(['expiresAt_1', 'expiresAt_ttl']);
      expect(kv.capabilities.ttlIndex).toBe(false);
    }
    await kv.set('k', 'v');
    expect(await kv.get('k')).toBe('v');
    await kv.close();
  });

  it('a collection with a case-insensitive default collation is refused (distinct keys would overwrite each other)', async (context) => {
    if (s.product !== 'mongodb') {
      return context.skip(`${s.label} cannot create a collection with a collation (FerretDB: NotImplemented; jongodb: no create command)`);
    }
    const options = storeOptions(s, 'collated');
    await db().createCollection(options.collection, { collation: { locale: 'en', strength: 2 } });
    const refused = expect.objectContaining({ code: 'E_INVALID_OPTION', message: expect.stringContaining('collation') });
    await expect(new MongoKeyValueStore(options).ready()).rejects.toEqual(refused);
    await expect(new MongoKeyValueStore({ ...options, autoCreate: false }).ready()).rejects.toEqual(refused);
    await expect(new MongoCacheProvider(options).ready()).rejects.toEqual(refused);
  });

  it('an existing collection is not created again: a role without the createCollection privilege starts', async () => {
    const { client, commands } = await monitoredClient(s);
    try {
      const collection = uniqueName('exists');
      await db().collection(collection).insertOne({ _id: 'made by someone else' as never });
      const locks = await whenReady(new MongoLockProvider({ client, database: s.database, collection }));
      expect(await locks.acquire('k', 10_000)).not.toBeNull();
      await locks.close();
      const names = commands.map((event) => event.commandName);
      if (s.product === 'jongodb') {
        // jongodb cannot list collections: stowage tries `create` and takes its "no such command" as "nothing to do".
        expect(names).toContain('listCollections');
      } else {
        expect(names).toContain('listCollections');
        expect(names).not.toContain('create');
      }
    } finally {
      await client.close();
    }
  });

  it('schema set-up is remembered per client, not per host list (mongodb+srv clients have none before their SRV lookup)', async (context) => {
    // Two Atlas clusters' clients, before connecting: the same (empty) host list.
    const atlasA = new MongoClient('mongodb+srv://cluster-a.example.invalid/');
    const atlasB = new MongoClient('mongodb+srv://cluster-b.example.invalid/');
    expect(atlasA.options.hosts).toEqual(atlasB.options.hosts);
    await Promise.all([atlasA.close(), atlasB.close()]);
    if (s.product === 'jongodb') return context.skip('jongodb cannot drop a collection, which the second half needs');
    const options = storeOptions(s, 'per_client');
    const first = await whenReady(new MongoKeyValueStore(options));
    await first.close();
    await db().dropCollection(options.collection);
    const second = await whenReady(new MongoKeyValueStore(options)); // another client: sets the schema up again
    const names = (await db().collection(options.collection).listIndexes().toArray()).map((index) => index.name).sort();
    expect(names).toEqual(['_id_', s.product === 'ferretdb' ? 'expiresAt_1' : 'expiresAt_ttl', 'updatedAt_-1__id_1']);
    await second.close();
  });
});
