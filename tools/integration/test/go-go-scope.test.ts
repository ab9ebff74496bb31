/**
 * go-go-scope's persistence providers on stowage (`goGoScopePersistence` of each backend),
 * driven the way go-go-scope's `scope()` drives them — go-go-scope itself is not on the npm
 * registry, so its calls are replayed as its source makes them:
 *
 * - `scope.acquireLock` / `Lock`: `acquire("lock:exclusive:<key>", ttl, owner)`, `extend` with
 *   the same owner on a timer, `handle.release()`; `forceRelease`;
 * - circuit-breaker state: `recordFailure(key, maxFailures)` up to open, `setState` to
 *   half-open, `recordSuccess`;
 * - the cache: `get`/`set(key, value, ttl)`/`has`/`keys` (also with a RegExp)/`clear`;
 * - `task(fn, { idempotency: { key, ttl } })`: `get(key)` before the task, then
 *   `set(key, [undefined, value], ttl)` after it (ttl may be 0 or undefined);
 * - `task(fn, { checkpoint: { interval } })`: `checkpoint.save(data)` saves a new sequence and
 *   `cleanup(taskId, maxCheckpoints)`, and every `interval` the current checkpoint is saved
 *   again (same id, same sequence); `loadLatest(taskId)` on resume, `deleteAll` on success.
 *
 * On memory, embedded PGlite, the PostgreSQL server and the MongoDB stand-in
 * (STOWAGE_MONGO_URL). The first block shows what goes wrong without the layer.
 */
import type { Checkpoint } from '@stowage/core';
import { MemoryCacheProvider, MemoryCheckpointStore, MemoryIdempotencyStore } from '@stowage/core/memory';
import { goGoScopePersistence as onMongo } from '@stowage/mongo';
import { goGoScopePersistence as onPostgres } from '@stowage/postgres';
import { MongoClient } from 'mongodb';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  GO_GO_SCOPE_BACKENDS,
  unique,
  type GoGoScopeNamespace,
  type StartedBackend,
} from './go-go-scope-backends.ts';

type Skippable = { skip(note?: string): never };

/** A checkpoint as go-go-scope's `createCheckpointContext` builds it. */
function checkpointOf<T>(taskId: string, sequence: number, data: T, progress = 0): Checkpoint<T> {
  return { id: `${taskId}-1700000000000-${sequence}`, taskId, sequence, timestamp: Date.now(), progress, data };
}

describe('go-go-scope on raw stowage stores (why the layer exists)', () => {
  it('a strict checkpoint store refuses the interval re-save and Date data; strict JSON refuses the result tuple; a ttl of 0 is refused', async () => {
    const checkpoints = new MemoryCheckpointStore();
    const first = checkpointOf('job', 1, { processed: 10 });
    await checkpoints.save(first);
    // go-go-scope swallows these rejections: its progress would silently not be saved.
    await expect(checkpoints.save(first)).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
    await expect(checkpoints.save(checkpointOf('job', 2, { at: new Date() }) as never)).rejects.toMatchObject({ code: 'E_INVALID_VALUE' });
    expect(await checkpoints.load('missing')).toBeNull(); // go-go-scope expects undefined

    const idempotency = new MemoryIdempotencyStore();
    await expect(idempotency.set('charge', [undefined, 42])).rejects.toMatchObject({ code: 'E_INVALID_VALUE' });

    const cache = new MemoryCacheProvider();
    await expect(cache.set('k', 'v', 0)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
    await Promise.all([checkpoints.close(), idempotency.close(), cache.close()]);
  });
});

for (const backend of GO_GO_SCOPE_BACKENDS) {
  describe(`go-go-scope persistence on ${backend.name}`, () => {
    let started: StartedBackend | null;
    const namespaces: GoGoScopeNamespace[] = [];

    beforeAll(async () => {
      started = await backend.start();
      if (started) console.log(`[go-go-scope] ${backend.name}: ${started.label}`);
    });
    afterAll(async () => {
      await Promise.all(namespaces.map((namespace) => namespace.drop()));
      await started?.stop();
    });

    /** A fresh namespace and a persistence on it (skips where the backend cannot replace checkpoints yet). */
    function open(context: Skippable, keyPrefix?: string) {
      if (!started) context.skip(`${backend.name} is not available here (outside CI only)`);
      const namespace = started.namespace();
      namespaces.push(namespace);
      return { namespace, persistence: namespace.open({ keyPrefix }) };
    }

    it('connect() creates the tables or collections under go-go-scope\'s names', async (context) => {
      const { namespace, persistence } = open(context);
      try {
        expect(persistence.isConnected()).toBe(false);
        await persistence.connect();
        expect(persistence.isConnected()).toBe(true);
        const names = await namespace.names();
        if (names !== null) {
          expect(names).toEqual(
            expect.arrayContaining(['go_goscope_cache', 'go_goscope_checkpoints', 'go_goscope_circuit', 'go_goscope_idempotency', 'go_goscope_locks']),
          );
        }
      } finally {
        await persistence.disconnect();
      }
      expect(persistence.isConnected()).toBe(false);
    });

    it('lock: acquire with an owner, extend on a timer, release; another owner waits its turn; forceRelease', async (context) => {
      const { persistence } = open(context, 'myapp:');
      const { lock } = persistence;
      const key = 'lock:exclusive:resource:123'; // as go-go-scope's Lock names it
      try {
        const handle = await lock.acquire(key, 30_000, 'owner-a1b2c3d4');
        expect(handle).not.toBeNull();
        expect(await lock.acquire(key, 30_000, 'owner-e5f6g7h8')).toBeNull();
        expect(await lock.extend(key, 30_000, 'owner-a1b2c3d4')).toBe(true); // the Lock's extension timer
        expect(await lock.extend(key, 30_000, 'owner-e5f6g7h8')).toBe(false);
        expect(await handle!.isValid()).toBe(true);
        expect(await handle!.extend(30_000)).toBe(true);
        // go-go-scope's read lock probes the write key with a 100 ms lease and releases it at once.
        const probe = await lock.acquire('lock:write:resource:123', 100, 'owner-a1b2c3d4');
        await probe!.release();

        await handle!.release();
        expect(await handle!.isValid()).toBe(false);
        const next = await lock.acquire(key, 30_000, 'owner-e5f6g7h8');
        expect(next).not.toBeNull();
        expect(next!.fence).toBeGreaterThan(handle!.fence); // stowage's fencing token comes along
        await lock.forceRelease(key);
        expect(await next!.isValid()).toBe(false);
        // The key prefix is part of the stored key.
        expect(next!.key).toBe(`myapp:${key}`);
      } finally {
        await persistence.close();
      }
    });

    it('circuit breaker: failures open it at maxFailures, half-open is kept, a success closes it', async (context) => {
      const { persistence } = open(context);
      const { circuitBreaker } = persistence;
      try {
        expect(await circuitBreaker.getState('payments-api')).toBeNull();
        expect(await circuitBreaker.recordFailure('payments-api', 3)).toBe(1);
        expect(await circuitBreaker.recordFailure('payments-api', 3)).toBe(2);
        expect((await circuitBreaker.getState('payments-api'))?.state).toBe('closed');
        expect(await circuitBreaker.recordFailure('payments-api', 3)).toBe(3);
        const open = await circuitBreaker.getState('payments-api');
        expect(open).toMatchObject({ state: 'open', failureCount: 3 });
        expect(typeof open?.lastFailureTime).toBe('number');

        await circuitBreaker.setState('payments-api', { state: 'half-open', failureCount: 3, lastFailureTime: open!.lastFailureTime });
        expect(await circuitBreaker.getState('payments-api')).toMatchObject({ state: 'half-open', failureCount: 3 });
        await circuitBreaker.recordSuccess('payments-api');
        const closed = await circuitBreaker.getState('payments-api');
        expect(closed).toMatchObject({ state: 'closed', failureCount: 0 });
        expect(typeof closed?.lastSuccessTime).toBe('number');
      } finally {
        await persistence.close();
      }
    });

    it('cache: get/set/has/delete, keys with a RegExp or a glob, a ttl of 0 never expires, Dates survive, clear', async (context) => {
      const { persistence } = open(context, 'myapp:');
      const { cache } = persistence;
      try {
        const ada = { name: 'Ada', since: new Date('2024-01-15T10:30:00.000Z') };
        await cache.set('user:1', ada, 60_000);
        await cache.set('user:2', { name: 'Grace' }, 0); // go-go-scope's adapters: 0 = no expiry
        await cache.set('session:1', 'token');
        expect(await cache.get('user:1')).toEqual(ada);
        expect((await cache.get<typeof ada>('user:1'))?.since).toBeInstanceOf(Date);
        expect(await cache.get('missing')).toBeNull();
        expect(await cache.has('user:2')).toBe(true);
        expect(await persistence.stores.cache.getOrSet('user:2', async () => ({ name: 'not loaded' }))).toEqual({ name: 'Grace' });

        expect(await cache.keys(/^user:/)).toEqual(['user:1', 'user:2']);
        expect(await cache.keys(/:1$/)).toEqual(['session:1', 'user:1']);
        expect(await cache.keys('user:*')).toEqual(['user:1', 'user:2']);
        expect(await cache.keys()).toEqual(['session:1', 'user:1', 'user:2']);

        await cache.delete('user:1');
        expect(await cache.has('user:1')).toBe(false);
        await cache.clear();
        expect(await cache.keys()).toEqual([]);
      } finally {
        await persistence.close();
      }
    });

    it('idempotency: the [undefined, value] result tuple round-trips, with a ttl, with 0 and without', async (context) => {
      const { persistence } = open(context, 'myapp:');
      const { idempotency } = persistence;
      type Charged = { chargeId: string; at: Date };
      try {
        expect(await idempotency.get('charge:order-1')).toBeNull(); // before the task: nothing cached

        const result: [undefined, Charged] = [undefined, { chargeId: 'ch_1', at: new Date('2024-01-15T10:30:00.000Z') }];
        await idempotency.set('charge:order-1', result, 60_000); // after the task, with options.idempotency.ttl
        const cached = await idempotency.get<[undefined, Charged]>('charge:order-1');
        expect(cached?.value).toHaveLength(2);
        expect(cached?.value[0]).toBeUndefined();
        expect(cached?.value[1]).toEqual(result[1]);
        expect(cached?.value[1].at).toBeInstanceOf(Date);
        expect(cached?.expiresAt).toEqual(expect.any(Number));

        await idempotency.set('charge:order-2', [undefined, 42], 0); // a defaultTTL of 0: no expiry
        expect(await idempotency.get('charge:order-2')).toEqual({ value: [undefined, 42] });
        await idempotency.set('charge:order-3', [undefined, 'no ttl']);
        expect((await idempotency.get<[undefined, string]>('charge:order-3'))?.value[1]).toBe('no ttl');

        await idempotency.delete('charge:order-1');
        expect(await idempotency.get('charge:order-1')).toBeNull();
        // Stored under the key prefix, and the store's own contract (reserve) sees it there.
        expect(await persistence.stores.idempotency.reserve('myapp:charge:order-2', 1_000)).toMatchObject({ status: 'completed' });
      } finally {
        await persistence.close();
      }
    });

    it('checkpoint: the interval auto-save saves one id and sequence again and again; the last save wins', async (context) => {
      const { persistence } = open(context);
      const { checkpoint } = persistence;
      const taskId = 'data-processing-job';
      type Progress = { processed: number; at: Date };
      try {
        expect(await checkpoint.loadLatest(taskId)).toBeUndefined(); // a fresh task: nothing to resume
        // checkpoint.save({ processed }) inside the task: sequence 1, then cleanup(taskId, maxCheckpoints).
        const current = checkpointOf<Progress>(taskId, 1, { processed: 100, at: new Date('2024-01-15T10:00:00.000Z') });
        await checkpoint.save(current);
        await checkpoint.cleanup(taskId, 10);
        // setInterval(() => provider.save(state.current), interval): the same checkpoint, five times.
        for (let tick = 1; tick <= 5; tick++) {
          current.progress = tick * 10;
          current.data = { processed: 100 + tick, at: new Date(Date.UTC(2024, 0, 15, 10, tick)) };
          await checkpoint.save(current);
        }
        const latest = await checkpoint.loadLatest<Progress>(taskId);
        expect(latest).toEqual(current);
        expect(latest?.progress).toBe(50);
        expect(latest?.data.at).toBeInstanceOf(Date);
        expect(latest?.data.at.toISOString()).toBe('2024-01-15T10:05:00.000Z');
        expect(await checkpoint.list(taskId)).toEqual([current]);
        expect(await checkpoint.load(current.id)).toEqual(current);

        const second = checkpointOf<Progress>(taskId, 2, { processed: 200, at: new Date('2024-01-15T11:00:00.000Z') });
        await checkpoint.save(second);
        await checkpoint.save(second);
        expect(await checkpoint.loadLatest(taskId)).toEqual(second);
        await checkpoint.cleanup(taskId, 1);
        expect(await checkpoint.list(taskId)).toEqual([second]);

        expect(await checkpoint.load('data-processing-job-missing')).toBeUndefined();
        await checkpoint.deleteAll(taskId); // the task succeeded
        expect(await checkpoint.loadLatest(taskId)).toBeUndefined();
      } finally {
        await persistence.close();
      }
    });

    it('keyPrefix keeps two applications apart on the same tables or collections', async (context) => {
      if (!started) return context.skip(`${backend.name} is not available here (outside CI only)`);
      const namespace = started.namespace();
      namespaces.push(namespace);
      const one = namespace.open({ keyPrefix: 'billing:' });
      const two = namespace.open({ keyPrefix: 'shipping:' });
      try {
        expect(await one.lock.acquire('job', 30_000, 'owner-1')).not.toBeNull();
        expect(await two.lock.acquire('job', 30_000, 'owner-2')).not.toBeNull();
        await one.cache.set('k', 1);
        await two.cache.set('k', 2);
        await two.cache.clear();
        expect(await one.cache.get('k')).toBe(1);
        expect(await one.cache.keys()).toEqual(['k']);
        await one.idempotency.set('charge', [undefined, 'billing']);
        expect(await two.idempotency.get('charge')).toBeNull();
        expect(await one.circuitBreaker.recordFailure('api', 5)).toBe(1);
        expect(await two.circuitBreaker.getState('api')).toBeNull();
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    });

    it('close(): later calls reject with E_CLOSED; close is idempotent', async (context) => {
      const { persistence } = open(context);
      await persistence.cache.set('k', 'v');
      await Promise.all([persistence.close(), persistence.close()]);
      await persistence.disconnect();
      await expect(persistence.cache.get('k')).rejects.toMatchObject({ code: 'E_CLOSED' });
      await expect(persistence.lock.acquire('k', 1_000)).rejects.toMatchObject({ code: 'E_CLOSED' });
      await expect(persistence.checkpoint.loadLatest('task')).rejects.toMatchObject({ code: 'E_CLOSED' });
    });

    it('bad input still gets stowage errors (a key prefix with U+0000, a key that is not a string)', async (context) => {
      if (!started) return context.skip(`${backend.name} is not available here (outside CI only)`);
      const namespace = started.namespace();
      namespaces.push(namespace);
      expect(() => namespace.open({ keyPrefix: 'a\u0000b' })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      const { persistence } = open(context, 'myapp:');
      try {
        await expect(persistence.lock.acquire(undefined as unknown as string, 1_000)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
        await expect(persistence.idempotency.get(42 as unknown as string)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
        await expect(persistence.cache.set('k', 'v', -1)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      } finally {
        await persistence.close();
      }
    });
  });
}

describe('one connection per persistence, closed only if it was opened here', () => {
  it('postgres (server): every store on one pool; close() ends it; a pool passed in stays open', async (context) => {
    const url = process.env.STOWAGE_POSTGRES_URL;
    if (!url) return context.skip('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
    const applicationName = unique('gogoscope');
    const schema = unique('gogoscope');
    const admin = new pg.Pool({ connectionString: url, max: 1 });
    const connections = async () =>
      Number((await admin.query('SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1', [applicationName])).rows[0].n);
    const persistence = onPostgres({ url, schema, applicationName, pool: { max: 1 } });
    try {
      await persistence.connect();
      await Promise.all([
        persistence.lock.acquire('k', 10_000),
        persistence.circuitBreaker.recordFailure('k', 3),
        persistence.cache.set('k', 1),
        persistence.idempotency.set('k', [undefined, 1]),
        persistence.checkpoint.list('k'),
      ]);
      // The one pool (max 1), plus the lock provider's LISTEN connection for release wake-ups.
      expect(await connections()).toBeLessThanOrEqual(2);
      await persistence.close();
      for (let attempt = 0; attempt < 100 && (await connections()) > 0; attempt++) await new Promise((resolve) => setTimeout(resolve, 100));
      expect(await connections()).toBe(0);

      const pool = new pg.Pool({ connectionString: url, max: 2 });
      const onGivenPool = onPostgres(pool, { keyPrefix: 'given:' });
      await onGivenPool.cache.set('k', 'v');
      await onGivenPool.close();
      expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]); // never ended by stowage
      await pool.end();
    } finally {
      await persistence.close();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    }
  });

  it('mongo (server): a Db or a client passed in stays usable after close()', async (context) => {
    const url = process.env.STOWAGE_MONGO_URL;
    if (!url) return context.skip('no MongoDB server (set STOWAGE_MONGO_URL)');
    const database = unique('gogoscope');
    const withDatabase = new URL(url);
    withDatabase.pathname = `/${database}`; // the client's default database, which the stores use
    const client = new MongoClient(withDatabase.toString());
    const db = client.db(database);
    try {
      for (const given of [db, client]) {
        const persistence = onMongo(given, { keyPrefix: 'myapp:' });
        await persistence.cache.set('k', 'v');
        expect(await persistence.cache.get('k')).toBe('v');
        await persistence.close();
        expect(await db.command({ ping: 1 })).toMatchObject({ ok: 1 }); // never closed by stowage
      }
      expect((await db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name)).toContain('go_goscope_cache');
    } finally {
      await db.dropDatabase().catch(() => undefined);
      await client.close();
    }
  });

  it('a source that is none of a connection, a URL or options is E_INVALID_OPTION, before anything opens', () => {
    expect(() => onMongo(42 as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    expect(() => onPostgres(42 as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    expect(() => onPostgres('postgresql://localhost/app', null as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    expect(() => onMongo('mongodb://127.0.0.1:27017/app', 'myapp:' as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
  });
});
