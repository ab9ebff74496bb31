import type { CommandStartedEvent, Document, MongoClient } from 'mongodb';
import { expect, it } from 'vitest';
import {
  MongoCheckpointStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoProcessBackend,
  collectionSpec,
  goGoScopePersistence,
  processIndexSpec,
  type MongoCollectionKind,
  type MongoDialectOption,
  type MongoIndexSpec,
} from '../src/index.js';
import { inNewTransaction } from '../src/transactions.js';
import { monitoredClient } from './helpers.js';
import { everyStore, switchReadPreference, uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers, type OpenedTestServer } from './server.js';

/**
 * What a real deployment asks of the stores that the stand-ins cannot show by themselves (see
 * the README, "Deployments"): a client whose read preference is not `primary`, transactions
 * committed with majority write concern, collections that may be sharded, least-privileged
 * roles, listings an index serves. Where no stand-in has the server behaviour (no sharding, no
 * users, no secondaries, no `explain` plans), the test reads what stowage sends: the driver's
 * command monitoring on a real connection.
 */
const servers = await openTestServers('stowage_deployments');

/** {@link everyStore} on `client`, a second checkpoint store that replaces on duplicates, and a call of every operation that sends a write or a read. */
function everyOperation(client: MongoClient, s: OpenedTestServer, dialect: MongoDialectOption = 'auto') {
  const stores = everyStore({ client, database: s.database, dialect });
  const { names, kv, snapshots, locks, cache, breaker, checkpoints, idempotency, backend } = stores;
  const replacing = new MongoCheckpointStore({ client, database: s.database, dialect, collection: names.checkpoints, onDuplicate: 'replace' });
  const P = 'orders';
  const checkpoint = (id: string, sequence: number) => ({ id, taskId: 'task', sequence, timestamp: sequence, progress: sequence, data: { sequence } });
  const operations: [string, () => Promise<unknown>][] = [
    ['kv.set', () => kv.set('k', 'v', { ttl: 60_000 })],
    ['kv.get', () => kv.get('k')],
    ['kv.getMany', () => kv.getMany(['k', 'x'])],
    ['kv.keys', () => kv.keys('k*')],
    ['kv.setMany', () => kv.setMany([{ key: 'a', value: '1' }, { key: 'b', value: '2' }])],
    ['kv.deleteMany', () => kv.deleteMany(['a'])],
    ['kv.compareAndSet', async () => kv.compareAndSet('n', 'v2', (await kv.compareAndSet('n', 'v1', null))!)],
    ['kv.delete', () => kv.delete('k')],
    ['kv.clearExpired', () => kv.clearExpired()],
    ['snapshots.save', () => snapshots.save('w', { a: 1 })],
    ['snapshots.load', () => snapshots.load('w')],
    ['snapshots.list', () => snapshots.list()],
    ['snapshots.lock', async () => {
      const held = await snapshots.tryAcquire('w', { ttlMs: 10_000 });
      if (held) {
        await snapshots.renew('w', held.ownerToken, { ttlMs: 10_000 });
        await snapshots.release('w', held.ownerToken);
      }
    }],
    ['snapshots.delete', () => snapshots.delete('w')],
    ['locks', async () => {
      const handle = await locks.acquire('l', 10_000, 'x');
      await handle?.isValid();
      await locks.extend('l', 10_000, 'x');
      await handle?.release();
      await locks.withLock('l', async () => undefined, { ttl: 10_000 });
      await locks.forceRelease('l');
    }],
    ['cache', async () => {
      await cache.set('k', { n: 1 }, 60_000);
      await cache.get('k');
      await cache.has('k');
      await cache.getOrSet('g', async () => 1, 60_000);
      await cache.keys();
      await cache.delete('k');
      await cache.clear();
    }],
    ['circuit', async () => {
      await breaker.recordFailure('svc', 2);
      await breaker.recordFailure('svc', 2);
      await breaker.getState('svc');
      await breaker.recordSuccess('svc');
      await breaker.setState('svc', { state: 'closed', failureCount: 0 });
    }],
    ['checkpoints', async () => {
      await checkpoints.save(checkpoint('c1', 1));
      await checkpoints.load('c1');
      await checkpoints.loadLatest('task');
      await checkpoints.list('task');
      await replacing.save(checkpoint('c2', 1)); // replaces c1, which held (task, 1)
      await replacing.save(checkpoint('c2', 2));
      await checkpoints.cleanup('task', 0);
    }],
    ['idempotency', async () => {
      const first = await idempotency.reserve('op', 60_000);
      if (first.status === 'acquired') await idempotency.complete('op', first.token, { done: true });
      await idempotency.get('op');
      const second = await idempotency.reserve('op2', 60_000);
      if (second.status === 'acquired') await idempotency.fail('op2', second.token);
      await idempotency.set('op3', { n: 3 });
      await idempotency.delete('op3');
    }],
    ['process', async () => {
      await backend.createItem({ process: P, id: 'i', state: 'a', data: {} });
      await backend.createItem({ process: P, id: 'i', state: 'a', data: {} }); // exists: not created again
      await backend.getItem(P, 'i');
      await backend.listItems({ process: P, limit: 10 });
      await backend.findClaimable({ process: P, state: 'a', includeUnclaimed: true, limit: 5 });
      const claimed = await backend.claim({ process: P, itemId: 'i', state: 'a', version: 1, owner: 'w', lease: 10_000 });
      await backend.extendLease({ process: P, itemId: 'i', version: 1, owner: 'w', lease: 10_000 });
      await backend.release({ process: P, itemId: 'i', version: 1, owner: 'w', delay: 0, refundAttempt: true });
      if (claimed) await backend.transition({ process: P, itemId: 'i', version: 1, from: 'a', to: 'b', kind: 'advance', key: 'k' });
      await backend.history(P, 'i');
      const feed = await backend.openFeed(P, 'b', null);
      await feed.read({ limit: 5, wait: 1 });
      await feed.close();
    }],
  ];
  return { names, operations, close: () => Promise.all([stores.close(), replacing.close()]) };
}

/** The stowage kind of the collection a command is about (`undefined`: not one of `names`). */
function kindOf(event: CommandStartedEvent, names: Record<MongoCollectionKind, string>): MongoCollectionKind | undefined {
  const collection = event.command[event.commandName];
  return (Object.keys(names) as MongoCollectionKind[]).find((kind) => names[kind] === collection);
}

/** The filter holds `field` by equality (a value, or `$eq`), not by a range or a list. */
function equalityOn(filter: Document, field: string): boolean {
  if (!(field in filter)) return false;
  const value: unknown = filter[field];
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return true;
  const operators = Object.keys(value as Document).filter((key) => key.startsWith('$'));
  return operators.length === 0 || (operators.length === 1 && operators[0] === '$eq');
}

describeEachServer(servers, 'deployments', (s) => {
  for (const mode of ['secondaryPreferred', 'nearest', 'primaryPreferred'] as const) {
    it(`a client whose read preference is ${mode}: every store starts and works, and every command goes to the primary`, async () => {
      const { client, commands } = await monitoredClient(s);
      try {
        switchReadPreference(client, mode);
        const { operations, close } = everyOperation(client, s);
        for (const [name, operation] of operations) await expect(operation().then(() => 'ok'), name).resolves.toBe('ok');
        await close();
        // The driver names the read preference on a command only when it is not primary.
        const elsewhere = commands.filter((event) => event.command.$readPreference !== undefined && event.command.$readPreference.mode !== 'primary');
        expect(elsewhere.map((event) => `${event.commandName} ${JSON.stringify(event.command.$readPreference)}`)).toEqual([]);
      } finally {
        await client.close();
      }
    });
  }

  it('a store inside the caller’s transaction on such a client reads on the primary (the driver refuses any other read preference in a transaction)', async (context) => {
    if (s.product === 'ferretdb') context.skip('FerretDB 1.x runs no transactions');
    const { client } = await monitoredClient(s);
    try {
      switchReadPreference(client, 'secondaryPreferred');
      const kv = await whenReady(new MongoKeyValueStore({ client, database: s.database, collection: uniqueName('kv') }));
      const session = client.startSession();
      try {
        session.startTransaction(); // no options: the transaction takes the client's secondaryPreferred
        const view = kv.withTransaction(session);
        await view.set('a', '1');
        expect(await view.get('a')).toBe('1');
        expect(await view.getMany(['a', 'b'])).toEqual(['1', null]);
        await session.commitTransaction();
      } finally {
        await session.endSession();
      }
      expect(await kv.get('a')).toBe('1');
      await kv.close();
    } finally {
      await client.close();
    }
  });

  it('stowage’s own transactions begin with read preference primary and snapshot reads, and commit with w: majority on a w: 1 client', async (context) => {
    if (s.product === 'ferretdb') context.skip('FerretDB 1.x runs no transactions');
    const { client, commands } = await monitoredClient(s, { writeConcern: { w: 1 } });
    try {
      switchReadPreference(client, 'nearest');
      // Start-up probes the server with an empty transaction, begun as every transaction of stowage's own.
      const kv = await whenReady(new MongoKeyValueStore({ client, database: s.database, collection: uniqueName('kv') }));
      const probe = commands.filter((event) => event.command.txnNumber !== undefined);
      expect(probe.find((event) => event.command.startTransaction === true)?.command).toMatchObject({ readConcern: { level: 'snapshot' } });
      expect(probe.find((event) => event.commandName === 'commitTransaction')?.command).toMatchObject({ writeConcern: { w: 'majority' } });
      // runOnce, transactional states and setMany/deleteMany run in inNewTransaction with the store's write concern.
      commands.splice(0);
      await inNewTransaction(client, { w: 'majority', wtimeout: 4_000 }, (session) => kv.withTransaction(session).set('a', '1'));
      expect(commands.find((event) => event.command.startTransaction === true)?.command).toMatchObject({ readConcern: { level: 'snapshot' } });
      expect(commands.filter((event) => event.commandName === 'update' && event.command.txnNumber !== undefined)).toHaveLength(1);
      expect(commands.find((event) => event.commandName === 'commitTransaction')?.command.writeConcern).toEqual({ w: 'majority', wtimeout: 4_000 });
      expect(await kv.get('a')).toBe('1');
      await kv.close();
    } finally {
      await client.close();
    }
  });

  it('goGoScopePersistence passes writeConcern through whole: every store’s writes carry its wtimeout', async () => {
    const { client, commands } = await monitoredClient(s);
    const writeConcern = { w: 'majority' as const, wtimeout: 5_000 };
    const collections = { lock: uniqueName('gl'), circuitBreaker: uniqueName('gc'), cache: uniqueName('gca'), idempotency: uniqueName('gi'), checkpoint: uniqueName('gcp') };
    try {
      const persistence = goGoScopePersistence({ client, database: s.database, writeConcern, collections });
      await persistence.connect();
      commands.splice(0);
      const handle = await persistence.lock.acquire('l', 10_000);
      await handle?.release();
      await persistence.circuitBreaker.recordFailure('svc', 3);
      await persistence.cache.set('k', 1, 60_000);
      await persistence.idempotency.set('op', { done: true });
      await persistence.checkpoint.save({ id: 'c', taskId: 't', sequence: 1, timestamp: 0, progress: 0, data: {} });
      await persistence.close();
      const writes = commands.filter((event) => ['insert', 'update', 'delete', 'findAndModify'].includes(event.commandName));
      const slots = new Set(writes.map((event) => event.command[event.commandName] as string));
      expect([...slots].sort()).toEqual(Object.values(collections).sort());
      for (const write of writes) expect(write.command.writeConcern, `${write.commandName} ${String(write.command[write.commandName])}`).toEqual(writeConcern);
    } finally {
      await client.close();
    }
  });

  it('start-up with autoCreate: false sends what a role with find, insert, update and remove (and listIndexes) may: listCollections with nameOnly and authorizedCollections', async () => {
    // The collections exist (the migration's work)…
    const setUp = await monitoredClient(s);
    const created = everyOperation(setUp.client, s);
    for (const [, operation] of created.operations) await operation();
    await created.close();
    await setUp.client.close();
    // …then stores start on them without creating anything, on a client of their own (detection runs once per client).
    const { client, commands } = await monitoredClient(s);
    try {
      const stores = everyStore({ client, database: s.database, autoCreate: false }, created.names);
      await stores.ready();
      await stores.close();
      const listings = commands.filter((event) => event.commandName === 'listCollections');
      expect(listings.length).toBeGreaterThan(0);
      for (const listing of listings) expect(listing.command).toMatchObject({ nameOnly: true, authorizedCollections: true });
      // Each command start-up sends needs one of those actions (hello, buildInfo and the session commands need none).
      const allowed = ['hello', 'buildInfo', 'find', 'aggregate', 'getMore', 'killCursors', 'update', 'listCollections', 'listIndexes', 'commitTransaction', 'abortTransaction', 'endSessions'];
      expect([...new Set(commands.map((event) => event.commandName))].filter((name) => !allowed.includes(name))).toEqual([]);
    } finally {
      await client.close();
    }
  });

  for (const dialect of ['auto', 'pipeline'] as const) {
    it(`every single-document write (upsert, findAndModify, updateOne, deleteOne) names the collection’s shard key (dialect ${dialect})`, async () => {
      const { client, commands } = await monitoredClient(s);
      try {
        const { names, operations, close } = everyOperation(client, s, dialect);
        // A pipeline dialect forced on a server without pipelines fails its writes; what is looked at is what it sends.
        for (const [, operation] of operations) await (dialect === 'pipeline' && s.product !== 'mongodb' ? operation().catch(() => undefined) : operation());
        await close();
        const statements: { kind: MongoCollectionKind; command: string; filter: Document; upsert: boolean }[] = [];
        for (const event of commands) {
          const kind = kindOf(event, names);
          if (kind === undefined) continue;
          const { command } = event;
          if (event.commandName === 'update') {
            for (const update of command.updates as Document[]) if (update.multi !== true) statements.push({ kind, command: 'update', filter: update.q as Document, upsert: update.upsert === true });
          } else if (event.commandName === 'findAndModify') {
            statements.push({ kind, command: 'findAndModify', filter: command.query as Document, upsert: true });
          } else if (event.commandName === 'delete') {
            for (const statement of command.deletes as Document[]) if (statement.limit === 1) statements.push({ kind, command: 'delete', filter: statement.q as Document, upsert: false });
          }
        }
        expect(new Set(statements.map((statement) => statement.kind))).toEqual(new Set(['kv', 'snapshots', 'workflowLocks', 'locks', 'cache', 'circuitBreaker', 'checkpoints', 'idempotency', 'process']));
        const missing = statements.filter(({ kind, filter, upsert }) => {
          const fields = Object.keys(collectionSpec(kind).shardKey);
          // Before MongoDB 7.1 an upsert or findAndModify needs the whole shard key; an updateOne or deleteOne the shard key or `_id`.
          return !(fields.every((field) => equalityOn(filter, field)) || (!upsert && equalityOn(filter, '_id')));
        });
        expect(missing.map(({ kind, command, filter }) => `${kind} ${command} ${JSON.stringify(filter)}`)).toEqual([]);
      } finally {
        await client.close();
      }
    });
  }

  it('process listItems sorts on an index: the filter’s equality fields, then the sort, in the index’s order', async () => {
    const { client, commands } = await monitoredClient(s);
    try {
      const collection = uniqueName('process');
      const backend = await whenReady(new MongoProcessBackend({ client, database: s.database, collection }));
      for (const id of ['c', 'a', 'b']) await backend.createItem({ process: 'p', id, state: id === 'b' ? 'x' : 'y', data: {} });
      commands.splice(0);
      expect((await backend.listItems({ process: 'p', limit: 2 })).map((item) => item.id)).toEqual(['a', 'b']);
      expect((await backend.listItems({ process: 'p', limit: 2, after: 'a', state: 'y' })).map((item) => item.id)).toEqual(['c']);
      // The driver sends a sort as a Map (its order is the point).
      const sortOf = (command: Document) => Object.fromEntries(command.sort instanceof Map ? command.sort : Object.entries(command.sort ?? {})) as Record<string, 1 | -1>;
      const sorted = commands.filter((event) => event.commandName === 'find' && Object.keys(sortOf(event.command)).length > 0);
      expect(sorted).toHaveLength(2);
      const { indexes } = processIndexSpec(collection);
      for (const { command } of sorted) {
        const filter = command.filter as Document;
        const sort = sortOf(command);
        const serving = indexes.filter((index) => servesSort(index, filter, sort));
        expect(serving.map((index) => index.name), JSON.stringify({ filter, sort })).not.toEqual([]);
        if (s.product === 'mongodb') {
          // A real MongoDB shows the plan: no blocking SORT stage.
          const plan = await client.db(s.database).collection(collection).find(filter).sort(sort).limit(2).explain();
          expect(JSON.stringify(plan.queryPlanner.winningPlan)).not.toMatch(/"stage":"SORT"/);
        }
      }
      await backend.close();
    } finally {
      await client.close();
    }
  });

  it('idempotency get() reads with majority read concern: a result it hands out is one a failover cannot roll back', async () => {
    const { client, commands } = await monitoredClient(s);
    try {
      const collection = uniqueName('idem');
      const idempotency = await whenReady(new MongoIdempotencyStore({ client, database: s.database, collection }));
      await idempotency.set('op', { done: 1 });
      commands.splice(0);
      expect(await idempotency.get('op')).toEqual({ value: { done: 1 } });
      const reads = commands.filter((event) => event.command[event.commandName] === collection);
      expect(reads.map((event) => [event.commandName, event.command.readConcern])).toEqual([['find', { level: 'majority' }]]);
      await idempotency.close();
    } finally {
      await client.close();
    }
  });
});

/**
 * Whether `index` gives the documents `filter` matches in `sort` order without sorting them:
 * its keys are some of the filter's equality fields, then exactly the sort's fields, all in the
 * sort's directions or all reversed.
 */
function servesSort(index: MongoIndexSpec, filter: Document, sort: Record<string, 1 | -1>): boolean {
  const keys = Object.entries(index.key);
  const sortKeys = Object.entries(sort);
  const prefix = keys.slice(0, keys.length - sortKeys.length);
  const rest = keys.slice(keys.length - sortKeys.length);
  if (!prefix.every(([field]) => equalityOn(filter, field))) return false;
  const same = rest.every(([field, direction], at) => field === sortKeys[at]![0] && direction === sortKeys[at]![1]);
  const reversed = rest.every(([field, direction], at) => field === sortKeys[at]![0] && direction === -sortKeys[at]![1]);
  return rest.length === sortKeys.length && (same || reversed);
}
