/**
 * A short, deterministic run over one backend's stores: key-value calls (three concurrent
 * sets the kit sends as one statement, a batch read, a compare-and-set that conflicts), cache
 * misses and hits, a lock acquisition that waits in line until the holder's release wakes it, a
 * renewal by an owner that holds nothing (a lost lease), `withLock`, and a process item
 * created, claimed and advanced. Keys and values carry an e-mail address and a card number:
 * the test checks that neither reaches any exported span or metric.
 */
import type { CacheProvider, KeyValueStore, LockProvider, ProcessBackend } from '@stowage/core';

export interface Stores {
  kv: KeyValueStore;
  cache: CacheProvider;
  locks: LockProvider;
  processes: ProcessBackend;
}

/** What must never appear in telemetry (part of every key and value the run writes). */
export const SECRET_KEY_PART = 'alice@example.com';
export const SECRET_VALUE_PART = '4242-4242-4242-4242';

export async function runWorkload(stores: Stores, run: string): Promise<void> {
  const { kv, cache, locks, processes } = stores;
  const key = (name: string) => `${run}:${name}:${SECRET_KEY_PART}`;
  const value = (name: string) => `${name} card ${SECRET_VALUE_PART}`;

  // Three concurrent sets of one tick: one statement (stowage.batch.size 3), three spans.
  await Promise.all(['a', 'b', 'c'].map((name) => kv.set(key(name), value(name))));
  await kv.get(key('a'));
  await kv.getMany([key('a'), key('b'), key('missing')]);
  const conflict = await kv.compareAndSet(key('a'), value('a2'), 999_999_999).catch((error: unknown) => error);
  if (!(conflict instanceof Error)) throw new Error('the compare-and-set was expected to conflict');

  await cache.get(key('profile')); // miss
  await cache.set(key('profile'), { card: value('profile') });
  await cache.get(key('profile')); // hit
  await cache.getOrSet(key('rates'), async () => ({ usd: 1.08 })); // miss, then loaded

  // A hand-off in the provider's line: the holder and the waiter ask in the same tick, so the
  // waiter queues behind the holder (it never tries while the lock is held). The holder's
  // release hands the lock on and wakes the waiter, on every backend and long before its
  // 60-second poll: one hand-off wake-up.
  const holding = locks.acquire(key('invoice'), 30_000, { wait: 30_000 });
  const waiter = locks.acquire(key('invoice'), 30_000, { wait: 30_000, pollInterval: 60_000 });
  const held = await holding;
  if (held === null) throw new Error('the lock was expected to be free');
  await held.release();
  const handedOver = await waiter;
  if (handedOver === null) throw new Error('the waiter was expected to get the lock');
  await handedOver.release();
  // Renewing a lease one does not hold finds it gone: a lost lease.
  if (await locks.extend(key('invoice'), 30_000, 'an-owner-that-holds-nothing')) throw new Error('the extension was expected to fail');
  await locks.withLock(key('report'), () => kv.get(key('b')), { ttl: 30_000 });

  await processes.createItem({ process: 'orders', id: key('order'), state: 'new', data: {} });
  const claimed = await processes.claim({ process: 'orders', itemId: key('order'), state: 'new', version: 1, owner: `${run}-worker`, lease: 30_000 });
  if (claimed === null) throw new Error('the item was expected to be claimable');
  await processes.transition({ process: 'orders', itemId: key('order'), from: 'new', version: claimed.version, to: 'paid', kind: 'advance', key: key('t1') });
}
