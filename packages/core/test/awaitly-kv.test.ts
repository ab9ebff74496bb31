import { describe, expect, it } from 'vitest';
import { AwaitlyKeyValueStore, createStatePersistence } from '../src/index.js';
import { ManualClock } from '../src/clock.js';
import { MemoryKeyValueStore } from '../src/memory/index.js';

/** How long the entry under `key` lives, in ms, as the store recorded it (both times come from one write). */
async function lifetime(kv: MemoryKeyValueStore, key: string): Promise<number | null> {
  const entry = await kv.getEntry(key);
  return entry?.expiresAt ? entry.expiresAt.getTime() - entry.updatedAt.getTime() : null;
}

describe("AwaitlyKeyValueStore: awaitly's key-value `set` (ttl in seconds) over a stowage store (ttl in milliseconds)", () => {
  it('the same `ttl: 60` is a minute through the awaitly wrapper and 60 ms on the stowage store', async () => {
    // A clock that stands still: the 60 ms entry must not expire before it is read back.
    const store = new MemoryKeyValueStore({ clock: new ManualClock() });
    const awaitly = new AwaitlyKeyValueStore(store);
    await awaitly.set('awaitly', 'v', { ttl: 60 });
    await store.set('stowage', 'v', { ttl: 60 });
    expect(await lifetime(store, 'awaitly')).toBe(60_000);
    expect(await lifetime(store, 'stowage')).toBe(60);
    expect(await awaitly.get('awaitly')).toBe('v');
    await store.close();
  });

  it('fractions of a second round up to whole milliseconds; no ttl or 0 is no expiry; a negative or non-finite ttl is E_INVALID_OPTION', async () => {
    const store = new MemoryKeyValueStore({ clock: new ManualClock() });
    const awaitly = new AwaitlyKeyValueStore(store);
    await awaitly.set('fraction', 'v', { ttl: 1.0005 });
    expect(await lifetime(store, 'fraction')).toBe(1001);
    await awaitly.set('zero', 'v', { ttl: 0 });
    await awaitly.set('none', 'v');
    expect([await lifetime(store, 'zero'), await lifetime(store, 'none')]).toEqual([null, null]);
    for (const ttl of [-1, Number.NaN, Number.POSITIVE_INFINITY, '60' as never]) {
      await expect(awaitly.set('bad', 'v', { ttl }), String(ttl)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
    }
    expect(await awaitly.exists('bad')).toBe(false);
    await store.close();
  });

  it('get, delete, exists and keys pass through; createStatePersistence takes the wrapper as it takes the store', async () => {
    const store = new MemoryKeyValueStore();
    const awaitly = new AwaitlyKeyValueStore(store);
    const persistence = createStatePersistence(awaitly, 'custom:prefix:');
    await persistence.save('wf-1', { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: '2024-01-15T10:30:00.000Z' } });
    expect(await awaitly.keys('custom:prefix:*')).toEqual(['custom:prefix:wf-1']);
    expect(await awaitly.exists('custom:prefix:wf-1')).toBe(true);
    expect(await awaitly.delete('custom:prefix:wf-1')).toBe(true);
    expect(await persistence.load('wf-1')).toBeNull();
    await awaitly.close();
    await expect(store.get('x')).rejects.toMatchObject({ code: 'E_CLOSED' });
  });
});
