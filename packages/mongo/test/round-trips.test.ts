import { MongoClient } from 'mongodb';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  MongoCacheProvider,
  MongoCheckpointStore,
  MongoCircuitBreakerStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoLockProvider,
  mongo,
  type MongoDialectName,
} from '../src/index.js';
import { recordCommands } from './helpers.js';
import { uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * One command per operation, counted with driver command monitoring on a client passed in.
 * Start-up (feature detection, schema) happens in connect() and is not counted. The few
 * operations that take two commands in the classic dialect (no update pipelines) are listed
 * with that count; `cleanup` takes two everywhere. (The commands themselves, in the pipeline
 * dialect: pipeline-commands.test.ts.)
 */
const servers = await openTestServers('stowage_round_trips');

describeEachServer(servers, 'one command per operation', (s) => {
  let client: MongoClient;
  let commands: ReturnType<typeof recordCommands>;
  const options = (stem: string) => ({ client, database: s.database, collection: uniqueName(stem) });

  beforeAll(async () => {
    client = await new MongoClient(s.url, { monitorCommands: true }).connect();
    commands = recordCommands(client);
  });
  afterAll(() => client?.close());

  /** Runs `operation` and returns the names of the commands it sent. */
  async function sent(operation: () => Promise<unknown>): Promise<string[]> {
    commands.reset();
    await operation();
    return [...commands.names];
  }
  const byDialect = <T,>(dialect: MongoDialectName | undefined, pipeline: T, classic: T): T => (dialect === 'pipeline' ? pipeline : classic);
  // The classic dialect deletes a value with findAndModify on `_id` alone, to see whether it was live.
  const deleteCommand = (dialect: MongoDialectName | undefined) => (dialect === 'pipeline' ? 'update' : 'findAndModify');

  it('KeyValueStore', async () => {
    const kv = await whenReady(new MongoKeyValueStore(options('rt_kv')));
    expect(await sent(() => kv.set('a', '1'))).toEqual(['update']);
    expect(await sent(() => kv.set('a', '2', { ttl: 60_000 }))).toEqual(['update']);
    expect(await sent(() => kv.get('a'))).toEqual(['find']);
    expect(await sent(() => kv.exists('a'))).toEqual(['find']);
    expect(await sent(() => kv.getEntry('a'))).toEqual(['find']);
    expect(await sent(() => kv.keys('a*'))).toEqual(['find']);
    expect(await sent(() => kv.entries())).toEqual(['find']);
    expect(await sent(() => kv.getMany(['a', 'b', 'c']))).toEqual(['find']);
    // On replica sets a batch is a transaction; the classic dialect reads the stored versions in it first.
    const inTransaction = (commands: string[]) => (kv.capabilities.transactions ? [...commands, 'commitTransaction'] : commands);
    const setMany = kv.dialect === 'classic' && kv.capabilities.transactions ? ['find', 'update'] : ['update'];
    expect(await sent(() => kv.setMany([{ key: 'b', value: '1' }, { key: 'c', value: '2', ttl: 60_000 }]))).toEqual(inTransaction(setMany));
    const { version } = (await kv.getEntry('a'))!;
    expect(await sent(() => kv.compareAndSet('a', '3', version))).toEqual(['update']);
    expect(await sent(() => kv.compareAndSet('new', '1', null))).toEqual(['update']);
    // A delete leaves a tombstone (the key's version lives on): an update.
    expect(await sent(() => kv.deleteMany(['b', 'c']))).toEqual(inTransaction(['update']));
    expect(await sent(() => kv.delete('a'))).toEqual([deleteCommand(kv.dialect)]);
    expect(await sent(() => kv.compareAndSet('a', 'again', null))).toEqual(['update']);
    expect(await sent(() => kv.clearExpired())).toEqual(['delete']);
    // Writing over an expired document is one command too: the version continues from it.
    await kv.set('short', 'x', { ttl: 1 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await sent(() => kv.set('short', 'y'))).toEqual(['update']);
    await kv.close();
  });

  it('LockProvider', async () => {
    const locks = await whenReady(new MongoLockProvider(options('rt_locks')));
    const classic = locks.dialect === 'classic';
    // The classic dialect never lets a findAndModify decide between writers (not atomic on every
    // server of that dialect). Where updates are atomic (jongodb) a grant is a compare-and-set on
    // the fence the store last saw for the key, read first when it has seen none; where they are
    // not (FerretDB 1.x) it is a conditional update, then a read of the grant.
    const readsBack = classic && locks.capabilities.atomicUpdates === false;
    const byServer = (pipeline: string[], compareAndSet: string[], readBack: string[]) => (!classic ? pipeline : readsBack ? readBack : compareAndSet);
    expect(await sent(() => locks.acquire('k', 60_000, 'owner-a'))).toEqual(byServer(['findAndModify'], ['find', 'insert'], ['update', 'find']));
    // Held: the read shows the holder (after a compare-and-set on the fence the store knows); the
    // read-back path asks a second time, to renew in case the caller is the holder.
    expect(await sent(() => locks.acquire('k', 60_000))).toEqual(byServer(['findAndModify'], ['update', 'find'], ['update', 'update']));
    expect(await sent(() => locks.acquire('k', 60_000, 'owner-b'))).toEqual(byServer(['findAndModify'], ['update', 'find'], ['update', 'update']));
    // The holder renewing: a classic update cannot both add to and keep the fence, so it is one more command.
    expect(await sent(() => locks.acquire('k', 60_000, 'owner-a'))).toEqual(byServer(['findAndModify'], ['update', 'find', 'update'], ['update', 'update', 'find']));
    expect(await sent(() => locks.extend('k', 60_000, 'owner-a'))).toEqual([classic ? 'update' : 'findAndModify']);
    expect(await sent(() => locks.release('k', 'owner-a'))).toEqual(['update']);
    let handle: Awaited<ReturnType<typeof locks.acquire>> = null;
    expect(await sent(async () => (handle = await locks.acquire('k', 60_000)))).toEqual(byServer(['findAndModify'], ['update'], ['update', 'find']));
    expect(await sent(() => handle!.isValid())).toEqual(['find']);
    expect(await sent(() => handle!.extend(60_000))).toEqual([classic ? 'update' : 'findAndModify']);
    expect(await sent(() => handle!.release())).toEqual(['update']);
    expect(await sent(() => locks.forceRelease('k'))).toEqual(['update']);
    await locks.close();
  });

  it('LockProvider: taking a free lock the store has used before is one command, releasing it one (read back only without atomic updates)', async () => {
    const locks = await whenReady(new MongoLockProvider(options('rt_lock_cycle')));
    const readsBack = locks.dialect === 'classic' && locks.capabilities.atomicUpdates === false;
    const acquire = locks.dialect === 'pipeline' ? ['findAndModify'] : readsBack ? ['update', 'find'] : ['update'];
    for (const key of ['a', 'b']) await (await locks.acquire(key, 60_000))!.release();
    let fence = 0;
    for (let cycle = 0; cycle < 3; cycle++) {
      for (const key of ['a', 'b']) {
        let handle: Awaited<ReturnType<typeof locks.acquire>> = null;
        expect(await sent(async () => (handle = await locks.acquire(key, 60_000)))).toEqual(acquire);
        if (key === 'a') {
          expect(handle!.fence).toBeGreaterThan(fence);
          fence = handle!.fence;
        }
        expect(await sent(() => handle!.release())).toEqual(['update']);
      }
    }
    await locks.close();
  });

  it('SnapshotStore and WorkflowLock', async () => {
    const store = await whenReady(mongo({ ...options('rt_snapshots'), lock: { collection: uniqueName('rt_wflocks') } }));
    const snapshot = { formatVersion: 1 as const, steps: {}, execution: { status: 'running' as const, lastUpdated: 'now' } };
    expect(await sent(() => store.save('wf', snapshot))).toEqual(['update']);
    const { version } = (await store.loadVersioned('wf'))!;
    expect(await sent(() => store.save('wf', snapshot, { expectedVersion: version }))).toEqual(['update']);
    expect(await sent(() => store.save('wf2', snapshot, { expectedVersion: null }))).toEqual(['update']);
    expect(await sent(() => store.load('wf'))).toEqual(['find']);
    expect(await sent(() => store.loadVersioned('wf'))).toEqual(['find']);
    expect(await sent(() => store.list({ limit: 10 }))).toEqual(['find']);
    expect(await sent(() => store.listPage({ limit: 1 }))).toEqual(['find']);
    expect(await sent(() => store.delete('wf2'))).toEqual([deleteCommand(store.dialect)]);
    let token = '';
    const classic = store.dialect === 'classic';
    // The classic dialect, as for LockProvider: a new key is read, then inserted (with atomic
    // updates; a key seen before is one compare-and-set), or taken, then read back (without).
    const readsBack = classic && store.capabilities.atomicUpdates === false;
    const acquire = (seen: boolean) => (!classic ? ['findAndModify'] : readsBack ? ['update', 'find'] : seen ? ['update'] : ['find', 'insert']);
    expect(await sent(async () => (token = (await store.tryAcquire('wf'))!.ownerToken))).toEqual(acquire(false));
    expect(await sent(() => store.renew('wf', token))).toEqual([classic ? 'update' : 'findAndModify']);
    expect(await sent(() => store.release('wf', token))).toEqual(['update']);
    expect(await sent(async () => (token = (await store.tryAcquire('wf'))!.ownerToken))).toEqual(acquire(true));
    expect(await sent(() => store.release('wf', token))).toEqual(['update']);
    await store.close();
  });

  it('CacheProvider', async () => {
    const cache = await whenReady(new MongoCacheProvider({ ...options('rt_cache'), prefix: 'p:' }));
    expect(await sent(() => cache.set('a', { any: ['json'] }))).toEqual(['update']);
    expect(await sent(() => cache.get('a'))).toEqual(['find']);
    expect(await sent(() => cache.has('a'))).toEqual(['find']);
    expect(await sent(() => cache.keys())).toEqual(['find']);
    expect(await sent(() => cache.getOrSet('a', async () => 1))).toEqual(['find']);
    expect(await sent(() => cache.getOrSet('b', async () => 1))).toEqual(['find', 'update']); // a miss: read, then store
    expect(await sent(() => cache.delete('a'))).toEqual(['delete']);
    expect(await sent(() => cache.clear())).toEqual(['delete']);
    expect(await sent(() => cache.clearExpired())).toEqual(['delete']);
    await cache.close();
  });

  it('CircuitBreakerStore', async () => {
    const breaker = await whenReady(new MongoCircuitBreakerStore(options('rt_circuit')));
    // Pipeline: one findAndModify. Classic: read the count, then create it or compare-and-set it
    // (uncontended: once).
    expect(await sent(() => breaker.recordFailure('svc', 3))).toEqual(byDialect(breaker.dialect, ['findAndModify'], ['find', 'insert']));
    expect(await sent(() => breaker.getState('svc'))).toEqual(['find']);
    expect(await sent(() => breaker.recordSuccess('svc'))).toEqual(['update']);
    expect(await sent(() => breaker.setState('svc', { state: 'closed', failureCount: 2 }))).toEqual(['update']);
    // The failure that opens the circuit: one pipeline command, or (classic) the count's read and
    // compare-and-set, and a conditional open.
    expect((await sent(() => breaker.recordFailure('svc', 3, { cooldown: 1_000 }))).length).toBe(byDialect(breaker.dialect, 1, 3));
    expect(await sent(() => breaker.delete('svc'))).toEqual(['delete']);
    await breaker.close();
  });

  it('CheckpointStore', async () => {
    const checkpoints = await whenReady(new MongoCheckpointStore(options('rt_checkpoints')));
    const checkpoint = (sequence: number) => ({ id: `cp${sequence}`, taskId: 't', sequence, timestamp: 0, progress: 0, data: { sequence } });
    // An upsert on (taskId, sequence): the command itself refuses a duplicate (see _save).
    expect(await sent(() => checkpoints.save(checkpoint(1)))).toEqual(['update']);
    await checkpoints.save(checkpoint(2));
    expect(await sent(() => checkpoints.load('cp1'))).toEqual(['find']);
    expect(await sent(() => checkpoints.loadLatest('t'))).toEqual(['find']);
    expect(await sent(() => checkpoints.list('t'))).toEqual(['find']);
    expect(await sent(() => checkpoints.cleanup('t', 1))).toEqual(['find', 'delete']);
    expect(await sent(() => checkpoints.deleteAll('t'))).toEqual(['delete']);
    await checkpoints.close();
  });

  it('IdempotencyStore', async () => {
    const store = await whenReady(new MongoIdempotencyStore(options('rt_idempotency')));
    let token = '';
    expect(await sent(async () => (token = ((await store.reserve('op', 60_000)) as { token: string }).token))).toEqual(['findAndModify']);
    expect(await sent(() => store.reserve('op', 60_000))).toEqual(['findAndModify']); // in flight
    expect(await sent(() => store.complete('op', token, { done: true }))).toEqual(['update']);
    expect(await sent(() => store.reserve('op', 60_000))).toEqual(['findAndModify']); // completed
    expect(await sent(() => store.get('op'))).toEqual(['find']);
    expect(await sent(() => store.set('op2', 1))).toEqual(['update']);
    expect(await sent(() => store.fail('op2', token))).toEqual(['delete']);
    expect(await sent(() => store.delete('op'))).toEqual(['delete']);
    await store.close();
  });
});
