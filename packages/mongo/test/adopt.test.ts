import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { richCodec, type WorkflowSnapshot } from '@stowage/core';
import { MongoClient } from 'mongodb';
import { expect, it } from 'vitest';
import { MongoKeyValueStore, createMongoPersistence, goGoScopePersistence } from '../src/index.js';
import { awaitlyMongoCollection, awaitlyMongoSet, goGoScopeCollections, goGoScopeWriter } from './legacy.js';
import { uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * Collections written by awaitly-mongo and by go-go-scope's MongoDB adapters, created and
 * filled with the same commands those libraries send, then opened by stowage: every document
 * reads back with its value, writes work, versions and namespaces hold, a lock go-go-scope
 * holds still excludes, and two processes adopting at once do no harm.
 */
const servers = await openTestServers('stowage_adopt');

const snapshot = (status: 'running' | 'completed'): WorkflowSnapshot => ({
  formatVersion: 1,
  steps: { 'fetch-user': { ok: true, value: { id: '123', name: 'Ada' } } },
  execution: { status, lastUpdated: '2024-01-15T10:30:00.000Z' },
});
const T = Date.UTC(2024, 0, 15, 10, 30);

describeEachServer(servers, 'adopting existing collections', (s) => {
  const db = () => s.admin.db(s.database);
  const where = { url: s.url, database: s.database };

  it("awaitly-mongo's workflow_state with documents: values read back, versions start above 1, expiry holds, two processes at once", async () => {
    const name = uniqueName('workflow_state');
    const legacy = await awaitlyMongoCollection(db(), name);
    await awaitlyMongoSet(legacy, 'workflow:state:checkout-1', JSON.stringify(snapshot('running')));
    await awaitlyMongoSet(legacy, 'workflow:state:checkout-2', JSON.stringify(snapshot('completed')), 3600);
    await legacy.insertOne({ _id: 'session:old' as never, value: 'written by an older awaitly-mongo', expiresAt: null });
    await legacy.insertOne({ _id: 'session:gone' as never, value: 'expired', expiresAt: new Date(Date.now() - 60_000) });

    const [store, kv] = await Promise.all([
      createMongoPersistence({ connectionString: s.url, database: s.database, collection: name }),
      whenReady(new MongoKeyValueStore({ ...where, collection: name })),
    ]);
    try {
      expect(await store.load('checkout-1')).toEqual(snapshot('running'));
      expect(await store.load('checkout-2')).toEqual(snapshot('completed'));
      expect((await store.list()).map((item) => item.id).sort()).toEqual(['checkout-1', 'checkout-2']);
      expect(await kv.get('session:old')).toBe('written by an older awaitly-mongo');
      expect(await kv.get('session:gone')).toBeNull();
      // The legacy documents, and the one stowage adds: the record of the state prefixes in use.
      expect(await kv.keys()).toEqual(['session:old', 'workflow:state:checkout-1', 'workflow:state:checkout-2', '\u007fstowage:state-prefixes']);

      // Documents without a version read as version 1; every write takes a version above it.
      expect((await kv.getEntry('session:old'))!.version).toBe(1);
      expect(await kv.compareAndSet('session:old', 'changed', 1)).toBeGreaterThan(1);
      await expect(kv.compareAndSet('session:old', 'again', 1)).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
      await kv.delete('workflow:state:checkout-1');
      await kv.set('workflow:state:checkout-1', 'new');
      expect((await kv.getEntry('workflow:state:checkout-1'))!.version).toBeGreaterThan(1);
      const expiresAt = (await kv.getEntry('workflow:state:checkout-2'))!.expiresAt!.getTime();
      expect(Math.abs(expiresAt - (Date.now() + 3_600_000))).toBeLessThan(120_000);
      expect(await kv.clearExpired()).toBeGreaterThanOrEqual(1); // session:gone (and the tombstone of the delete, once old enough)
      expect(await legacy.countDocuments({ _id: 'session:gone' as never })).toBe(0);
    } finally {
      await Promise.all([store.close(), kv.close()]);
    }
  });

  /** go-go-scope's five collections under fresh names, filled the way its adapters write. */
  async function goGoScopeData(stem: string) {
    const names = { locks: `${stem}_locks`, circuit: `${stem}_circuit`, cache: `${stem}_cache`, idempotency: `${stem}_idempotency`, checkpoints: `${stem}_checkpoints` };
    const legacy = await goGoScopeCollections(db(), names);
    const app = goGoScopeWriter(legacy, 'myapp:');
    await app.acquire('resource:123', 60_000, 'worker-1');
    await legacy.locks.insertOne({ key: 'myapp:lock:stale', owner: 'crashed', expiresAt: new Date(Date.now() - 1000), createdAt: new Date() });
    await goGoScopeWriter(legacy, 'other:').acquire('resource:123', 60_000, 'another-app'); // another keyPrefix: not ours
    await app.setState('payments-api', { state: 'open', failureCount: 5, lastFailureTime: T });
    await app.cacheSet('user:1', { name: 'Ada', since: new Date(T) });
    await app.cacheSet('user:2', 'Grace', 600_000);
    await legacy.cache.insertOne({ key: 'myapp:cache:expired', value: 1, expiresAt: new Date(Date.now() - 1000), updatedAt: new Date() });
    // MongoDBIdempotencyAdapter with its default (no) keyPrefix, as go-go-scope's docs use it.
    await app.idempotencySet('charge:order-1', [undefined, { chargeId: 'ch_1' }], 3_600_000);
    await app.saveCheckpoint({ id: 'cp-1', taskId: 'import-42', sequence: 1, timestamp: T, progress: 10, data: { offset: 1000 } });
    await app.saveCheckpoint({ id: 'cp-2', taskId: 'import-42', sequence: 2, timestamp: T + 1, progress: 20, data: { offset: 2000 } });
    const slots = { lock: names.locks, circuitBreaker: names.circuit, cache: names.cache, idempotency: names.idempotency, checkpoint: names.checkpoints };
    return { names, legacy, slots };
  }

  /** Where the stores go: in place, or (jongodb cannot drop go-go-scope's indexes) into new collections, moved from go-go-scope's. */
  function placement(slots: Record<string, string>) {
    if (s.product !== 'jongodb') return { collections: slots };
    const moved = Object.fromEntries(Object.entries(slots).map(([slot, name]) => [slot, `${name}_stowage`]));
    return { collections: moved, adoptFrom: slots };
  }

  it("go-go-scope's collections with documents: each document in stowage's shape under the provider's key; a held lock still excludes", async () => {
    const { legacy, slots } = await goGoScopeData(uniqueName('gs'));
    if (s.product === 'jongodb') {
      const inPlace = goGoScopePersistence({ ...where, collections: slots }, { keyPrefix: 'myapp:' });
      await expect(inPlace.connect()).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringContaining('cannot drop indexes') });
      await inPlace.close();
      expect(await legacy.locks.countDocuments()).toBe(3); // nothing changed
    }
    const persistence = goGoScopePersistence({ ...where, ...placement(slots) }, { keyPrefix: 'myapp:' });
    try {
      await persistence.connect();
      const { lock, circuitBreaker, cache, idempotency, checkpoint } = persistence;
      expect(await lock.acquire('resource:123', 10_000, 'worker-2')).toBeNull(); // go-go-scope's holder still has it
      expect(await lock.extend('resource:123', 10_000, 'worker-1')).toBe(true); // and is its owner
      expect((await lock.acquire('stale', 10_000, 'worker-2'))!.fence).toBe(2); // go-go-scope's grant was the first
      expect(await circuitBreaker.getState('payments-api')).toEqual({ state: 'open', failureCount: 5, lastFailureTime: T });
      expect(await cache.get('user:1')).toEqual({ name: 'Ada', since: new Date(T) });
      expect(await cache.keys()).toEqual(['user:1', 'user:2']);
      expect(await cache.has('expired')).toBe(false);
      expect(await idempotency.get('charge:order-1')).toMatchObject({ value: [null, { chargeId: 'ch_1' }], expiresAt: expect.any(Number) });
      expect(await checkpoint.loadLatest('import-42')).toMatchObject({ id: 'cp-2', sequence: 2, timestamp: T + 1, progress: 20, data: { offset: 2000 } });
      expect((await checkpoint.list('import-42')).map((saved) => saved.id)).toEqual(['cp-1', 'cp-2']);

      // Writes work, in stowage's documents.
      await cache.set('user:3', { name: 'Linus' });
      expect(await cache.keys('user:*')).toEqual(['user:1', 'user:2', 'user:3']);
      expect(await circuitBreaker.recordFailure('payments-api', 3)).toBe(6);
      await circuitBreaker.recordSuccess('payments-api');
      await checkpoint.save({ id: 'cp-3', taskId: 'import-42', sequence: 3, timestamp: T + 2, progress: 30, data: { offset: 3000 } });
      expect((await checkpoint.loadLatest('import-42'))!.id).toBe('cp-3');

      // Only another keyPrefix's document is left in go-go-scope's shape; its unique key index is gone where it was adopted in place.
      const left = (await legacy.locks.find({}).toArray()).map((document) => document.key as unknown);
      expect(left.filter((key) => key !== undefined)).toEqual(['other:lock:resource:123']);
      for (const collection of Object.values(legacy)) expect(await collection.countDocuments({ key: { $exists: true }, _id: { $type: 'objectId' } })).toBe(collection === legacy.locks ? 1 : 0);
      if (s.product !== 'jongodb') {
        const indexes = (await legacy.locks.listIndexes().toArray()).map((index) => index.name);
        expect(indexes).not.toContain('key_1');
        expect(indexes).not.toContain('expiresAt_1');
      }
    } finally {
      await persistence.close();
    }
  });

  it('two processes adopting the same go-go-scope collections at once convert every document once', async () => {
    const { legacy, slots } = await goGoScopeData(uniqueName('gs2'));
    // What 1,200 of go-go-scope's cache.set calls leave (more than one batch of the adoption).
    await legacy.cache.insertMany(Array.from({ length: 1200 }, (_, i) => ({ key: `myapp:cache:bulk:${i}`, value: { i }, expiresAt: null, updatedAt: new Date() })));
    const clients = [new MongoClient(s.url), new MongoClient(s.url)];
    const persistences = clients.map((client) => goGoScopePersistence({ client, database: s.database, ...placement(slots) }, { keyPrefix: 'myapp:' }));
    try {
      await Promise.all(persistences.map((persistence) => persistence.connect()));
      for (const persistence of persistences) {
        expect(await persistence.cache.get('bulk:1199')).toEqual({ i: 1199 });
        expect(await persistence.lock.acquire('resource:123', 10_000, 'worker-2')).toBeNull();
      }
      const keys = await persistences[0]!.cache.keys('bulk:*');
      expect(keys).toHaveLength(1200);
      expect(await legacy.cache.countDocuments({ key: { $exists: true } })).toBe(0);
    } finally {
      await Promise.all(persistences.map((persistence) => persistence.close()));
      await Promise.all(clients.map((client) => client.close()));
    }
  });

  it('an adoption that finds some documents converted already (a crash between copy and delete) converts every other one', async () => {
    const { legacy, slots } = await goGoScopeData(uniqueName('gs4'));
    await legacy.cache.insertMany(Array.from({ length: 300 }, (_, i) => ({ key: `myapp:cache:bulk:${i}`, value: { i }, expiresAt: null, updatedAt: new Date() })));
    // As a crashed adoption leaves it: a few converted documents in stowage's collection, their originals still there.
    const target = db().collection<{ _id: string; value: string }>(placement(slots).collections.cache!);
    await target.insertMany([5, 150, 299].map((i) => ({ _id: `myapp:\u0000bulk:${i}`, value: richCodec.encode({ i }) })));
    const persistence = goGoScopePersistence({ ...where, ...placement(slots) }, { keyPrefix: 'myapp:' });
    try {
      await persistence.connect();
      expect(await persistence.cache.keys('bulk:*')).toHaveLength(300);
      expect(await persistence.cache.get('bulk:151')).toEqual({ i: 151 });
      expect(await legacy.cache.countDocuments({ key: { $exists: true } })).toBe(0);
    } finally {
      await persistence.close();
    }
  });

  it('an adoption SIGKILLed at random points, then run to the end, loses no checkpoint', { timeout: 60_000 }, async () => {
    const { legacy, slots } = await goGoScopeData(uniqueName('gs5'));
    // 1,500 checkpoints (three batches of the adoption) of 20 tasks.
    const total = 1500;
    await legacy.checkpoints.insertMany(
      Array.from({ length: total }, (_, i) => ({
        id: `k-${i}`,
        taskId: `task-${i % 20}`,
        sequence: 10 + Math.floor(i / 20),
        timestamp: T + i,
        progress: i % 100,
        data: { i },
        createdAt: new Date(),
      })),
    );
    const options = placement(slots);
    const originals = () => legacy.checkpoints.countDocuments({ _id: { $type: 'objectId' } });
    // Each run is killed once the adoption has deleted originals down to a random count (seen
    // by polling the collection: a point in the adoption's progress, not a moment in time).
    const kills: string[] = [];
    for (let round = 0; round < 3; round++) {
      const left = await originals();
      if (left === 0) break;
      const killAt = Math.floor(Math.random() * left);
      const child = spawnAdoption(s, options);
      await lineFrom(child, 'adopting');
      while (child.exitCode === null && (await originals()) > killAt) await new Promise((resolve) => setTimeout(resolve, 5));
      child.kill('SIGKILL');
      await exited(child);
      kills.push(`${left} -> killed below ${killAt}`);
    }
    const last = spawnAdoption(s, options);
    await lineFrom(last, 'adopted');
    expect(await exited(last)).toBe(0);
    console.log(`[adoption kill test, ${s.label}] originals left: ${kills.join('; ')}`);

    expect(await originals()).toBe(0);
    const target = db().collection(options.collections.checkpoint!);
    expect(await target.countDocuments({ _id: { $type: 'string' }, taskId: { $exists: true } })).toBe(total + 2); // and goGoScopeData's two
    expect(await db().collection(`${slots.checkpoint}_adopting`).countDocuments()).toBe(0);
    const persistence = goGoScopePersistence({ ...where, ...options }, { keyPrefix: 'myapp:' });
    try {
      expect((await persistence.checkpoint.list('task-7')).map((checkpoint) => checkpoint.sequence)).toEqual(Array.from({ length: total / 20 }, (_, i) => 10 + i));
      expect((await persistence.checkpoint.load(`k-${total - 1}`))!.data).toEqual({ i: total - 1 });
    } finally {
      await persistence.close();
    }
  });

  it('a go-go-scope document of a shape stowage does not know refuses the start, and nothing is changed', async () => {
    const { legacy, slots } = await goGoScopeData(uniqueName('gs3'));
    await legacy.locks.insertOne({ key: 'myapp:lock:odd', owner: 'w', expiresAt: new Date(), tenant: 'acme' });
    const indexesBefore = (await legacy.locks.listIndexes().toArray()).map((index) => index.name).sort();
    const persistence = goGoScopePersistence({ ...where, ...placement(slots) }, { keyPrefix: 'myapp:' });
    try {
      await expect(persistence.connect()).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringMatching(/unrecognised field\(s\) tenant.*nothing was changed/) });
      expect((await legacy.locks.listIndexes().toArray()).map((index) => index.name).sort()).toEqual(indexesBefore);
      expect(await legacy.locks.countDocuments({ _id: { $type: 'objectId' } })).toBe(4);
    } finally {
      await persistence.close();
    }
  });
});

const ADOPT_WORKER = fileURLToPath(new URL('./adopt-worker.ts', import.meta.url));

/** Starts adopt-worker.ts as an OS process adopting with `options` (goGoScopePersistence's collections and adoptFrom). */
function spawnAdoption(server: { url: string; database: string }, options: object): ChildProcess {
  return spawn(process.execPath, [ADOPT_WORKER], {
    env: { ...process.env, STOWAGE_WORKER_URL: server.url, STOWAGE_WORKER_DATABASE: server.database, STOWAGE_WORKER_OPTIONS: JSON.stringify(options) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}

/** Resolves once `child` printed `line` (rejects if it exits first). */
function lineFrom(child: ChildProcess, line: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.split('\n').includes(line)) resolve();
    });
    child.once('exit', (code, signal) => reject(new Error(`adoption process exited (${code ?? signal}) before printing ${line}: ${output}`)));
  });
}

/** The exit code of `child` once it has exited (`null` when a signal ended it). */
async function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
  return child.exitCode;
}
