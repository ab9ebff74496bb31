/**
 * A short run over the in-memory adapter that reaches every place the kit publishes telemetry
 * from: store calls, coalesced batches, cache hits and misses, a lock acquisition woken by a
 * release, `withLock`, and a process item created, claimed and moved on. Run in the test
 * process and, by `off.child.mjs`, in a process of its own.
 */
import { MemoryCacheProvider, MemoryKeyValueStore, MemoryLockProvider, MemoryProcessBackend } from '../../src/memory/index.js';

export async function runWorkload(): Promise<void> {
  const kv = new MemoryKeyValueStore();
  const cache = new MemoryCacheProvider({ prefix: 'users:' });
  const locks = new MemoryLockProvider();
  const processes = new MemoryProcessBackend();
  try {
    await Promise.all([kv.set('a', '1'), kv.set('b', '2'), kv.set('c', '3')]); // one batch of three
    await Promise.all([kv.get('a'), kv.get('b')]);
    await kv.getMany(['a', 'b', 'missing']);
    await kv.compareAndSet('a', 'x', 12345).catch(() => undefined); // E_VERSION_CONFLICT

    await cache.get('1'); // miss
    await cache.set('1', { name: 'Ada' });
    await cache.get('1'); // hit
    await cache.getOrSet('2', async () => ({ name: 'Grace' })); // miss, then loaded

    const held = await locks.acquire('invoice:7', 10_000);
    const waiting = locks.acquire('invoice:7', 10_000, { wait: 10_000, pollInterval: 5_000 });
    setTimeout(() => void held!.release(), 20); // the release wakes the waiter long before its poll
    await (await waiting)!.release();
    await locks.withLock('invoice:8', () => kv.get('a'), { ttl: 10_000 });

    await processes.createItem({ process: 'orders', id: 'o-1', state: 'new', data: {} });
    const claimed = await processes.claim({ process: 'orders', itemId: 'o-1', state: 'new', version: 1, owner: 'worker-1', lease: 10_000 });
    await processes.transition({ process: 'orders', itemId: 'o-1', from: 'new', version: claimed!.version, to: 'paid', kind: 'advance', key: 'k-1' });
  } finally {
    await Promise.all([kv.close(), cache.close(), locks.close(), processes.close()]);
  }
}
