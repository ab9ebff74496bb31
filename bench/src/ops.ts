/**
 * The operations measured on every backend, written once against the core contracts. A
 * backend supplies the stowage instances (a measured one and an observed one, which may be
 * the same object), the anchor tables the point operations use, and what each operation is
 * compared with besides the replay of stowage's own statements.
 */
import type { CacheProvider, KeyValueStore, LockProvider, LockingSnapshotStore } from '@stowage/core';
import { opSelected } from './config.ts';
import type { Impl, OpBench } from './types.ts';
import { AnchorKeys, BATCH_SIZE, CACHE_VALUE, KeySpace, KV_VALUE, SNAPSHOT, SNAPSHOT_BYTES, cacheValue, kvValue } from './workload.ts';

export interface StowageSet {
  kv: KeyValueStore;
  snapshots: LockingSnapshotStore<object>;
  locks: LockProvider;
  cache: CacheProvider;
}

/** The key-value store and cache on the anchor tables (filled with `AnchorKeys.rows` keys). */
export interface AnchorStores {
  kv: KeyValueStore;
  cache: CacheProvider;
}

/**
 * The point operations compared with the outside world: `kv.get`, `kv.exists` and
 * `cache.get` read, and `kv.set` and `cache.set` write, keys drawn at random from tables of
 * `keys.rows` rows, the tables the anchor (`pgbench -S`, a raw `find`) reads too.
 */
export interface AnchoredStores {
  keys: AnchorKeys;
  measured: AnchorStores;
  /** The same stores with `coalesce: false`. */
  variant: AnchorStores;
  observed: AnchorStores;
  variantObserved: AnchorStores;
}

/** Everything one operation is compared with besides the replay (a backend returns `[]` when it has none). */
export type OthersFor = (op: string, keys: KeySpace) => Impl[];

/** stowage/replay throughput of the operations without an outside comparison: the client's overhead. */
export const REPLAY_TARGET = 0.9;
/** The point reads: stowage with 32 in flight against the raw driver's single statements, and against the anchor. */
export const READ_TARGETS = { raw: 3, anchor: 1.5 };
/** The point writes against the raw driver's single statements. */
export const WRITE_TARGETS = { raw: 2.5 };
/** A lone sequential call's p50 against the raw single statement's p50. */
export const LONE_CALL_LATENCY_TARGET = 1.1;

const LOCK_TTL = 30_000;
/** Keys read operations without an anchor table cycle through (seeded once). */
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

/** Writes KV_VALUE at `keys` of the measured key-value store (not measured). */
export type SeedKeys = (keys: string[]) => Promise<void>;

function seedKvWith(kv: KeyValueStore, seedKeys: SeedKeys | undefined) {
  return async (keys: KeySpace, calls: number, perCall: number): Promise<void> => {
    const all: string[] = [];
    for (let i = 0; i < calls; i++) all.push(...keys.keysOf(i, perCall));
    if (seedKeys) return seedKeys(all);
    // chunks of 50: below any server's batch limit (see FERRETDB_UPDATE_LIMIT in backends/mongo.ts)
    for (let start = 0; start < all.length; start += 50) await kv.setMany(all.slice(start, start + 50).map((key) => ({ key, value: KV_VALUE })));
  };
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
  /**
   * A faster way to create the keys `kv.delete` and `kv.getMany` need than stowage's
   * `setMany` (FerretDB takes ~50 ms per versioned upsert: seeding would take most of the run).
   */
  seedKeys?: SeedKeys;
  /**
   * The lock operations' replay has no target: set where a grant is a compare-and-set on the
   * fence the store last saw (the classic Mongo dialect with atomic updates). The replayed
   * command carries the fence of the captured call, so on the other keys it matches nothing
   * and the replay measures no-ops; the `raw` row is the comparison there.
   */
  lockReplayWithoutTarget?: boolean;
}

export function buildOps(measured: StowageSet, observed: StowageSet, anchored: AnchoredStores, othersFor: OthersFor, options: OpsOptions = {}): OpBench[] {
  const setManyBatch = options.setManyBatch ?? BATCH_SIZE;
  const seedKv = seedKvWith(measured.kv, options.seedKeys);
  const ops: OpBench[] = [];
  type Extra = Pick<Impl, 'seed' | 'prepare'> &
    Pick<OpBench, 'callerValues' | 'returnsCallerValue' | 'latencyTarget' | 'captureSecondCall'> & {
      replayTarget?: number | null;
      expectedRoundTrips?: number;
      concurrency?: number;
    };
  const add = (name: string, note: string, keys: KeySpace, call: (set: StowageSet, i: number) => Promise<unknown>, extra: Extra = {}): void => {
    if (!opSelected(name)) return;
    ops.push({
      name,
      note,
      concurrency: extra.concurrency,
      expectedRoundTrips: extra.expectedRoundTrips ?? 1,
      keys,
      stowage: { name: 'stowage', kind: 'stowage', run: (i) => call(measured, i), seed: extra.seed, prepare: extra.prepare },
      observed: (i) => call(observed, i),
      others: othersFor(name, keys),
      replayTarget: extra.replayTarget === undefined ? REPLAY_TARGET : extra.replayTarget,
      latencyTarget: extra.latencyTarget,
      callerValues: extra.callerValues,
      returnsCallerValue: extra.returnsCallerValue,
      captureSecondCall: extra.captureSecondCall,
    });
  };
  /**
   * An anchored point operation: stowage (coalescing), stowage with `coalesce: false`, and
   * the others; the replay is shown without a target (its single statement is the floor of a
   * lone call, which the latency target covers).
   */
  const addAnchored = (
    name: string,
    note: string,
    call: (stores: AnchorStores, i: number) => Promise<unknown>,
    extra: Pick<OpBench, 'callerValues' | 'returnsCallerValue'> = {},
  ): void => {
    if (!opSelected(name)) return;
    const keys = anchored.keys;
    const variant: Impl = {
      name: 'stowage coalesce:false',
      kind: 'variant',
      target: null,
      run: (i) => call(anchored.variant, i),
      observed: (i) => call(anchored.variantObserved, i),
    };
    ops.push({
      name,
      note,
      expectedRoundTrips: 1,
      keys,
      stowage: { name: 'stowage', kind: 'stowage', run: (i) => call(anchored.measured, i) },
      observed: (i) => call(anchored.observed, i),
      others: [variant, ...othersFor(name, keys)],
      replayTarget: null,
      latencyTarget: LONE_CALL_LATENCY_TARGET,
      ...extra,
    });
  };

  const rows = anchored.keys.rows.toLocaleString('en-US');
  addAnchored('kv.get', `get a random key of ${rows} (100 B value)`, (s, i) => s.kv.get(anchored.keys.key(i)));
  addAnchored('kv.exists', `exists on a random key of ${rows}`, (s, i) => s.kv.exists(anchored.keys.key(i)));
  addAnchored('cache.get', `get a random key of ${rows} (~100 B JSON value)`, (s, i) => s.cache.get(anchored.keys.key(i)), {
    returnsCallerValue: 'value',
  });
  addAnchored('kv.set', `upsert a random key of ${rows} (100 B value, no TTL)`, (s, i) => s.kv.set(anchored.keys.key(i), kvValue(i)));
  addAnchored('cache.set', `set a random key of ${rows} (~100 B JSON value, no TTL)`, (s, i) => s.cache.set(anchored.keys.key(i), cacheValue(i)), {
    callerValues: [cacheValue(-1)],
  });
  {
    const keys = new KeySpace('kv.delete', null);
    add('kv.delete', 'delete an existing key', keys, (s, i) => s.kv.delete(keys.key(i)), {
      prepare: (count) => seedKv(keys, count, 1),
    });
  }
  {
    const keys = new KeySpace('kv.getMany', 2);
    add('kv.getMany', `getMany of ${BATCH_SIZE} existing keys`, keys, (s, i) => s.kv.getMany(keys.keysOf(i, BATCH_SIZE)), {
      seed: () => seedKv(keys, 2, BATCH_SIZE),
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
      // Every key is taken again after the first lap of LOCK_SPACE: that call is the one replayed.
      { expectedRoundTrips: 2, captureSecondCall: true, ...(options.lockReplayWithoutTarget && { replayTarget: null }) },
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
      { expectedRoundTrips: 2, captureSecondCall: true, ...(options.lockReplayWithoutTarget && { replayTarget: null }) },
    );
  }
  return ops;
}

/** The value every anchor-table key holds, per table: what the anchored reads read. */
export const ANCHOR_VALUES = { kv: KV_VALUE, cache: CACHE_VALUE };

/** Stands in for an adapter that is not there: every call rejects with `reason`, so the others still run. */
export function unavailableStowage(reason: string): StowageSet {
  const reject = new Proxy(
    {},
    { get: (_target, property) => (property === 'then' ? undefined : () => Promise.reject(new Error(reason))) },
  );
  return { kv: reject, snapshots: reject, locks: reject, cache: reject } as unknown as StowageSet;
}
