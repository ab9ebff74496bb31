import { inspect } from 'node:util';
import { MongoClient } from 'mongodb';
import { expect, it } from 'vitest';
import { openConnection } from '../src/connection.js';
import {
  MongoCacheProvider,
  MongoCheckpointStore,
  MongoCircuitBreakerStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoLockProvider,
  MongoProcessBackend,
  createMongoPersistence,
  mongo,
} from '../src/index.js';
import { parseStoreOptions } from '../src/options.js';
import { eventually, forwardPort, freePort, openSockets, storeOptions } from './helpers.js';
import { everyStore, uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

const servers = await openTestServers('stowage_connection');

describeEachServer(servers, 'connections', (s) => {

  it('a client passed in (client, existingClient, existingDb) is still usable after close()', async () => {
    const client = new MongoClient(s.url);
    try {
      const byClient = await whenReady(new MongoKeyValueStore({ client, database: s.database, collection: 'byo_kv' }));
      await byClient.set('k', 'v');
      await byClient.close();
      const byAlias = await whenReady(new MongoLockProvider({ existingClient: client, database: s.database, collection: 'byo_locks' }));
      expect(await byAlias.acquire('k', 60_000)).not.toBeNull();
      await byAlias.close();
      const db = client.db(s.database);
      const byDb = await createMongoPersistence({ existingDb: db, collection: 'byo_state' });
      await byDb.save('wf', { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: 'now' } });
      await byDb.close();
      const snapshots = mongo({ client, database: s.database, collection: 'byo_snapshots', lock: true });
      await snapshots.ready();
      await snapshots.close();
      // Still open: the stores closed only themselves.
      expect(await client.db(s.database).collection('byo_kv').findOne({ _id: 'k' as never })).toMatchObject({ value: 'v' });
      expect(await client.db(s.database).collection('byo_state').countDocuments({ _id: 'workflow:state:wf' as never })).toBe(1);
      await expect(byClient.get('k')).rejects.toMatchObject({ code: 'E_CLOSED' });
    } finally {
      await client.close();
    }
  });

  it('stores that open their own client close it: open sockets go back to the baseline', async () => {
    const baseline = openSockets();
    // A client of this test's own (stores share a client per URL and client options).
    const own = () => ({ ...storeOptions(s), clientOptions: { appName: 'sockets-baseline' } });
    const locks = await whenReady(new MongoLockProvider(own()));
    const snapshots = mongo({ ...own(), lock: { collection: 'sockets_locks' } });
    const stores = [
      await whenReady(new MongoKeyValueStore(own())),
      await whenReady(new MongoCacheProvider(own())),
      locks,
      snapshots,
      await createMongoPersistence({ ...own(), collection: 'sockets_state' }),
    ];
    await snapshots.save('a', { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: 'now' } });
    await snapshots.tryAcquire('a');
    await locks.withLock('k', async () => undefined, { ttl: 10_000 });
    // (Not compared with the baseline here: sockets of earlier tests may still be closing, and
    // these stores share one client, so they may open fewer sockets than go away meanwhile.)
    await Promise.all(stores.map((store) => store.close()));
    expect(await eventually(() => openSockets() <= baseline), `open sockets ${openSockets()}, baseline ${baseline}`).toBe(true);
  });

  it('stores created from one URL share one client: six stores open no more sockets than one', async () => {
    const baseline = openSockets();
    // Client options of this test's own, so that no store of another test lends its client.
    const options = () => ({ ...storeOptions(s), clientOptions: { appName: 'sockets-shared' } });
    const first = await whenReady(new MongoKeyValueStore(options()));
    await first.set('k', 'v');
    const oneStore = openSockets() - baseline;
    const cache = await whenReady(new MongoCacheProvider(options()));
    const locks = await whenReady(new MongoLockProvider(options()));
    const breaker = await whenReady(new MongoCircuitBreakerStore(options()));
    const checkpoints = await whenReady(new MongoCheckpointStore(options()));
    const idempotency = await whenReady(new MongoIdempotencyStore(options()));
    await cache.set('k', 'v');
    await (await locks.acquire('k', 10_000))?.release();
    await breaker.recordFailure('k', 5);
    await checkpoints.save({ id: 'c1', taskId: 't', sequence: 1, timestamp: 0, progress: 0, data: {} });
    await idempotency.set('k', 'v');
    const sixStores = openSockets() - baseline;
    // Each store used to open a client of its own: monitoring and pool sockets six times over.
    expect(sixStores, `one store: ${oneStore} sockets, six stores: ${sixStores}`).toBeLessThanOrEqual(oneStore + 1);
    // The client closes with the last store that uses it, not before.
    await Promise.all([first, cache, locks, breaker, checkpoints].map((store) => store.close()));
    expect(await idempotency.get('k')).toMatchObject({ value: 'v' });
    await idempotency.close();
    expect(await eventually(() => openSockets() <= baseline), `open sockets ${openSockets()}, baseline ${baseline}`).toBe(true);
  });

  it('the server sees the connections of a store go away after close (where $currentOp lists idle connections)', async (context) => {
    const appName = uniqueName('stowage_app');
    const connectionsOf = async (name: string) =>
      (
        await s.admin
          .db('admin')
          .aggregate([{ $currentOp: { allUsers: true, idleConnections: true } }, { $match: { appName: name } }])
          .toArray()
      ).length;
    try {
      await connectionsOf(appName);
    } catch {
      return context.skip('this server has no $currentOp with idle connections (FerretDB); the socket count above covers it');
    }
    const stores = await Promise.all(
      Array.from({ length: 3 }, () => whenReady(new MongoKeyValueStore({ ...storeOptions(s), clientOptions: { appName } }))),
    );
    await Promise.all(stores.map((store) => store.set('k', 'v')));
    expect(await connectionsOf(appName)).toBeGreaterThan(0);
    await Promise.all(stores.map((store) => store.close()));
    expect(await eventually(async () => (await connectionsOf(appName)) === 0)).toBe(true);
  });

  it('an unreachable server is E_UNAVAILABLE with the driver error as cause; the next call tries again', async () => {
    const kv = new MongoKeyValueStore({
      url: 'mongodb://127.0.0.1:9/',
      database: 'nowhere',
      clientOptions: { serverSelectionTimeoutMS: 300 },
    });
    const error = await kv.get('k').catch((caught: unknown) => caught);
    expect(error).toMatchObject({ name: 'StowageError', code: 'E_UNAVAILABLE' });
    // The driver's own error: server selection timed out (or the topology it closed after that).
    expect((error as Error).cause).toMatchObject({ name: expect.stringMatching(/^Mongo(ServerSelection|TopologyClosed)Error$/) });
    await expect(kv.set('k', 'v')).rejects.toMatchObject({ code: 'E_UNAVAILABLE' });
    await kv.close();
    await expect(kv.get('k')).rejects.toMatchObject({ code: 'E_CLOSED' });
  });

  it('a store whose first calls met no server works once the server is up, and so does a new store on its URL (shared client)', async () => {
    // Nothing listens on this port until a forwarder to the test server starts there.
    const port = await freePort();
    const options = { url: s.url.replace(/^mongodb:\/\/[^/?]*/, `mongodb://127.0.0.1:${port}`), database: s.database, collection: uniqueName('recover'), clientOptions: { serverSelectionTimeoutMS: 2_000 } };
    const kv = new MongoKeyValueStore(options);
    const down = await Promise.all([kv.get('k'), kv.set('k', 'v'), kv.exists('k')].map((call) => call.catch((error: unknown) => error)));
    for (const error of down) expect(error).toMatchObject({ name: 'StowageError', code: 'E_UNAVAILABLE' });
    await expect(kv.get('k')).rejects.toMatchObject({ code: 'E_UNAVAILABLE' });
    const server = await forwardPort(port, s.url);
    try {
      // The driver's failed automatic connect used to leave the client closed for good ("Topology is closed").
      await kv.set('k', 'v');
      expect(await kv.get('k')).toBe('v');
      const fresh = new MongoKeyValueStore(options);
      expect(await fresh.get('k')).toBe('v');
      await Promise.all([kv.close(), fresh.close()]);
    } finally {
      await server.close();
    }
  });

  it('a client passed in is connected by the store (also after a failed first connect), unless its owner closed it', async () => {
    const port = await freePort();
    const client = new MongoClient(s.url.replace(/^mongodb:\/\/[^/?]*/, `mongodb://127.0.0.1:${port}`), { serverSelectionTimeoutMS: 2_000 });
    const kv = new MongoKeyValueStore({ client, database: s.database, collection: uniqueName('byo_recover') });
    await expect(kv.get('k')).rejects.toMatchObject({ code: 'E_UNAVAILABLE' });
    const server = await forwardPort(port, s.url);
    try {
      expect(await kv.get('k')).toBeNull();
      // The application's own queries on its client work again too.
      expect(await client.db(s.database).command({ ping: 1 })).toMatchObject({ ok: 1 });
      await kv.close();
      await client.close();
      const afterClose = new MongoKeyValueStore({ client, database: s.database, collection: uniqueName('byo_closed') });
      await expect(afterClose.get('k')).rejects.toMatchObject({ name: 'StowageError', code: 'E_UNAVAILABLE' });
      await afterClose.close();
      await expect(client.db(s.database).command({ ping: 1 })).rejects.toMatchObject({ name: 'MongoNotConnectedError' }); // still closed
    } finally {
      await client.close();
      await server.close();
    }
  });

  it('credentials the server refuses are E_INVALID_OPTION at every call, for every store sharing the client', async () => {
    // FerretDB without authentication and jongodb refuse SCRAM; MongoDB refuses the unknown user.
    const url = s.url.replace(/^mongodb:\/\//, 'mongodb://nobody:wrong-password@');
    const options = () => ({ url, database: s.database, collection: uniqueName('auth'), clientOptions: { serverSelectionTimeoutMS: 5_000 } });
    const kv = new MongoKeyValueStore(options());
    const locks = new MongoLockProvider(options());
    for (let attempt = 1; attempt <= 3; attempt++) {
      for (const call of [() => kv.get('k'), () => locks.acquire('k', 1_000)]) {
        const error = await call().catch((caught: unknown) => caught);
        expect(error, `attempt ${attempt}`).toMatchObject({ name: 'StowageError', code: 'E_INVALID_OPTION', cause: expect.anything() });
        expect(inspect(error, { depth: 8 })).not.toContain('wrong-password');
      }
    }
    await Promise.all([kv.close(), locks.close()]);
  });

  it('a tlsCAFile that cannot be read is E_INVALID_OPTION', async () => {
    const kv = new MongoKeyValueStore({ ...storeOptions(s), clientOptions: { tls: true, tlsCAFile: '/nonexistent/stowage-test-ca.pem', serverSelectionTimeoutMS: 1_000 } });
    await expect(kv.get('k')).rejects.toMatchObject({ name: 'StowageError', code: 'E_INVALID_OPTION', cause: expect.objectContaining({ code: 'ENOENT' }) });
    await kv.close();
  });

  it('the database named in the connection string (or clientOptions.dbName) is checked as the database option is', async () => {
    const withDatabase = (name: string) => s.url.replace(/^(mongodb:\/\/[^/?]*)\/?[^?]*/, `$1/${name}`);
    for (const name of ['a$b', 'a.b', 'a%00b', 'a%20b', 'd'.repeat(100)]) {
      expect(() => new MongoKeyValueStore({ url: withDatabase(name) }), name).toThrow(
        expect.objectContaining({ name: 'StowageError', code: 'E_INVALID_OPTION', message: expect.stringContaining('connection string') }),
      );
    }
    expect(() => new MongoKeyValueStore({ url: s.url, clientOptions: { dbName: 'a$b' } as never })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    // (dbName: accepted by the driver, though not in its types.) The database option wins over the connection string's.
    const kv = new MongoKeyValueStore({ url: withDatabase('a$b'), database: s.database, collection: uniqueName('urldb') });
    await kv.set('k', 'v');
    expect(await kv.get('k')).toBe('v');
    await kv.close();
  });

  it('multi-host connection strings are passed through: directConnection is never forced', async () => {
    // The client every store opens from its options (stores keep it private).
    const { client } = openConnection(parseStoreOptions({ url: 'mongodb://127.0.0.1:9,127.0.0.1:10/?replicaSet=rs0', database: 'x' }, 'kv', 'test'));
    expect(client.options.directConnection).toBe(false);
    expect(client.options.hosts.map(String)).toEqual(['127.0.0.1:9', '127.0.0.1:10']);
    await client.close();
  });

  it('close() before the first call: every later call rejects with E_CLOSED, and nothing connects', async () => {
    const options = () => ({ ...storeOptions(s), clientOptions: { serverSelectionTimeoutMS: 300 } });
    const kv = new MongoKeyValueStore(options());
    const locks = new MongoLockProvider(options());
    const snapshots = mongo({ ...options(), lock: true });
    const cache = new MongoCacheProvider(options());
    const backend = new MongoProcessBackend(options());
    await Promise.all([kv, locks, snapshots, cache, backend].map((store) => store.close()));
    await expect(kv.get('k')).rejects.toMatchObject({ code: 'E_CLOSED' });
    await expect(kv.ready()).rejects.toMatchObject({ code: 'E_CLOSED' });
    await expect(locks.acquire('k', 1_000)).rejects.toMatchObject({ code: 'E_CLOSED' });
    await expect(snapshots.load('wf')).rejects.toMatchObject({ code: 'E_CLOSED' });
    await expect(snapshots.tryAcquire('wf')).rejects.toMatchObject({ code: 'E_CLOSED' });
    await expect(cache.get('k')).rejects.toMatchObject({ code: 'E_CLOSED' });
    await expect(backend.getItem('p', 'i')).rejects.toMatchObject({ code: 'E_CLOSED' });
  });

  it('nothing a store holds prints the password of its connection string (util.inspect, depth 8), connected or not', async () => {
    const password = 'pw-Sentinel-8c1f';
    const { host } = new URL(s.url.replace(/^mongodb(\+srv)?:/, 'http:'));
    // PLAIN: FerretDB (without authentication set up) accepts any credentials; MongoDB would refuse them.
    const url = `mongodb://stowage:${password}@${host}/?authMechanism=PLAIN`;
    const stores = everyStore({ url, database: s.database });
    const printed = () => stores.all.map((store) => inspect(store, { depth: 8, showHidden: true, getters: true })).join('\n');
    expect(printed()).not.toContain(password);
    if (s.product === 'ferretdb') {
      await Promise.all(stores.all.map((store) => store.ready()));
      await stores.kv.set('k', 'v');
      await stores.locks.acquire('k', 60_000, { wait: 100 });
      expect(printed()).not.toContain(password);
    }
    await stores.close();
    expect(printed()).not.toContain(password);
    // Nor does the error for a connection string the driver cannot parse.
    const error = (() => {
      try {
        new MongoKeyValueStore({ url: `mongodb://stowage:${password}@host:notaport/` });
      } catch (caught) {
        return caught;
      }
    })();
    expect(error).toMatchObject({ code: 'E_INVALID_OPTION' });
    expect(inspect(error, { depth: 8 })).not.toContain(password);
  });

  it('rejects bad connection options, database and collection names with E_INVALID_OPTION', async () => {
    const bad: [string, () => unknown][] = [
      ['no url', () => new MongoKeyValueStore({})],
      ['not a mongodb url', () => new MongoKeyValueStore({ url: 'postgres://x' })],
      ['options not an object', () => new MongoKeyValueStore(null as never)],
      ['database with a dot', () => new MongoKeyValueStore({ url: s.url, database: 'a.b' })],
      ['database with a slash', () => new MongoKeyValueStore({ url: s.url, database: 'a/b' })],
      ['database as an operator object', () => new MongoKeyValueStore({ url: s.url, database: { $gt: '' } as never })],
      ['collection with $', () => new MongoKeyValueStore({ url: s.url, collection: 'a$b' })],
      ['collection system.*', () => new MongoKeyValueStore({ url: s.url, collection: 'system.users' })],
      ['collection with NUL', () => new MongoKeyValueStore({ url: s.url, collection: 'a\u0000b' })],
      ['collection empty', () => new MongoKeyValueStore({ url: s.url, collection: '' })],
      ['collection as an object', () => new MongoKeyValueStore({ url: s.url, collection: { $where: '1' } as never })],
      ['lock collection', () => mongo({ url: s.url, lock: { collection: '$locks' } })],
      ['lock ttl', () => mongo({ url: s.url, lock: { ttl: -1 } })],
      ['lock not an object', () => mongo({ url: s.url, lock: 'yes' as never })],
      ['lock writeConcern', () => new MongoLockProvider({ url: s.url, writeConcern: 'majority' as never })],
      ['snapshot prefix with NUL', () => mongo({ url: s.url, prefix: 'a\u0000b' })],
      ['process collection', () => new MongoProcessBackend({ url: s.url, collection: 'system.x' })],
      ['dialect', () => new MongoKeyValueStore({ url: s.url, dialect: 'sql' as never })],
      ['autoCreate', () => new MongoKeyValueStore({ url: s.url, autoCreate: 'yes' as never })],
      ['existingDb not a Db', () => new MongoKeyValueStore({ existingDb: {} as never })],
      ['client not a client', () => new MongoKeyValueStore({ client: 'mongodb://x' as never })],
      ['cache prefix', () => new MongoCacheProvider({ url: s.url, prefix: 42 as never })],
      ['cache prefix with a lone surrogate', () => new MongoCacheProvider({ url: s.url, prefix: '\ud800' })],
      ['cache defaultTtl', () => new MongoCacheProvider({ url: s.url, defaultTtl: 0 })],
      ['cache codec', () => new MongoCacheProvider({ url: s.url, codec: {} as never })],
    ];
    for (const [name, create] of bad) {
      expect(create, name).toThrow(expect.objectContaining({ name: 'StowageError', code: 'E_INVALID_OPTION' }));
    }
    await expect(createMongoPersistence({ url: s.url, prefix: 1 as never })).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
  });
});
