import { compareKeys } from '@stowage/core/adapter';
import { MongoClient } from 'mongodb';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_COLLECTIONS,
  MongoCheckpointStore,
  MongoKeyValueStore,
  createMongoPersistence,
  indexSpecs,
  rolePrivileges,
  mongo,
} from '../src/index.js';
import { recordCommands, storeOptions } from './helpers.js';
import { uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

const servers = await openTestServers('stowage_schema');

describe('indexSpecs', () => {
  it('lists every collection and index stowage creates (seed 001 plus key-value, snapshots and processes)', () => {
    const ttl = { key: { expiresAt: 1 }, name: 'expiresAt_ttl', expireAfterSeconds: 0 };
    const byId = { _id: 'hashed' };
    expect(indexSpecs()).toEqual([
      { kind: 'kv', collection: 'workflow_state', indexes: [{ key: { updatedAt: -1, _id: 1 }, name: 'updatedAt_-1__id_1' }, ttl], shardKey: byId },
      { kind: 'snapshots', collection: 'awaitly_snapshots', indexes: [{ key: { ns: 1, updatedAt: -1, _id: 1 }, name: 'ns_1_updatedAt_-1__id_1' }, ttl], shardKey: byId },
      { kind: 'workflowLocks', collection: 'awaitly_workflow_locks', indexes: [], shardKey: byId },
      { kind: 'locks', collection: 'stowage_locks', indexes: [], shardKey: byId },
      { kind: 'cache', collection: 'stowage_cache', indexes: [{ key: { expiresAt: 1 }, name: 'expiresAt_ttl', expireAfterSeconds: 0 }], shardKey: byId },
      { kind: 'circuitBreaker', collection: 'stowage_circuit', indexes: [], shardKey: byId },
      {
        kind: 'checkpoints',
        collection: 'stowage_checkpoints',
        indexes: [
          { key: { taskId: 1, sequence: 1 }, name: 'taskId_1_sequence_1', unique: true },
          { key: { taskId: 1 }, name: 'taskId_1' },
        ],
        shardKey: { taskId: 1 },
      },
      { kind: 'idempotency', collection: 'stowage_idempotency', indexes: [ttl], shardKey: byId },
      {
        kind: 'process',
        collection: 'stowage_process',
        indexes: [
          { key: { process: 1, itemId: 1, version: 1 }, name: 'process_1_itemId_1_version_1', unique: true },
          { key: { process: 1, current: 1, state: 1, leaseUntil: 1, at: 1 }, name: 'process_1_current_1_state_1_leaseUntil_1_at_1' },
          { key: { process: 1, current: 1, itemId: 1, version: -1 }, name: 'process_1_current_1_itemId_1_version_-1' },
          { key: { current: 1, at: 1 }, name: 'current_1_at_1' },
        ],
        shardKey: { process: 1, itemId: 1 },
      },
      { kind: 'processClaims', collection: 'stowage_process_claims', indexes: [{ key: { of: 1, previous: 1, generation: -1 }, name: 'of_1_previous_1_generation_-1' }], shardKey: { of: 1 } },
    ]);
    expect(indexSpecs({ cache: 'my_cache' }).find((spec) => spec.kind === 'cache')?.collection).toBe('my_cache');
    // The claims collection follows the process collection unless named.
    expect(indexSpecs({ process: 'devices' }).find((spec) => spec.kind === 'processClaims')?.collection).toBe('devices_claims');
    expect(() => indexSpecs({ kv: '$bad' })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    expect(DEFAULT_COLLECTIONS.kv).toBe('workflow_state');
  });

  it('rolePrivileges: the actions a role needs per collection, fewer without autoCreate', () => {
    const basic = ['find', 'insert', 'update', 'remove', 'listIndexes'];
    expect(rolePrivileges('myapp', { only: ['kv', 'locks'], collections: { kv: 'state' } })).toEqual([
      { resource: { db: 'myapp', collection: 'state' }, actions: [...basic, 'createCollection', 'createIndex', 'collMod'] },
      { resource: { db: 'myapp', collection: 'stowage_locks' }, actions: [...basic, 'changeStream', 'createCollection', 'createIndex'] },
    ]);
    expect(rolePrivileges('myapp', { only: ['process'], autoCreate: false })).toEqual([
      { resource: { db: 'myapp', collection: 'stowage_process' }, actions: [...basic, 'changeStream'] },
      { resource: { db: 'myapp', collection: '' }, actions: ['listCollections'] },
    ]);
    expect(rolePrivileges('myapp').map((privilege) => privilege.resource.collection)).toEqual([...indexSpecs().map((spec) => spec.collection), '']);
    expect(() => rolePrivileges('my.app')).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
  });
});

describeEachServer(servers, 'schema and persistence on the server', (s) => {
  const db = () => s.admin.db(s.database);
  const collectionExists = async (name: string) => (await db().listCollections({ name }).toArray()).length === 1;

  it('autoCreate creates the collection and the indexes of indexSpecs (a plain expiresAt index where TTL is refused)', async () => {
    const options = storeOptions(s, 'schema_kv');
    const kv = await whenReady(new MongoKeyValueStore(options));
    const indexes = await db().collection(options.collection).listIndexes().toArray();
    const onExpiresAt = indexes.filter((index) => JSON.stringify(index.key) === '{"expiresAt":1}');
    expect(onExpiresAt).toHaveLength(1);
    // FerretDB refuses TTL indexes; jongodb builds them but has no TTL monitor, so only MongoDB reports one.
    if (s.product === 'ferretdb') expect(onExpiresAt[0]!.expireAfterSeconds).toBeUndefined();
    else expect(onExpiresAt[0]).toMatchObject({ name: 'expiresAt_ttl', expireAfterSeconds: 0 });
    expect(kv.capabilities.ttlIndex).toBe(s.product === 'mongodb');
    await kv.close();

    const checkpoints = await whenReady(new MongoCheckpointStore(storeOptions(s, 'schema_cp')));
    const names = (await db().collection(checkpoints.collectionName).listIndexes().toArray()).map((index) => index.name).sort();
    expect(names).toEqual(['_id_', 'taskId_1', 'taskId_1_sequence_1']);
    await checkpoints.close();
    // A second process start (a new store on the existing collection) is a no-op, not an error.
    const again = await whenReady(new MongoCheckpointStore({ ...storeOptions(s), collection: checkpoints.collectionName }));
    await again.close();
  });

  it('autoCreate: false creates nothing at start-up and reports the TTL index it finds', async () => {
    const options = storeOptions(s, 'manual_kv');
    const kv = await whenReady(new MongoKeyValueStore({ ...options, autoCreate: false }));
    // jongodb has no listCollections (and lists an `_id` index for any name): the index list below says it there.
    if (s.product !== 'jongodb') expect(await collectionExists(options.collection)).toBe(false);
    expect(kv.capabilities.ttlIndex).toBe(false);
    await kv.set('k', 'v'); // the first write creates the collection, without indexes
    expect(await kv.get('k')).toBe('v');
    expect((await db().collection(options.collection).listIndexes().toArray()).map((index) => index.name)).toEqual(['_id_']);
    await kv.close();
  });

  it('an index of stowage\'s name with other keys or options, or a missing unique index, is refused at start-up, naming it', async () => {
    const refused = async (collection: string, autoCreate: boolean, index: string) => {
      const store = new MongoCheckpointStore({ ...storeOptions(s), collection, autoCreate });
      await expect(store.ready(), `${index}, autoCreate: ${autoCreate}`).rejects.toMatchObject({ name: 'StowageError', code: 'E_INVALID_OPTION', message: expect.stringContaining(`"${index}"`) });
      await store.close();
    };
    // Not unique: a duplicate (taskId, sequence) would be stored. Other keys: not what the name says.
    for (const [name, key] of [['taskId_1_sequence_1', { taskId: 1, sequence: 1 }], ['taskId_1', { taskId: -1 }]] as const) {
      const collection = uniqueName('cp_idx');
      await db().collection(collection).createIndex(key, { name });
      await refused(collection, true, name);
      await refused(collection, false, name);
    }
    // autoCreate: false on a collection without the unique index.
    await refused(uniqueName('cp_bare'), false, 'taskId_1_sequence_1');
    // The same unique index under another name does the job.
    const collection = uniqueName('cp_named');
    await db().collection(collection).createIndex({ taskId: 1, sequence: 1 }, { name: 'my_unique', unique: true });
    const store = await whenReady(new MongoCheckpointStore({ ...storeOptions(s), collection }));
    await store.close();
  });

  it('a duplicate (taskId, sequence) stays refused after its unique index, or the whole collection, was dropped under a live store', async (context) => {
    if (s.product === 'jongodb') return context.skip('jongodb has no drop or dropIndexes');
    const checkpoint = (id: string, sequence: number) => ({ id, taskId: 't', sequence, timestamp: 0, progress: 0, data: { id } });
    const store = await whenReady(new MongoCheckpointStore(storeOptions(s, 'cp_drop')));
    const collection = db().collection(store.collectionName);
    await store.save(checkpoint('a', 1));
    await collection.dropIndexes();
    await expect(store.save(checkpoint('b', 1))).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
    await collection.drop();
    await store.save(checkpoint('c', 1)); // creates the collection again, without indexes
    await expect(store.save(checkpoint('d', 1))).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
    await expect(store.save(checkpoint('c', 2))).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' }); // its id
    expect((await store.list('t')).map((saved) => saved.id)).toEqual(['c']);
    await store.close();
  });

  it('createMongoPersistence keeps seed 000 documents { _id: prefix + id, value, expiresAt? } in workflow_state', async () => {
    const database = uniqueName('stowage_persist');
    const store = await createMongoPersistence({ connectionString: s.url, database });
    const snapshot = { formatVersion: 1 as const, steps: { a: { ok: true as const, value: { 'x.y': 1 } } }, execution: { status: 'completed' as const, lastUpdated: '2025-01-01T00:00:00.000Z' } };
    await store.save('checkout-123', snapshot);
    expect(await store.load('checkout-123')).toStrictEqual(snapshot);
    expect(await store.list()).toEqual([{ id: 'checkout-123', updatedAt: expect.any(String) }]);
    const document = await s.admin.db(database).collection('workflow_state').findOne({ _id: 'workflow:state:checkout-123' as never });
    expect(document).toMatchObject({ _id: 'workflow:state:checkout-123', value: JSON.stringify(snapshot), version: expect.any(Number) });
    expect(document!.updatedAt).toBeInstanceOf(Date);
    expect(document).not.toHaveProperty('expiresAt');
    await store.close();
    await expect(store.load('checkout-123')).rejects.toMatchObject({ code: 'E_CLOSED' });

    const custom = await createMongoPersistence({ url: s.url, database, collection: 'custom_state', prefix: 'myapp:' });
    await custom.save('wf', snapshot);
    expect(await s.admin.db(database).collection('custom_state').countDocuments({ _id: 'myapp:wf' as never })).toBe(1);
    await custom.close();
    await s.admin.db(database).dropDatabase().catch(() => undefined); // jongodb has no dropDatabase
  });

  it('createMongoPersistence lists newest first, a page at a time: list and listPage read the page (and one more), awaitly\'s documents without updatedAt last', async () => {
    // Before: every document under the prefix was read and sorted in the process, for a page of 10.
    const client = await new MongoClient(s.url, { monitorCommands: true }).connect();
    const commands = recordCommands(client);
    try {
      const collection = uniqueName('persist_pages');
      const persistence = await createMongoPersistence({ client, database: s.database, collection });
      const value = JSON.stringify({ formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: 'now' } });
      const start = Date.UTC(2025, 0, 1);
      // Written by stowage, four at each time (ties go by id); then awaitly's own documents, without
      // version or updatedAt, and two whose updatedAt is no date after the epoch: all read as written at the epoch.
      const dated = Array.from({ length: 200 }, (_, i) => ({ id: `w${String(i).padStart(3, '0')}`, at: new Date(start + Math.floor((i * 7) % 200 / 4) * 1000) }));
      const undated = Array.from({ length: 30 }, (_, i) => ({ id: `legacy${String(i).padStart(2, '0')}`, at: new Date(0) }));
      await db().collection(collection).insertMany([
        ...dated.map(({ id, at }) => ({ _id: `workflow:state:${id}`, value, version: 1, updatedAt: at })),
        ...undated.map(({ id }, i) => ({ _id: `workflow:state:${id}`, value, ...(i === 7 && { updatedAt: 'yesterday' }), ...(i === 11 && { updatedAt: new Date(-86_400_000) }) })),
        { _id: 'workflow:state:deleted', version: 2, updatedAt: new Date(start + 999_000), expiresAt: new Date(start) }, // a tombstone
        { _id: 'workflow:statf', value, version: 1, updatedAt: new Date(start + 999_000) }, // past the prefix
      ] as never[]);
      const expected = [...dated, ...undated]
        .sort((a, b) => b.at.getTime() - a.at.getTime() || compareKeys(a.id, b.id))
        .map(({ id, at }) => ({ id, updatedAt: at.toISOString() }));

      // A page reads its documents and one more (how the kit tells whether there is a next page).
      commands.reset();
      expect(await persistence.list({ limit: 10 })).toEqual(expected.slice(0, 10));
      expect(commands.documents()).toBeLessThanOrEqual(11);
      const listed: unknown[] = [];
      for (let cursor: string | null = null, page = 1; ; page++) {
        commands.reset();
        const { items, nextCursor }: { items: unknown[]; nextCursor: string | null } = await persistence.listPage({ limit: 7, ...(cursor !== null && { cursor }) });
        expect(commands.documents(), `page ${page}`).toBeLessThanOrEqual(8);
        listed.push(...items);
        if (nextCursor === null) break;
        cursor = nextCursor;
      }
      expect(listed).toEqual(expected);
      expect(await persistence.list({ prefix: 'legacy1', limit: 5 })).toEqual(expected.filter((item) => item.id.startsWith('legacy1')).slice(0, 5));
      await persistence.close();
    } finally {
      commands.stop();
      await client.close();
    }
  });

  it('mongo(url) is a snapshot store; with lock it is also a WorkflowLock on server-clock leases', async () => {
    const database = uniqueName('stowage_oneliner');
    const url = `${s.url.replace(/\/[^/]*$/, '')}/${database}${s.url.includes('?') ? s.url.slice(s.url.indexOf('?')) : ''}`;
    const store = mongo(url);
    await store.save('wf', { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: 'now' } });
    expect(await s.admin.db(database).collection('awaitly_snapshots').countDocuments()).toBe(1);
    expect('tryAcquire' in store).toBe(false);
    await store.close();

    const locking = mongo({ url: s.url, database, prefix: 'orders:', lock: { ttl: 60_000 } });
    const lease = await locking.tryAcquire('o1');
    expect(lease).toEqual({ ownerToken: expect.any(String) });
    expect(await locking.tryAcquire('o1')).toBeNull();
    expect(await locking.renew('o1', lease!.ownerToken, { ttlMs: 1_000 })).toBe(true);
    expect(await locking.renew('o1', 'not-the-owner')).toBe(false);
    // A prefixed workflow's lease key is `prefix + "\u0000" + id`, as its snapshot's `_id`.
    const lockDocument = await s.admin.db(database).collection('awaitly_workflow_locks').findOne({ _id: 'orders:\u0000o1' as never });
    expect(lockDocument).toMatchObject({ owner: lease!.ownerToken, fence: 1 });
    await locking.release('o1', lease!.ownerToken);
    expect(await locking.tryAcquire('o1')).not.toBeNull();
    await locking.close();
    await s.admin.db(database).dropDatabase().catch(() => undefined); // jongodb has no dropDatabase
  });

  it('a client passed to mongo() works with multiple stores and is left open', async () => {
    const client = await new MongoClient(s.url).connect();
    const store = await whenReady(mongo({ client, database: s.database, collection: uniqueName('snap') }));
    await store.close();
    expect(await client.db(s.database).command({ ping: 1 })).toMatchObject({ ok: 1 });
    await client.close();
  });
});
