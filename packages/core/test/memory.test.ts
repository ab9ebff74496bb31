import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../src/clock.js';
import {
  MEMORY_CAPABILITIES,
  SWEEP_EVERY_WRITES,
  MemoryCacheProvider,
  MemoryCircuitBreakerStore,
  MemoryIdempotencyStore,
  MemoryKeyValueStore,
  MemoryLockProvider,
  MemoryLockingSnapshotStore,
  MemorySnapshotStore,
  createMemoryStorage,
  memory,
} from '../src/memory/index.js';

const code = async (promise: Promise<unknown> | (() => unknown)) => {
  try {
    await (typeof promise === 'function' ? promise() : promise);
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code;
  }
};

describe('memory adapter specifics', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('reports its capabilities honestly', () => {
    expect(new MemoryKeyValueStore().capabilities).toBe(MEMORY_CAPABILITIES);
    expect(MEMORY_CAPABILITIES).toMatchObject({ serverClock: true, fencing: true, wakeups: true, crossProcess: false, ttlIndex: true });
  });

  it('an injected ManualClock drives every expiry', async () => {
    const clock = new ManualClock(1_000_000);
    const storage = createMemoryStorage({ clock });
    const kv = new MemoryKeyValueStore({ storage });
    const locks = new MemoryLockProvider({ storage });
    const breaker = new MemoryCircuitBreakerStore({ storage });
    const idempotency = new MemoryIdempotencyStore({ storage });
    await kv.set('k', 'v', { ttl: 1_000 });
    const handle = await locks.acquire('lock', 1_000);
    await breaker.recordFailure('svc', 1, { cooldown: 1_000 });
    await idempotency.reserve('op', 1_000);
    expect(handle!.expiresAt.getTime()).toBe(1_001_000);
    expect((await kv.getEntry('k'))!.updatedAt.getTime()).toBe(1_000_000);
    clock.advance(999);
    expect(await kv.get('k')).toBe('v');
    expect(await locks.acquire('lock', 1_000)).toBeNull();
    expect((await breaker.getState('svc'))!.state).toBe('open');
    expect((await idempotency.reserve('op', 1_000)).status).toBe('in-flight');
    clock.advance(1);
    expect(await kv.get('k')).toBeNull();
    expect(await handle!.isValid()).toBe(false);
    expect(await locks.acquire('lock', 1_000)).not.toBeNull();
    expect((await breaker.getState('svc'))!.state).toBe('half-open');
    expect((await idempotency.reserve('op', 1_000)).status).toBe('acquired');
  });

  it('the default clock does not move when Date is mocked', async () => {
    const kv = new MemoryKeyValueStore();
    await kv.set('k', 'v', { ttl: 60_000 });
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() + 3_600_000);
    expect(await kv.get('k')).toBe('v');
    vi.setSystemTime(0);
    await kv.set('k2', 'v', { ttl: 60_000 });
    vi.useRealTimers();
    expect(await kv.get('k2')).toBe('v');
  });

  it('objects on one storage share data; separate storages are isolated', async () => {
    const storage = createMemoryStorage();
    const a = new MemoryKeyValueStore({ storage });
    const b = new MemoryKeyValueStore({ storage });
    const alone = new MemoryKeyValueStore();
    await a.set('k', 'shared');
    expect(await b.get('k')).toBe('shared');
    expect(await alone.get('k')).toBeNull();
    await a.close();
    expect(await b.get('k')).toBe('shared');
  });

  it('memory() is a snapshot store, and with lock also a WorkflowLock', async () => {
    const storage = createMemoryStorage();
    const plain = memory({ storage });
    const locking = memory({ storage, lock: { ttl: 5_000 } });
    expect(plain).toBeInstanceOf(MemorySnapshotStore);
    expect('tryAcquire' in plain).toBe(false);
    expect(locking).toBeInstanceOf(MemoryLockingSnapshotStore);
    const lease = await locking.tryAcquire('wf');
    expect(lease).not.toBeNull();
    expect(await memory({ storage, lock: true }).tryAcquire('wf')).toBeNull();
    await plain.save('wf', { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: 'now' } });
    expect(await locking.load('wf')).not.toBeNull();
  });

  it('snapshot stores with different prefixes on one storage do not see each other', async () => {
    const storage = createMemoryStorage();
    const orders = memory<{ n: number }>({ storage, prefix: 'orders:' });
    const users = memory<{ n: number }>({ storage, prefix: 'users:' });
    await orders.save('1', { n: 1 });
    expect(await users.load('1')).toBeNull();
    expect((await orders.list()).map((item) => item.id)).toEqual(['1']);
    expect(await users.list()).toEqual([]);
  });

  it('getOrSet shares loader runs within one cache object', async () => {
    const storage = createMemoryStorage();
    const cache = new MemoryCacheProvider({ storage });
    let calls = 0;
    const loader = async () => {
      calls++;
      await new Promise((resolve) => setTimeout(resolve, 20));
      return calls;
    };
    const results = await Promise.all([cache.getOrSet('k', loader), cache.getOrSet('k', loader), cache.getOrSet('other', loader)]);
    expect(results[0]).toBe(results[1]);
    expect(calls).toBe(2);
  });

  it('rejects bad options with E_INVALID_OPTION', async () => {
    expect(await code(() => new MemoryKeyValueStore({ storage: {} as never }))).toBe('E_INVALID_OPTION');
    expect(await code(() => new MemoryKeyValueStore({ clock: { now: 5 } as never }))).toBe('E_INVALID_OPTION');
    expect(await code(() => new MemoryKeyValueStore('x' as never))).toBe('E_INVALID_OPTION');
    expect(await code(() => createMemoryStorage({ clock: null as never }))).toBe('E_INVALID_OPTION');
    expect(await code(() => new MemoryCacheProvider({ prefix: 5 as never }))).toBe('E_INVALID_OPTION');
    expect(await code(() => new MemoryCacheProvider({ defaultTtl: 0 }))).toBe('E_INVALID_OPTION');
    expect(await code(() => new MemoryCacheProvider({ codec: {} as never }))).toBe('E_INVALID_OPTION');
    expect(await code(() => memory({ lock: { ttl: -1 } }))).toBe('E_INVALID_OPTION');
    expect(await code(() => memory({ prefix: null as never }))).toBe('E_INVALID_OPTION');
  });

  it('expired entries are swept during writes, so memory stays bounded without clearExpired', async () => {
    const clock = new ManualClock(0);
    const storage = createMemoryStorage({ clock });
    const kv = new MemoryKeyValueStore({ storage });
    const cache = new MemoryCacheProvider({ storage });
    await kv.setMany(Array.from({ length: 500 }, (_, i) => ({ key: `old${i}`, value: 'x', ttl: 10 })));
    await cache.set('old', 1, 10);
    clock.advance(10);
    expect(storage.kv.size).toBe(500);
    await kv.setMany(Array.from({ length: SWEEP_EVERY_WRITES - 500 }, (_, i) => ({ key: `new${i}`, value: 'x' })));
    expect(storage.kv.size).toBe(SWEEP_EVERY_WRITES - 500);
    expect(await kv.clearExpired()).toBe(0);
    expect(storage.cache.size).toBe(1); // other tables sweep on their own writes
  });

  it('the instance clock option overrides the storage clock', async () => {
    const storageClock = new ManualClock(0);
    const ownClock = new ManualClock(10_000);
    const storage = createMemoryStorage({ clock: storageClock });
    const kv = new MemoryKeyValueStore({ storage, clock: ownClock });
    await kv.set('k', 'v');
    expect((await kv.getEntry('k'))!.updatedAt.getTime()).toBe(10_000);
  });
});
