import type { JsonObject } from '@stowage/core';
import { StowageError } from '@stowage/core';
import { MongoClient, MongoServerError } from 'mongodb';
import { MongoClient as MongoClientV6 } from 'mongodb6';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { MongoCheckpointStore, MongoIdempotencyStore, MongoKeyValueStore, MongoLockProvider, MongoProcessBackend, mongo } from '../src/index.js';
import { StoreConnection } from '../src/database.js';
import { toStowageError } from '../src/errors.js';
import { parseStoreOptions } from '../src/options.js';
import { unwrapTransient } from '../src/transactions.js';
import { recordCommands } from './helpers.js';
import { uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * Stores inside the caller's own transaction (`withTransaction(session)`) on every server, with
 * what each server can do: MongoDB runs the transaction conformance cases too (conformance.test.ts,
 * the shared-client run); jongodb runs transactions without isolating them, so the stores join
 * a caller's session there but begin none themselves (`runOnce`, transactional states refuse);
 * FerretDB 1.x has no transactions, and a view refuses with `E_INVALID_OPTION`, never a raw
 * driver error.
 */
const servers = await openTestServers('stowage_transactions');

const P = 'orders';

it('a StowageError over a driver error labelled TransientTransactionError gives the driver its error back, so withTransaction runs the transaction again', () => {
  const transient = new MongoServerError({ message: 'connection reset', code: 6, errorLabels: ['TransientTransactionError'] });
  const other = new MongoServerError({ message: 'no', code: 2 });
  expect(unwrapTransient(new StowageError('E_UNAVAILABLE', 'MongoDB is unavailable', { cause: transient }))).toBe(transient);
  const plain = new StowageError('E_INVALID_VALUE', 'bad', { cause: other });
  expect(unwrapTransient(plain)).toBe(plain);
  const thrown = new Error('card declined');
  expect(unwrapTransient(thrown)).toBe(thrown);
  // jongodb's WriteConflict comes unlabelled: stowage's own retry loop (code 112) gets it back too.
  const conflict = new MongoServerError({ message: 'write conflict', code: 112 });
  expect(unwrapTransient(toStowageError(conflict))).toBe(conflict);
  expect(toStowageError(transient)).toMatchObject({ code: 'E_UNAVAILABLE', cause: transient });
});

describeEachServer(servers, 'stores inside the caller’s transaction', (s) => {
  // The application's client: the stores and the sessions share it (a session goes only with its own client).
  let client: MongoClient;
  beforeAll(async () => {
    client = await new MongoClient(s.url, { monitorCommands: true }).connect();
  });
  afterAll(() => client.close());
  const options = (stem: string) => ({ client, database: s.database, collection: uniqueName(stem) });

  /** `fn` in a session with a started transaction; committed unless `fn` asks for a rollback. */
  async function inTransaction(fn: (session: ReturnType<MongoClient['startSession']>) => Promise<'commit' | 'rollback'>): Promise<void> {
    const session = client.startSession();
    try {
      session.startTransaction();
      const outcome = await fn(session).catch(async (error: unknown) => {
        await session.abortTransaction();
        throw error;
      });
      await (outcome === 'commit' ? session.commitTransaction() : session.abortTransaction());
    } finally {
      await session.endSession();
    }
  }

  if (s.product === 'ferretdb') {
    it('FerretDB 1.x has no transactions: a view refuses every call with E_INVALID_OPTION, runOnce and transactional states too', async () => {
      const kv = await whenReady(new MongoKeyValueStore(options('kv')));
      const idempotency = await whenReady(new MongoIdempotencyStore(options('idem')));
      const backend = await whenReady(new MongoProcessBackend(options('process')));
      expect(kv.capabilities.transactions).toBe(false);
      const session = client.startSession();
      try {
        session.startTransaction();
        const view = kv.withTransaction(session);
        await expect(view.set('a', '1')).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringContaining('cannot run multi-document transactions') });
        await expect(view.get('a')).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
        await expect(backend.withTransaction(session).createItem({ process: P, id: 'x', state: 'a', data: {} })).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      } finally {
        await session.endSession();
      }
      await expect(idempotency.runOnce('op', async () => 1)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await expect(backend.transaction(async () => 1)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      expect(await kv.get('a')).toBeNull();
      await Promise.all([kv.close(), idempotency.close(), backend.close()]);
    });
    return;
  }

  it('in a view, an error labelled TransientTransactionError reaches the caller as the driver threw it (the caller’s withTransaction runs the transaction again); outside, it is E_UNAVAILABLE', async () => {
    const name = uniqueName('labels');
    const connection = new StoreConnection(parseStoreOptions({ ...options('labels'), collection: name }, 'kv', 'test'), [{ kind: 'kv', name }]);
    const transient = new MongoServerError({ message: 'write conflict', code: 112, errorLabels: ['TransientTransactionError'] });
    const refused = new MongoServerError({ message: 'not authorized', code: 13 });
    const session = client.startSession();
    try {
      const view = connection.bind(session);
      expect(view.toStowageError(transient)).toBe(transient);
      expect(view.toStowageError(refused)).toMatchObject({ code: 'E_INVALID_OPTION', cause: refused });
      expect(connection.toStowageError(transient)).toMatchObject({ code: 'E_UNAVAILABLE', cause: transient });
    } finally {
      await session.endSession();
      await connection.close();
    }
  });

  it('kv, snapshots, checkpoints and idempotency records commit with the caller’s transaction, and a rollback leaves nothing', async () => {
    const kv = await whenReady(new MongoKeyValueStore(options('kv')));
    const snapshots = await whenReady(mongo<JsonObject>(options('snapshots')));
    const checkpoints = await whenReady(new MongoCheckpointStore(options('checkpoints')));
    const idempotency = await whenReady(new MongoIdempotencyStore(options('idem')));
    await kv.set('kept', 'before');
    const read = (await kv.getEntry('kept'))!;
    const checkpoint = (sequence: number) => ({ id: `cp-${sequence}`, taskId: 't', sequence, timestamp: sequence, progress: sequence, data: { sequence } });

    for (const outcome of ['rollback', 'commit'] as const) {
      await inTransaction(async (session) => {
        const view = kv.withTransaction(session);
        await view.set(`new/${outcome}`, 'n');
        await view.setMany([{ key: `many/${outcome}`, value: 'm' }]);
        expect(await view.compareAndSet('kept', outcome, read.version)).toBeGreaterThan(read.version);
        expect(await view.getMany([`new/${outcome}`, `many/${outcome}`, 'kept'])).toEqual(['n', 'm', outcome]);
        await snapshots.withTransaction(session).save(`wf/${outcome}`, { step: 1 });
        await checkpoints.withTransaction(session).save(checkpoint(outcome === 'rollback' ? 1 : 2));
        const reservation = await idempotency.withTransaction(session).reserve(`op/${outcome}`, 60_000);
        expect(reservation.status).toBe('acquired');
        await idempotency.withTransaction(session).complete(`op/${outcome}`, (reservation as { token: string }).token, { done: outcome });
        return outcome;
      });
    }
    expect(await kv.getMany(['new/rollback', 'many/rollback', 'new/commit', 'many/commit', 'kept'])).toEqual([null, null, 'n', 'm', 'commit']);
    expect(await snapshots.load('wf/rollback')).toBeNull();
    expect(await snapshots.load('wf/commit')).toEqual({ step: 1 });
    expect((await checkpoints.list('t')).map((saved) => saved.id)).toEqual(['cp-2']);
    expect(await idempotency.get('op/rollback')).toBeNull();
    expect(await idempotency.get('op/commit')).toEqual({ value: { done: 'commit' } });
    await Promise.all([kv.close(), snapshots.close(), checkpoints.close(), idempotency.close()]);
  });

  it('a view sends each call on its own: concurrent gets are not coalesced into one command', async () => {
    const kv = await whenReady(new MongoKeyValueStore(options('kv')));
    await inTransaction(async (session) => {
      const view = kv.withTransaction(session);
      await view.set('a', '1'); // the transaction's first command, before any concurrency
      const commands = recordCommands(client);
      expect(await Promise.all([view.get('a'), view.get('b')])).toEqual(['1', null]);
      commands.stop();
      expect(commands.names.filter((name) => name === 'find' || name === 'aggregate')).toHaveLength(2);
      return 'rollback';
    });
    await kv.close();
  });

  it('a session of a mongodb 6.x client works the same (the peer dependency is ^6 || ^7)', async () => {
    const v6 = await new MongoClientV6(s.url).connect();
    try {
      // The stores are typed against the v7 driver; v6's client and session are structurally compatible at run time.
      const kv = await whenReady(new MongoKeyValueStore({ client: v6 as never, database: s.database, collection: uniqueName('v6_kv') }));
      for (const outcome of ['abort', 'commit'] as const) {
        const session = v6.startSession();
        try {
          session.startTransaction();
          await kv.withTransaction(session).set(outcome, 'written');
          expect(await kv.withTransaction(session).get(outcome)).toBe('written');
          await (outcome === 'commit' ? session.commitTransaction() : session.abortTransaction());
        } finally {
          await session.endSession();
        }
      }
      expect(await kv.getMany(['abort', 'commit'])).toEqual([null, 'written']);
      await kv.close();
    } finally {
      await v6.close();
    }
  });

  it('a conflict inside the transaction (compare-and-set of a live key, creating an existing item) answers as outside it and leaves the transaction usable', async () => {
    const kv = await whenReady(new MongoKeyValueStore(options('kv')));
    const backend = await whenReady(new MongoProcessBackend(options('process')));
    await kv.set('taken', 'first');
    await backend.createItem({ process: P, id: 'exists', state: 'a', data: { n: 1 } });
    await inTransaction(async (session) => {
      // A duplicate-key error would abort the transaction on MongoDB: the views look first.
      await expect(kv.withTransaction(session).compareAndSet('taken', 'second', null)).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
      const { created, item } = await backend.withTransaction(session).createItem({ process: P, id: 'exists', state: 'a', data: { n: 2 } });
      expect({ created, data: item.data }).toEqual({ created: false, data: { n: 1 } });
      await kv.withTransaction(session).set('after', 'still in the transaction');
      return 'commit';
    });
    expect(await kv.getMany(['taken', 'after'])).toEqual(['first', 'still in the transaction']);
    await Promise.all([kv.close(), backend.close()]);
  });

  it('the process backend’s view: a created item and a transition roll back with the transaction; a feed is refused there', async () => {
    const backend = await whenReady(new MongoProcessBackend(options('process')));
    await backend.createItem({ process: P, id: 'item', state: 'a', data: {} });
    await inTransaction(async (session) => {
      const view = backend.withTransaction(session);
      await view.createItem({ process: P, id: 'inside', state: 'a', data: {} });
      const moved = await view.transition({ process: P, itemId: 'item', version: 1, from: 'a', to: 'b', kind: 'advance', key: 'k' });
      expect(moved?.state).toBe('b');
      expect((await view.getItem(P, 'item'))?.state).toBe('b');
      await expect(view.openFeed(P, 'a', null)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      return 'rollback';
    });
    expect(await backend.getItem(P, 'inside')).toBeNull();
    expect((await backend.getItem(P, 'item'))?.state).toBe('a');
    await backend.close();
  });

  it('what is not this client’s session with a transaction in progress is refused with E_INVALID_OPTION; locks do not join transactions', async () => {
    const kv = await whenReady(new MongoKeyValueStore(options('kv')));
    const locks = await whenReady(new MongoLockProvider(options('locks')));
    const other = await new MongoClient(s.url).connect();
    const foreign = other.startSession();
    const idle = client.startSession();
    try {
      foreign.startTransaction();
      expect(() => kv.withTransaction(foreign)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION', message: expect.stringContaining('another MongoClient') }));
      expect(() => kv.withTransaction(client)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      // A session without a transaction in progress would run each command on its own.
      await expect(kv.withTransaction(idle).set('a', '1')).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringContaining('no transaction in progress') });
      idle.startTransaction();
      expect(() => (locks as unknown as { withTransaction(session: object): unknown }).withTransaction(idle)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      await idle.abortTransaction();
      expect(await kv.get('a')).toBeNull();
    } finally {
      await Promise.all([foreign.endSession(), idle.endSession()]);
      await other.close();
      await Promise.all([kv.close(), locks.close()]);
    }
  });

  if (s.product === 'jongodb') {
    it('jongodb isolates no transactions: runOnce and transactional states refuse with E_INVALID_OPTION, and capabilities say so', async () => {
      const idempotency = await whenReady(new MongoIdempotencyStore(options('idem')));
      const backend = await whenReady(new MongoProcessBackend(options('process')));
      expect(idempotency.capabilities.transactions).toBe(false);
      await expect(idempotency.runOnce('op', async () => 1)).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringContaining('without isolating them') });
      await expect(backend.transaction(async () => 1)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await Promise.all([idempotency.close(), backend.close()]);
    });

    it('behind a strict Stable API client (no buildInfo) jongodb is still recognised, by its hello without localTime', async () => {
      const strict = { serverApi: { version: '1' as const, strict: true } };
      const idempotency = await whenReady(new MongoIdempotencyStore({ url: s.url, database: s.database, collection: uniqueName('idem'), clientOptions: strict }));
      expect(idempotency.capabilities).toMatchObject({ transactions: false, ttlIndex: false });
      await expect(idempotency.runOnce('op', async () => 1)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await idempotency.close();
    });
  } else {
    it('runOnce: the function’s writes through the session and the result commit together', async () => {
      const kv = await whenReady(new MongoKeyValueStore(options('kv')));
      const idempotency = await whenReady(new MongoIdempotencyStore(options('idem')));
      let runs = 0;
      const charge = async (session: object) => {
        runs++;
        await kv.withTransaction(session).set('charged', String(runs));
        return { charged: runs };
      };
      expect(await idempotency.runOnce('op', charge)).toEqual({ charged: 1 });
      expect(await idempotency.runOnce('op', charge)).toEqual({ charged: 1 });
      expect({ runs, charged: await kv.get('charged') }).toEqual({ runs: 1, charged: '1' });
      await Promise.all([kv.close(), idempotency.close()]);
    });
  }
});
