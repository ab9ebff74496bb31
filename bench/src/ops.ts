/**
 * The operations measured on every backend, written once against the core contracts. A
 * backend supplies the stowage instances (a measured one and an observed one, which may be
 * the same object) and its peers.
 */
import type { CacheProvider, KeyValueStore, LockProvider, LockingSnapshotStore } from '@stowage/core';
import { opSelected } from './config.ts';
import type { Impl, OpBench, PeerImpl } from './types.ts';
import { BATCH_SIZE, CACHE_VALUE, KeySpace, KV_VALUE, SNAPSHOT, SNAPSHOT_BYTES, cacheValue, kvValue } from './workload.ts';

export interface StowageSet {
  kv: KeyValueStore;
  snapshots: LockingSnapshotStore<object>;
  locks: LockProvider;
  cache: CacheProvider;
}

/** Peers for one operation, given its key space (a backend returns `[]` when it has none). */
export type PeersFor = (op: string, keys: KeySpace) => PeerImpl[];

const LOCK_TTL = 30_000;
/** Keys read operations cycle through (seeded once). */
const READ_SPACE = 100;
/**
 * Lock keys cycle through more keys: with 32 calls in flight a straggler would otherwise meet
 * its own key again. Should that still happen, `wait` lets the call finish instead of failing
 * (an uncontended acquisition is the same single statement with or without `wait`).
 */
const LOCK_SPACE = 256;

/** Runs `task(i)` for i < count, `parallel` at a time (seeding, not measured). */
export async function forEachParallel(count: number, parallel: number, task: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, count) }, async () => {
      for (let i = next++; i < count; i = next++) await task(i);
    }),
  );
}

async function seedKv(kv: KeyValueStore, keys: KeySpace, calls: number, perCall: number): Promise<void> {
  const writes = [];
  for (let i = 0; i < calls; i++) for (const key of keys.keysOf(i, perCall)) writes.push({ key, value: KV_VALUE });
  // chunks of 50: below any server's batch limit (see FERRETDB_UPDATE_LIMIT in backends/mongo.ts)
  for (let start = 0; start < writes.length; start += 50) await kv.setMany(writes.slice(start, start + 50));
}

/** Retries a try-once acquisition (only a straggler meeting its own key again ever needs it). */
export async function untilFree<T>(attempt: () => Promise<T | null>, key: string): Promise<T> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const lease = await attempt();
    if (lease !== null) return lease;
    if (performance.now() > deadline) throw new Error(`lock ${key} stayed busy for 10 s`);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

export interface OpsOptions {
  /** Entries per setMany call (100; a server that cannot take 100 says why in `setManyNote`). */
  setManyBatch?: number;
  /** setMany calls in flight in throughput phases (default: config.concurrency). */
  setManyConcurrency?: number;
  setManyNote?: string;
}

export function buildOps(measured: StowageSet, observed: StowageSet, peersFor: PeersFor, options: OpsOptions = {}): OpBench[] {
  const setManyBatch = options.setManyBatch ?? BATCH_SIZE;
  const ops: OpBench[] = [];
  const add = (
    name: string,
    note: string,
    keys: KeySpace,
    call: (set: StowageSet, i: number) => Promise<unknown>,
    extra: Pick<Impl, 'seed' | 'prepare'> & Pick<OpBench, 'callerValues' | 'returnsCallerValue'> & { expectedRoundTrips?: number; concurrency?: number } = {},
  ): void => {
    if (!opSelected(name)) return;
    ops.push({
      name,
      note,
      concurrency: extra.concurrency,
      expectedRoundTrips: extra.expectedRoundTrips ?? 1,
      keys,
      stowage: { name: 'stowage', kind: 'stowage', run: (i) => call(measured, i), seed: extra.seed, prepare: extra.prepare },
      observed: (i) => call(observed, i),
      peers: peersFor(name, keys),
      callerValues: extra.callerValues,
      returnsCallerValue: extra.returnsCallerValue,
    });
  };

  {
    const keys = new KeySpace('kv.get', READ_SPACE);
    add('kv.get', 'get an existing key (100 B value)', keys, (s, i) => s.kv.get(keys.key(i)), {
      seed: () => seedKv(measured.kv, keys, READ_SPACE, 1),
    });
  }
  {
    const keys = new KeySpace('kv.set', READ_SPACE);
    add('kv.set', 'upsert a 100 B value, no TTL', keys, (s, i) => s.kv.set(keys.key(i), kvValue(i)));
  }
  {
    const keys = new KeySpace('kv.delete', null);
    add('kv.delete', 'delete an existing key', keys, (s, i) => s.kv.delete(keys.key(i)), {
      prepare: (count) => seedKv(measured.kv, keys, count, 1),
    });
  }
  {
    const keys = new KeySpace('kv.exists', READ_SPACE);
    add('kv.exists', 'exists on an existing key', keys, (s, i) => s.kv.exists(keys.key(i)), {
      seed: () => seedKv(measured.kv, keys, READ_SPACE, 1),
    });
  }
  {
    const keys = new KeySpace('kv.getMany', 2);
    add('kv.getMany', `getMany of ${BATCH_SIZE} existing keys`, keys, (s, i) => s.kv.getMany(keys.keysOf(i, BATCH_SIZE)), {
      seed: () => seedKv(measured.kv, keys, 2, BATCH_SIZE),
    });
  }
  {
    const keys = new KeySpace('kv.setMany', 2);
    add(
      'kv.setMany',
      `setMany of ${setManyBatch} existing keys (100 B values)${options.setManyNote ? ` — ${options.setManyNote}` : ''}`,
      keys,
      (s, i) => s.kv.setMany(keys.keysOf(i, setManyBatch).map((key) => ({ key, value: kvValue(i) }))),
      { concurrency: options.setManyConcurrency },
    );
  }
  {
    const keys = new KeySpace('snap.save', READ_SPACE);
    add('snapshot.save', `save a ${(SNAPSHOT_BYTES / 1024).toFixed(1)} KB workflow snapshot`, keys, (s, i) => s.snapshots.save(keys.key(i), SNAPSHOT), {
      callerValues: [SNAPSHOT],
    });
  }
  {
    const space = 50;
    const keys = new KeySpace('snap.load', space);
    add('snapshot.load', `load a ${(SNAPSHOT_BYTES / 1024).toFixed(1)} KB workflow snapshot`, keys, (s, i) => s.snapshots.load(keys.key(i)), {
      seed: () => forEachParallel(space, 16, (i) => measured.snapshots.save(keys.key(i), SNAPSHOT)),
      returnsCallerValue: 'snapshot',
    });
  }
  {
    const keys = new KeySpace('lock', LOCK_SPACE);
    add(
      'lock.acquire+release',
      'acquire a free lock (ttl 30 s), then release it: two single operations',
      keys,
      async (s, i) => {
        const handle = await s.locks.acquire(keys.key(i), LOCK_TTL, { wait: 10_000 });
        if (handle === null) throw new Error(`lock ${keys.key(i)} was not free`);
        await handle.release();
      },
      { expectedRoundTrips: 2 },
    );
  }
  {
    const keys = new KeySpace('wflock', LOCK_SPACE);
    add(
      'workflowLock.tryAcquire+release',
      "the snapshot store's awaitly WorkflowLock: tryAcquire, then release",
      keys,
      async (s, i) => {
        const lease = await untilFree(() => s.snapshots.tryAcquire(keys.key(i), { ttlMs: LOCK_TTL }), keys.key(i));
        await s.snapshots.release(keys.key(i), lease.ownerToken);
      },
      { expectedRoundTrips: 2 },
    );
  }
  {
    const keys = new KeySpace('cache.get', READ_SPACE);
    add('cache.get', 'get an existing JSON value (~100 B)', keys, (s, i) => s.cache.get(keys.key(i)), {
      seed: () => forEachParallel(READ_SPACE, 16, (i) => measured.cache.set(keys.key(i), CACHE_VALUE)),
      returnsCallerValue: 'value',
    });
  }
  {
    const keys = new KeySpace('cache.set', READ_SPACE);
    add('cache.set', 'set a JSON value (~100 B), no TTL', keys, (s, i) => s.cache.set(keys.key(i), cacheValue(i)), {
      callerValues: [cacheValue(-1)],
    });
  }
  return ops;
}

/** Stands in for an adapter that is not there: every call rejects with `reason`, so peers still run. */
export function unavailableStowage(reason: string): StowageSet {
  const reject = new Proxy(
    {},
    { get: (_target, property) => (property === 'then' ? undefined : () => Promise.reject(new Error(reason))) },
  );
  return { kv: reject, snapshots: reject, locks: reject, cache: reject } as unknown as StowageSet;
}
