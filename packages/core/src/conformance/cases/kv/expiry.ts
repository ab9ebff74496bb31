/**
 * KeyValueStore cases: TTLs on the store clock, invalid TTLs, clearExpired.
 */
import { expect } from 'vitest';
import { defineCases } from '../../harness.js';
import { PAST_SHORT_TTL, SHORT_TTL, expectReject, sleep } from '../../helpers.js';

export const expiryCases = defineCases('KeyValueStore', (it) => {
  it('TTL: a key expires on the store clock and is invisible to every read', async (s) => {
    const kv = await s.kv();
    await kv.set('short', 'v', { ttl: SHORT_TTL });
    await kv.set('forever', 'v');
    expect(await kv.get('short')).toBe('v');
    const entry = await kv.getEntry('short');
    expect(entry?.expiresAt).toBeInstanceOf(Date);
    const storedTtl = entry!.expiresAt!.getTime() - entry!.updatedAt.getTime();
    expect(Math.abs(storedTtl - SHORT_TTL), `expiresAt - updatedAt = ${storedTtl}`).toBeLessThanOrEqual(5);
    await sleep(PAST_SHORT_TTL);
    expect(await kv.get('short')).toBeNull();
    expect(await kv.exists('short')).toBe(false);
    expect(await kv.getEntry('short')).toBeNull();
    expect(await kv.getMany(['short', 'forever'])).toEqual([null, 'v']);
    expect(await kv.keys()).toEqual(['forever']);
    expect((await kv.entries()).map((e) => e.key)).toEqual(['forever']);
    expect(await kv.delete('short')).toBe(false);
  });

  it('TTL: set without ttl removes an earlier expiry; set with ttl adds one', async (s) => {
    const kv = await s.kv();
    await kv.set('a', '1', { ttl: SHORT_TTL });
    await kv.set('a', '2');
    await kv.set('b', '1');
    await kv.set('b', '2', { ttl: SHORT_TTL });
    expect((await kv.getEntry('a'))?.expiresAt).toBeNull();
    await sleep(PAST_SHORT_TTL);
    expect(await kv.get('a')).toBe('2');
    expect(await kv.get('b')).toBeNull();
  });

  it('TTL: invalid ttl values reject with E_INVALID_OPTION', async (s) => {
    const kv = await s.kv();
    for (const ttl of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '100', null]) {
      await expectReject(() => kv.set('k', 'v', { ttl: ttl as never }), 'E_INVALID_OPTION', `ttl ${String(ttl)}`);
      await expectReject(() => kv.compareAndSet('k', 'v', null, { ttl: ttl as never }), 'E_INVALID_OPTION', `cas ttl ${String(ttl)}`);
    }
    expect(await kv.get('k')).toBeNull();
  });

  it('clearExpired removes expired keys and returns how many', async (s) => {
    const kv = await s.kv();
    await kv.setMany([
      { key: 'e1', value: '1', ttl: SHORT_TTL },
      { key: 'e2', value: '2', ttl: SHORT_TTL },
      { key: 'live', value: '3' },
    ]);
    expect(await kv.clearExpired()).toBe(0);
    await sleep(PAST_SHORT_TTL);
    const removed = await kv.clearExpired();
    // A backend with a TTL index may already have removed some in the background.
    if (kv.capabilities.ttlIndex) expect(removed).toBeLessThanOrEqual(2);
    else expect(removed).toBe(2);
    expect(await kv.clearExpired()).toBe(0);
    expect(await kv.keys()).toEqual(['live']);
  });
});
