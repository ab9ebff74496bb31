/**
 * Peer libraries on the same servers: keyv (@keyv/postgres, @keyv/mongo) for the key-value
 * and cache operations, awaitly-mongo for snapshots and its workflow lock.
 */
import type Keyv from 'keyv';
import { forEachParallel, untilFree, type OthersFor } from './ops.ts';
import type { PeerImpl } from './types.ts';

type PeersFor = OthersFor;
import { CACHE_VALUE, KV_VALUE, SNAPSHOT, cacheValue, kvValue, type KeySpace } from './workload.ts';

/** Fills keyv's table with every key of the anchor table holding `value` (the backend knows how, fast). */
export type SeedAnchorKeys = (keyv: Keyv, value: unknown) => Promise<void>;

/** The awaitly store shape both awaitly-mongo and stowage implement. */
export interface AwaitlyStore {
  save(id: string, snapshot: never): Promise<void>;
  load(id: string): Promise<unknown>;
  tryAcquire?(id: string, options?: { ttlMs?: number }): Promise<{ ownerToken: string } | null>;
  release?(id: string, ownerToken: string): Promise<void>;
}

/**
 * keyv's get/set are the targets (stowage >= 1.0x); its other calls are shown for comparison
 * unless `targetsOnly` (on servers where they take too long to be worth the wait). The point
 * reads use the keys of the anchor table, which `seedAnchor` writes in keyv's own format.
 */
export function keyvPeers(name: string, keyv: Keyv, observed: Keyv, seedAnchor: SeedAnchorKeys, targetsOnly = false): PeersFor {
  const targeted = new Set(['kv.get', 'kv.set', 'cache.get', 'cache.set']);
  return (op: string, keys: KeySpace): PeerImpl[] => {
    if (targetsOnly && !targeted.has(op)) return [];
    const seed = (value: unknown, space: number, perCall = 1) => async () => {
      const entries: { key: string; value: unknown }[] = [];
      for (let i = 0; i < space; i++) for (const key of keys.keysOf(i, perCall)) entries.push({ key, value });
      await forEachParallel(Math.ceil(entries.length / 100), 4, (b) => keyv.setMany(entries.slice(b * 100, b * 100 + 100)));
    };
    const peer = (call: (k: Keyv, i: number) => Promise<unknown>, target: number | null, extra: Partial<PeerImpl> = {}): PeerImpl[] => [
      { name, kind: 'peer', target, run: (i) => call(keyv, i), observed: (i) => call(observed, i), ...extra },
    ];
    switch (op) {
      case 'kv.get':
        return peer((k, i) => k.get(keys.key(i)), 1, { seed: () => seedAnchor(keyv, KV_VALUE) });
      case 'kv.set':
        return peer((k, i) => k.set(keys.key(i), kvValue(i)), 1);
      case 'kv.delete':
        return peer((k, i) => k.delete(keys.key(i)), null, { prepare: (count) => seed(KV_VALUE, count)() });
      case 'kv.exists':
        return peer((k, i) => k.has(keys.key(i)), null, { seed: () => seedAnchor(keyv, KV_VALUE) });
      case 'kv.getMany':
        return peer((k, i) => k.getMany(keys.keysOf(i, 100)), null, { seed: seed(KV_VALUE, 2, 100) });
      case 'kv.setMany':
        return peer((k, i) => k.setMany(keys.keysOf(i, 100).map((key) => ({ key, value: kvValue(i) }))), null);
      case 'cache.get':
        return peer((k, i) => k.get(keys.key(i)), 1, { seed: () => seedAnchor(keyv, CACHE_VALUE) });
      case 'cache.set':
        return peer((k, i) => k.set(keys.key(i), cacheValue(i)), 1);
      default:
        return [];
    }
  };
}

/** awaitly-mongo: snapshot save/load and its WorkflowLock, compared without a target. */
export function awaitlyPeers(name: string, store: AwaitlyStore, observed: AwaitlyStore): PeersFor {
  return (op: string, keys: KeySpace): PeerImpl[] => {
    const peer = (call: (s: AwaitlyStore, i: number) => Promise<unknown>, extra: Partial<PeerImpl> = {}): PeerImpl[] => [
      { name, kind: 'peer', target: null, run: (i) => call(store, i), observed: (i) => call(observed, i), ...extra },
    ];
    switch (op) {
      case 'snapshot.save':
        return peer((s, i) => s.save(keys.key(i), SNAPSHOT as never));
      case 'snapshot.load':
        return peer((s, i) => s.load(keys.key(i)), {
          seed: () => forEachParallel(keys.space ?? 50, 16, (i) => store.save(keys.key(i), SNAPSHOT as never)),
        });
      case 'workflowLock.tryAcquire+release':
        return peer(async (s, i) => {
          const lease = await untilFree(() => s.tryAcquire!(keys.key(i), { ttlMs: 30_000 }), keys.key(i));
          await s.release!(keys.key(i), lease.ownerToken);
        });
      default:
        return [];
    }
  };
}

/** Several sources of comparisons for one backend. */
export function combinePeers(...sources: PeersFor[]): PeersFor {
  return (op, keys) => sources.flatMap((source) => source(op, keys));
}
