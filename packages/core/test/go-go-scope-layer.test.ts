import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { goGoScopePersistence, type GoGoScopeCircuitBreakerProvider } from '../src/go-go-scope/index.js';

/*
 * What go-go-scope's own adapters accept where go-go-scope swallows the provider's errors
 * (a refused idempotency key silently turns idempotency off): keys of any length, fractional
 * ttls. The layer takes them; stowage's own stores stay strict.
 */

const URL_KEY = `GET https://api.example.com/v1/orders?${'item=widget&'.repeat(160)}page=1`; // 1,962 characters
const NON_ASCII_KEY = `order:${'ü'.repeat(600)}`; // 1,206 UTF-8 bytes

describe('the go-go-scope layer takes the keys and ttls go-go-scope passes', () => {
  it('idempotency and cache keys of 300 to 2,000 characters work; one over 1024 bytes is stored as its start, # and its SHA-256', async () => {
    await using persistence = goGoScopePersistence({}, { keyPrefix: 'app:' });
    for (const key of ['k'.repeat(300), 'k'.repeat(1020), URL_KEY, NON_ASCII_KEY]) {
      await persistence.idempotency.set(key, [undefined, 42], 60_000);
      expect((await persistence.idempotency.get<[undefined, number]>(key))?.value, `${key.length} characters`).toEqual([undefined, 42]);
      await persistence.cache.set(key, { n: key.length });
      expect(await persistence.cache.get(key)).toEqual({ n: key.length });
      expect(await persistence.cache.has(key)).toBe(true);
    }
    // Two long keys that differ only at the end stay apart.
    await persistence.idempotency.set(`${URL_KEY}&x=1`, 'one');
    await persistence.idempotency.set(`${URL_KEY}&x=2`, 'two');
    expect((await persistence.idempotency.get(`${URL_KEY}&x=1`))?.value).toBe('one');
    expect((await persistence.idempotency.get(`${URL_KEY}&x=2`))?.value).toBe('two');

    // The stored form: readable start, '#', base64url SHA-256 of the whole stored key, within 1024 bytes.
    const stored = (await persistence.cache.keys()).find((key) => key.startsWith('GET https://'))!;
    expect(stored).toBe(`${URL_KEY.slice(0, 980)}#${createHash('sha256').update(URL_KEY).digest('base64url')}`);
    const storedNonAscii = (await persistence.cache.keys()).find((key) => key.startsWith('order:'))!;
    expect(Buffer.byteLength(storedNonAscii)).toBeLessThanOrEqual(1024);
    expect(await persistence.stores.idempotency.get(`app:${'k'.repeat(300)}`)).not.toBeNull(); // short keys are stored as they are

    await persistence.idempotency.delete(URL_KEY);
    await persistence.cache.delete(URL_KEY);
    expect([await persistence.idempotency.get(URL_KEY), await persistence.cache.has(URL_KEY)]).toEqual([null, false]);
  });

  it('fractional ttls (computed, e.g. 1000.5) are rounded up to whole milliseconds for idempotency, cache and locks', async () => {
    await using persistence = goGoScopePersistence();
    await persistence.idempotency.set('charge', [undefined, 1], 1000.5);
    const record = await persistence.stores.idempotency.get('charge');
    expect(record?.expiresAt).toBeTypeOf('number');
    await persistence.cache.set('page', 'html', 2500.25);
    expect(await persistence.cache.get('page')).toBe('html');
    const handle = await persistence.lock.acquire('lock:exclusive:job', 30_000.5, 'worker-1');
    expect(handle).not.toBeNull();
    expect(await persistence.lock.extend('lock:exclusive:job', 10_000.1, 'worker-1')).toBe(true);
    await handle!.release();
  });

  it("the circuit-breaker provider's type has go-go-scope's optional subscribe (absent: go-go-scope reads getState)", async () => {
    await using persistence = goGoScopePersistence();
    const provider: GoGoScopeCircuitBreakerProvider = persistence.circuitBreaker;
    const unsubscribe = provider.subscribe?.('payments', () => undefined);
    expect(unsubscribe).toBeUndefined();
  });

  it("stowage's own stores stay strict: the same long key and fractional ttl are refused there", async () => {
    await using persistence = goGoScopePersistence();
    await expect(persistence.stores.idempotency.set(URL_KEY, 1)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
    await expect(persistence.stores.cache.set('k', 1, 1000.5)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
  });
});
