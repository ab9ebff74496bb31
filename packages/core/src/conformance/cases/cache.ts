import { expect } from 'vitest';
import { escapeGlob } from '../../glob.js';
import { richCodec } from '../../json.js';
import { compareKeys } from '../../keys.js';
import { defineCases } from '../harness.js';
import {
  CLIENT_SKEWS,
  HOSTILE_KEYS,
  INVALID_KEYS,
  JSON_VALUES,
  NON_JSON_VALUES,
  PAST_SHORT_TTL,
  SHORT_TTL,
  expectReject,
  lookalikeErrors,
  parallel,
  richValue,
  sleep,
  withClientSkew,
  withinShortTtl,
} from '../helpers.js';

export const cacheCases = defineCases('CacheProvider', (it) => {
  it('set, get, has and delete; a missing key reads null', async (s) => {
    const cache = await s.cache({ prefix: 'c:' });
    expect(await cache.get('missing')).toBeNull();
    expect(await cache.has('missing')).toBe(false);
    await cache.set('user:1', { name: 'Ada' });
    expect(await cache.get('user:1')).toStrictEqual({ name: 'Ada' });
    expect(await cache.has('user:1')).toBe(true);
    await cache.set('user:1', { name: 'Grace' });
    expect(await cache.get('user:1')).toStrictEqual({ name: 'Grace' });
    await cache.delete('user:1');
    await cache.delete('user:1');
    expect(await cache.has('user:1')).toBe(false);
  });

  it('calls made together on one key take effect in the order they were made', async (s) => {
    const cache = await s.cache();
    for (let round = 0; round < 10; round++) {
      const key = `ordered:${round}`;
      const outcomes = await Promise.all([
        cache.get(key),
        cache.set(key, { v: 'a' }),
        cache.has(key),
        cache.get(key),
        cache.delete(key),
        cache.has(key),
        cache.set(key, { v: 'b' }),
        cache.get(key),
      ]);
      expect(outcomes, `round ${round}`).toEqual([null, undefined, true, { v: 'a' }, undefined, false, undefined, { v: 'b' }]);
    }
  });

  it('every JSON value round-trips identically', async (s) => {
    const cache = await s.cache();
    await parallel(JSON_VALUES.length, (i) => cache.set(`v${i}`, JSON_VALUES[i]![1]));
    for (const [i, [label, value]] of JSON_VALUES.entries()) {
      expect(await cache.get(`v${i}`), label).toStrictEqual(value);
    }
  });

  it('-0 is stored as 0 (JSON has no negative zero)', async (s) => {
    const cache = await s.cache();
    await cache.set('zero', -0);
    await cache.set('nested', { z: [-0] });
    expect(Object.is(await cache.get('zero'), 0)).toBe(true);
    expect(Object.is((await cache.get<{ z: number[] }>('nested'))!.z[0], 0)).toBe(true);
  });

  it('a cached null is a value: has is true, getOrSet does not call the loader', async (s) => {
    const cache = await s.cache();
    await cache.set('nothing', null);
    expect(await cache.has('nothing')).toBe(true);
    expect(await cache.get('nothing')).toBeNull();
    let calls = 0;
    expect(await cache.getOrSet('nothing', async () => (calls++, 'loaded'))).toBeNull();
    expect(calls).toBe(0);
  });

  it('non-JSON values reject with E_INVALID_VALUE without a codec and store nothing', async (s) => {
    const cache = await s.cache();
    for (const [label, value] of NON_JSON_VALUES) {
      await expectReject(() => cache.set('bad', value), 'E_INVALID_VALUE', `set(${label})`);
    }
    await expectReject(() => cache.getOrSet('bad', async () => new Date()), 'E_INVALID_VALUE', 'getOrSet loading a Date');
    expect(await cache.has('bad')).toBe(false);
  });

  it('richCodec round-trips Date, BigInt and Uint8Array', async (s) => {
    const cache = await s.cache({ codec: richCodec });
    await cache.set('rich', richValue());
    expect(await cache.get('rich')).toStrictEqual(richValue());
    expect(await cache.getOrSet('loaded', async () => richValue())).toStrictEqual(richValue());
    expect(await cache.get('loaded')).toStrictEqual(richValue());
  });

  it('values are copies: mutating what was set or got changes nothing stored', async (s) => {
    const cache = await s.cache();
    const value = { list: [1, 2], nested: { a: 1 } };
    await cache.set('k', value);
    value.list.push(3);
    value.nested.a = 99;
    const first = await cache.get<typeof value>('k');
    first!.list.push(4);
    expect(await cache.get('k')).toStrictEqual({ list: [1, 2], nested: { a: 1 } });
    const loaded = await cache.getOrSet('g', async () => ({ n: 1 }));
    loaded.n = 2;
    expect(await cache.get('g')).toStrictEqual({ n: 1 });
  });

  it('TTL: entries expire on the store clock; defaultTtl applies when set has none', async (s) => {
    const cache = await s.cache({ prefix: 'ttl:' });
    const withDefault = await s.cache({ prefix: 'default:', defaultTtl: SHORT_TTL });
    await cache.set('forever', 2);
    await withDefault.set('explicit-long', 4, 60_000);
    const run = await withinShortTtl(async (run) => {
      await cache.set(`short:${run}`, 1, SHORT_TTL);
      await withDefault.set(`by-default:${run}`, 3);
      expect(await cache.get(`short:${run}`)).toBe(1);
      expect(await withDefault.get(`by-default:${run}`)).toBe(3);
      return run;
    });
    await sleep(PAST_SHORT_TTL);
    expect(await cache.get(`short:${run}`)).toBeNull();
    expect(await cache.has(`short:${run}`)).toBe(false);
    expect(await cache.keys()).toEqual(['forever']);
    expect(await withDefault.get(`by-default:${run}`)).toBeNull();
    expect(await withDefault.get('explicit-long')).toBe(4);
  });

  it('TTL: invalid ttl values reject with E_INVALID_OPTION', async (s) => {
    const cache = await s.cache();
    for (const ttl of [0, -1, 1.5, Number.NaN, '100']) {
      await expectReject(() => cache.set('k', 1, ttl as never), 'E_INVALID_OPTION', `ttl ${String(ttl)}`);
    }
    expect(await cache.has('k')).toBe(false);
  });

  it('clearExpired removes expired entries and returns how many', async (s) => {
    const cache = await s.cache({ prefix: 'x:' });
    await cache.set('e1', 1, SHORT_TTL);
    await cache.set('e2', 2, SHORT_TTL);
    await cache.set('live', 3);
    await sleep(PAST_SHORT_TTL);
    const removed = await cache.clearExpired();
    if (cache.capabilities.ttlIndex) expect(removed).toBeLessThanOrEqual(2);
    else expect(removed).toBe(2);
    expect(await cache.keys()).toEqual(['live']);
  });

  it('clear removes only this prefix, even when prefixes contain _ % * or .', async (s) => {
    const prefixes = ['app_1:', 'appX1:', 'app%1:', 'app*1:', 'app.1:', 'app_1:sub:'];
    const caches = await Promise.all(prefixes.map((prefix) => s.cache({ prefix })));
    await parallel(caches.length, (i) => caches[i]!.set('k', prefixes[i]));
    await caches[0]!.clear();
    expect(await caches[0]!.has('k')).toBe(false);
    for (const i of [1, 2, 3, 4, 5]) expect(await caches[i]!.get('k'), prefixes[i]).toBe(prefixes[i]);
    await caches[3]!.clear();
    for (const i of [1, 2, 4, 5]) expect(await caches[i]!.get('k'), prefixes[i]).toBe(prefixes[i]);
  });

  it('a prefix is a namespace: a cache never sees, lists, clears or overwrites the entries of a prefix that extends it', async (s) => {
    const outer = await s.cache({ prefix: 'users:' });
    const inner = await s.cache({ prefix: 'users:admin:' });
    await inner.set('1', 'inner');
    await outer.set('admin:1', 'outer');
    expect(await inner.get('1')).toBe('inner');
    expect(await outer.get('admin:1')).toBe('outer');
    expect(await outer.keys()).toEqual(['admin:1']);
    expect(await inner.keys()).toEqual(['1']);
    expect(await outer.keys('admin:*')).toEqual(['admin:1']);
    await outer.clear();
    expect(await inner.get('1')).toBe('inner');
    await inner.set('2', 'x', SHORT_TTL);
    await sleep(PAST_SHORT_TTL);
    expect(await outer.clearExpired()).toBe(0);
    expect(await inner.clearExpired()).toBe(1);
    const unprefixed = await s.cache();
    await unprefixed.set('users:admin:1', 'unprefixed');
    expect(await inner.get('1')).toBe('inner');
    expect(await unprefixed.keys()).toEqual(['users:admin:1']);
  });

  it('prefixes are validated like keys (E_INVALID_OPTION): no lone surrogates, no U+0000', async (s) => {
    for (const prefix of ['\ud800', 'a\udc00b', 'a\u0000b', 5]) {
      await expectReject(() => s.cache({ prefix: prefix as never }), 'E_INVALID_OPTION', `prefix ${JSON.stringify(prefix)}`);
    }
  });

  it('keys lists keys without the prefix, in order, matching globs literally', async (s) => {
    const cache = await s.cache({ prefix: 'p_x:' });
    const neighbour = await s.cache({ prefix: 'pXx:' });
    const keys = ['user:1', 'user:2', 'user_3', 'userX3', 'user%4', 'post.1', 'a*b', 'aXb'];
    await parallel(keys.length, (i) => cache.set(keys[i]!, i));
    await neighbour.set('user:9', 9);
    expect(await cache.keys()).toEqual([...keys].sort(compareKeys));
    expect(await cache.keys('user:*')).toEqual(['user:1', 'user:2']);
    expect(await cache.keys('user_3')).toEqual(['user_3']);
    expect(await cache.keys('user%4')).toEqual(['user%4']);
    expect(await cache.keys('user?3')).toEqual(['userX3', 'user_3'].sort(compareKeys));
    expect(await cache.keys('post.*')).toEqual(['post.1']);
    expect(await cache.keys('a\\*b')).toEqual(['a*b']);
    expect(await cache.keys('p_x:*')).toEqual([]);
    expect(await neighbour.keys()).toEqual(['user:9']);
  });

  it('keys takes a RegExp as a regular expression (go-go-scope style); a string stays a glob', async (s) => {
    const cache = await s.cache({ prefix: 're:' });
    await parallel(4, (i) => cache.set(['user:1', 'user:22', 'users', 'post:1'][i]!, i));
    expect(await cache.keys(/^user:\d+$/)).toEqual(['user:1', 'user:22']);
    expect(await cache.keys(/user/g)).toEqual(['user:1', 'user:22', 'users']);
    expect(await cache.keys('user:.*')).toEqual([]);
    expect(await cache.keys('user:*')).toEqual(['user:1', 'user:22']);
  });

  it('scan streams the keys keys() lists, page by page, of this prefix only', async (s) => {
    const cache = await s.cache({ prefix: 'scan:' });
    const neighbour = await s.cache({ prefix: 'scan:x' });
    const keys = Array.from({ length: 12 }, (_, i) => `k${String(i).padStart(2, '0')}`);
    await parallel(keys.length, (i) => cache.set(keys[i]!, i));
    await neighbour.set('k00', 'not mine');
    const scanned: string[] = [];
    for await (const key of cache.scan('k*', { pageSize: 5 })) scanned.push(key);
    expect(scanned).toEqual(keys);
    expect(await cache.keys('k*')).toEqual(keys);
  });

  it('hostile keys round-trip and list as themselves; invalid keys reject with E_INVALID_KEY', async (s) => {
    const cache = await s.cache({ prefix: 'h:' });
    await parallel(HOSTILE_KEYS.length, (i) => cache.set(HOSTILE_KEYS[i]!, i));
    for (const [i, key] of HOSTILE_KEYS.entries()) {
      expect(await cache.get(key), JSON.stringify(key)).toBe(i);
      expect(await cache.keys(escapeGlob(key)), JSON.stringify(key)).toEqual([key]);
    }
    for (const [label, key] of INVALID_KEYS) {
      await expectReject(() => cache.get(key as string), 'E_INVALID_KEY', `get(${label})`);
      await expectReject(() => cache.set(key as string, 1), 'E_INVALID_KEY', `set(${label})`);
      await expectReject(() => cache.has(key as string), 'E_INVALID_KEY', `has(${label})`);
      await expectReject(() => cache.delete(key as string), 'E_INVALID_KEY', `delete(${label})`);
      await expectReject(() => cache.getOrSet(key as string, async () => 1), 'E_INVALID_KEY', `getOrSet(${label})`);
    }
  });

  it('getOrSet: concurrent calls in one process share one loader run', async (s) => {
    const cache = await s.cache();
    let calls = 0;
    const loader = async () => {
      calls++;
      await sleep(100);
      return { loaded: true };
    };
    const results = await parallel(10, () => cache.getOrSet('k', loader, 60_000));
    expect(calls).toBe(1);
    for (const result of results) expect(result).toStrictEqual({ loaded: true });
    expect(await cache.getOrSet('k', loader)).toStrictEqual({ loaded: true });
    expect(calls).toBe(1);
    expect(await cache.get('k')).toStrictEqual({ loaded: true });
  });

  it('getOrSet: a rejecting loader stores nothing and the next call loads again', async (s) => {
    const cache = await s.cache();
    const failure = new Error('loader failed');
    const failing = parallel(3, () => cache.getOrSet('k', async () => Promise.reject(failure)));
    await expect(failing).rejects.toBe(failure);
    expect(await cache.has('k')).toBe(false);
    expect(await cache.getOrSet('k', async () => 'second try')).toBe('second try');
    expect(await cache.get('k')).toBe('second try');
  });

  it("getOrSet: the loader's own error reaches the caller unchanged, even one that looks like a database's", async (s) => {
    const cache = await s.cache();
    for (const [label, error] of lookalikeErrors()) {
      await expect(cache.getOrSet('k', () => Promise.reject(error)), label).rejects.toBe(error);
    }
    expect(await cache.has('k')).toBe(false);
  });

  it("a codec's text is kept exactly or refused: a lone surrogate and text the codec cannot decode are E_INVALID_VALUE", async (s) => {
    // A codec of the caller's: text as it is, and text starting with "!" it cannot read back.
    const codec = {
      encode: (value: unknown) => String(value),
      decode: (text: string) => {
        if (text.startsWith('!')) throw new SyntaxError(`cannot decode ${text}`);
        return text;
      },
    };
    const cache = await s.cache({ prefix: 'codec:', codec });
    await expectReject(() => cache.set('lone', 'x\ud800y'), 'E_INVALID_VALUE', 'a lone surrogate would be stored as U+FFFD');
    expect(await cache.has('lone')).toBe(false);
    await cache.set('unreadable', '!x');
    const error = await expectReject(() => cache.get('unreadable'), 'E_INVALID_VALUE', 'text the codec cannot decode');
    expect((error as Error).cause).toBeInstanceOf(SyntaxError);
    await cache.set('fine', 'x\u0000y');
    expect(await cache.get('fine')).toBe('x\u0000y');
  });

  it('getOrSet: the ttl applies to the loaded value', async (s) => {
    const cache = await s.cache();
    const key = await withinShortTtl(async (run) => {
      const key = `k:${run}`;
      let calls = 0;
      await cache.getOrSet(key, async () => ++calls, SHORT_TTL);
      expect(await cache.getOrSet(key, async () => ++calls, SHORT_TTL)).toBe(1);
      return key;
    });
    await sleep(PAST_SHORT_TTL);
    expect(await cache.get(key)).toBeNull();
    expect(await cache.getOrSet(key, async () => 2)).toBe(2);
  });

  it('concurrent first use: several fresh instances work at once', async (s) => {
    const caches = await s.many(5, (session) => session.cache({ prefix: 'shared:' }));
    await parallel(5, (i) => caches[i]!.set(`k${i}`, i));
    expect(await caches[0]!.keys()).toEqual(['k0', 'k1', 'k2', 'k3', 'k4']);
  });

  it('close is idempotent and every method then rejects with E_CLOSED', async (s) => {
    const cache = await s.cache({ prefix: 'closed:' });
    await cache.set('k', 1);
    await Promise.all([cache.close(), cache.close()]);
    await cache.close();
    const calls: [string, () => unknown][] = [
      ['get', () => cache.get('k')],
      ['set', () => cache.set('k', 2)],
      ['delete', () => cache.delete('k')],
      ['has', () => cache.has('k')],
      ['clear', () => cache.clear()],
      ['keys', () => cache.keys()],
      ['getOrSet', () => cache.getOrSet('k', async () => 3)],
      ['clearExpired', () => cache.clearExpired()],
    ];
    for (const [name, call] of calls) await expectReject(call, 'E_CLOSED', name);
    expect(await (await s.cache({ prefix: 'closed:' })).get('k')).toBe(1);
  });

  it('skewed client clock: expiry follows the store clock, not Date', { needs: ['serverClock'], exclusive: true }, async (s) => {
    const cache = await s.cache({ prefix: 'skew:' });
    await withClientSkew(async (skew) => {
      const run = await withinShortTtl(async (run) => {
        for (const offset of CLIENT_SKEWS) {
          skew.set(offset);
          await cache.set(`live:${run}:${offset}`, 'v', 30_000);
          await cache.set(`short:${run}:${offset}`, 'v', SHORT_TTL);
          skew.set(-offset);
          expect(await cache.get(`live:${run}:${offset}`), `30 s entry written at ${offset} ms skew`).toBe('v');
          expect(await cache.has(`short:${run}:${offset}`), `fresh ${SHORT_TTL} ms entry written at ${offset} ms skew`).toBe(true);
        }
        return run;
      });
      await sleep(PAST_SHORT_TTL);
      for (const readAt of CLIENT_SKEWS) {
        skew.set(readAt);
        expect(await cache.keys('short:*'), `expired entries read at ${readAt} ms skew`).toEqual([]);
        expect((await cache.keys(`live:${run}:*`)).length).toBe(2);
      }
    });
  });
});
