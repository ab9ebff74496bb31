import { expect } from 'vitest';
import { escapeGlob } from '../../glob.js';
import { compareKeys } from '../../keys.js';
import { defineCases } from '../harness.js';
import {
  CLIENT_SKEWS,
  HOSTILE_KEYS,
  INVALID_KEYS,
  ONE_MB_STRING,
  PAST_SHORT_TTL,
  SHORT_TTL,
  errorCode,
  expectReject,
  parallel,
  retryOnConflict,
  sleep,
  utf8Bytes,
  withClientSkew,
} from '../helpers.js';

export const keyValueCases = defineCases('KeyValueStore', (it) => {
  it('get returns null and exists false for a missing key', async (s) => {
    const kv = await s.kv();
    expect(await kv.get('missing')).toBeNull();
    expect(await kv.exists('missing')).toBe(false);
    expect(await kv.getEntry('missing')).toBeNull();
  });

  it('set then get round-trips; set overwrites', async (s) => {
    const kv = await s.kv();
    await kv.set('a', 'one');
    expect(await kv.get('a')).toBe('one');
    expect(await kv.exists('a')).toBe(true);
    await kv.set('a', 'two');
    expect(await kv.get('a')).toBe('two');
  });

  it('values: empty string, NUL, unicode and 1 MB strings round-trip', async (s) => {
    const kv = await s.kv();
    const values = ['', '\u0000', 'a\u0000b', 'ünïcödé 日本語 😀', '{"json":true}', ' padded \n', ONE_MB_STRING];
    await parallel(values.length, (i) => kv.set(`v${i}`, values[i]!));
    for (const [i, value] of values.entries()) expect(await kv.get(`v${i}`)).toBe(value);
    expect(await kv.exists('v0')).toBe(true); // the empty string is a value, not absence
  });

  it('non-string and malformed values reject with E_INVALID_VALUE', async (s) => {
    const kv = await s.kv();
    for (const value of [42, null, undefined, { a: 1 }, 'lone \ud800 surrogate']) {
      await expectReject(() => kv.set('k', value as never), 'E_INVALID_VALUE', `set(${String(value)})`);
    }
    expect(await kv.get('k')).toBeNull();
  });

  it('calls made together on one key take effect in the order they were made', async (s) => {
    const kv = await s.kv();
    for (let round = 0; round < 10; round++) {
      const key = `ordered:${round}`;
      // Not awaited one by one: made in one tick, as concurrent code makes them.
      const outcomes = await Promise.all([
        kv.get(key),
        kv.set(key, 'a'),
        kv.exists(key),
        kv.get(key),
        kv.delete(key),
        kv.get(key),
        kv.set(key, 'b'),
        kv.delete(`other:${round}`),
        kv.get(key),
      ]);
      expect(outcomes, `round ${round}`).toEqual([null, undefined, true, 'a', true, null, undefined, false, 'b']);
      expect(await kv.get(key)).toBe('b');
    }
  });

  it('delete returns true only when a live key was removed', async (s) => {
    const kv = await s.kv();
    await kv.set('a', '1');
    expect(await kv.delete('a')).toBe(true);
    expect(await kv.delete('a')).toBe(false);
    expect(await kv.get('a')).toBeNull();
    expect(await kv.delete('never-set')).toBe(false);
  });

  it('keys lists live keys in code point order; default pattern is *', async (s) => {
    const kv = await s.kv();
    const keys = ['b', 'a', 'B', 'a.b', 'a_b', 'ab', '_x', 'Z', 'é', '😀', '\uffff', 'a b', '~'];
    await kv.setMany(keys.map((key) => ({ key, value: key })));
    const sorted = [...keys].sort(compareKeys);
    expect(await kv.keys()).toEqual(sorted);
    expect(await kv.keys('*')).toEqual(sorted);
    expect((await kv.entries()).map((entry) => entry.key)).toEqual(sorted);
  });

  it('hostile keys round-trip and match only themselves as escaped globs', async (s) => {
    const kv = await s.kv();
    await parallel(HOSTILE_KEYS.length, (i) => kv.set(HOSTILE_KEYS[i]!, `value ${i}`));
    for (const [i, key] of HOSTILE_KEYS.entries()) {
      expect(await kv.get(key), JSON.stringify(key)).toBe(`value ${i}`);
      expect(await kv.keys(escapeGlob(key)), JSON.stringify(key)).toEqual([key]);
    }
    expect(await kv.keys()).toEqual([...HOSTILE_KEYS].sort(compareKeys));
    expect(await kv.getMany(HOSTILE_KEYS)).toEqual(HOSTILE_KEYS.map((_, i) => `value ${i}`));
    expect(await kv.deleteMany(HOSTILE_KEYS)).toBe(HOSTILE_KEYS.length);
  });

  it('keys of exactly 1024 UTF-8 bytes are accepted', async (s) => {
    const kv = await s.kv();
    const keys = ['k'.repeat(1024), '€'.repeat(341) + 'a', '😀'.repeat(256)];
    for (const key of keys) {
      expect(utf8Bytes(key)).toBe(1024);
      await kv.set(key, 'ok');
      expect(await kv.get(key)).toBe('ok');
    }
  });

  it('invalid keys reject with E_INVALID_KEY in every method', async (s) => {
    const kv = await s.kv();
    for (const [label, key] of INVALID_KEYS) {
      const k = key as string;
      await expectReject(() => kv.get(k), 'E_INVALID_KEY', `get(${label})`);
      await expectReject(() => kv.set(k, 'v'), 'E_INVALID_KEY', `set(${label})`);
      await expectReject(() => kv.delete(k), 'E_INVALID_KEY', `delete(${label})`);
      await expectReject(() => kv.exists(k), 'E_INVALID_KEY', `exists(${label})`);
      await expectReject(() => kv.getEntry(k), 'E_INVALID_KEY', `getEntry(${label})`);
      await expectReject(() => kv.compareAndSet(k, 'v', null), 'E_INVALID_KEY', `compareAndSet(${label})`);
      await expectReject(() => kv.getMany(['ok', k]), 'E_INVALID_KEY', `getMany(${label})`);
      await expectReject(() => kv.deleteMany(['ok', k]), 'E_INVALID_KEY', `deleteMany(${label})`);
      await expectReject(() => kv.setMany([{ key: k, value: 'v' }]), 'E_INVALID_KEY', `setMany(${label})`);
    }
    expect(await kv.keys()).toEqual([]);
  });

  it('glob: _ % . and regex metacharacters are literal; * and ? are wildcards; \\ escapes', async (s) => {
    const kv = await s.kv();
    const keys = ['a_c', 'abc', 'a%c', 'a.c', 'aXc', 'a*c', 'a?c', 'a\\c', 'ac', 'abbc', 'a\nc', 'a😀c', 'a+c', 'a(c', 'a[c', 'a^c', 'a$c', 'a|c', 'a{c'];
    await kv.setMany(keys.map((key) => ({ key, value: '1' })));
    expect(await kv.keys('a_c')).toEqual(['a_c']);
    expect(await kv.keys('a%c')).toEqual(['a%c']);
    expect(await kv.keys('a.c')).toEqual(['a.c']);
    expect(await kv.keys('a+c')).toEqual(['a+c']);
    expect(await kv.keys('a(c')).toEqual(['a(c']);
    expect(await kv.keys('a[c')).toEqual(['a[c']);
    expect(await kv.keys('a^c')).toEqual(['a^c']);
    expect(await kv.keys('a$c')).toEqual(['a$c']);
    expect(await kv.keys('a|c')).toEqual(['a|c']);
    expect(await kv.keys('a{c')).toEqual(['a{c']);
    expect(await kv.keys('a\\*c')).toEqual(['a*c']);
    expect(await kv.keys('a\\?c')).toEqual(['a?c']);
    expect(await kv.keys('a\\\\c')).toEqual(['a\\c']);
    const threeChars = keys.filter((key) => Array.from(key).length === 3).sort(compareKeys);
    expect(await kv.keys('a?c')).toEqual(threeChars);
    expect(await kv.keys('a*c')).toEqual([...keys].sort(compareKeys));
    expect(await kv.keys('a*')).toEqual([...keys].sort(compareKeys));
    expect(await kv.keys('*c')).toEqual([...keys].sort(compareKeys));
    expect(await kv.keys('ab*')).toEqual(['abbc', 'abc']);
    expect(await kv.keys('%')).toEqual([]);
    expect(await kv.keys('_')).toEqual([]);
    expect(await kv.keys('.*')).toEqual([]);
    expect(await kv.keys('nothing*')).toEqual([]);
  });

  it('glob: literal text with % and _ does not match other keys (prefix scans escape LIKE)', async (s) => {
    const kv = await s.kv();
    await kv.setMany(['user_1:a', 'userX1:a', 'user%1:b', 'user%%:c', 'users:1'].map((key) => ({ key, value: '1' })));
    expect(await kv.keys('user_1:*')).toEqual(['user_1:a']);
    expect(await kv.keys('user%1:*')).toEqual(['user%1:b']);
    expect(await kv.keys('user%*')).toEqual(['user%%:c', 'user%1:b']);
    expect(await kv.keys('user?1:*')).toEqual(['user%1:b', 'userX1:a', 'user_1:a'].sort(compareKeys));
  });

  it('malformed patterns reject with E_INVALID_KEY', async (s) => {
    const kv = await s.kv();
    await expectReject(() => kv.keys('dangling\\'), 'E_INVALID_KEY', 'keys("dangling\\\\")');
    await expectReject(() => kv.keys(42 as never), 'E_INVALID_KEY', 'keys(42)');
    await expectReject(() => kv.entries('a\ud800'), 'E_INVALID_KEY', 'entries(lone surrogate)');
  });

  it('scan streams the live keys keys() lists, in order, page by page; scanEntries their metadata', async (s) => {
    const kv = await s.kv();
    const keys = Array.from({ length: 25 }, (_, i) => `scan:${String(i).padStart(2, '0')}`);
    await kv.setMany([...keys.map((key) => ({ key, value: 'v' })), { key: 'other', value: 'x' }, { key: 'scan:gone', value: 'x', ttl: SHORT_TTL }]);
    await sleep(PAST_SHORT_TTL);
    const scanned: string[] = [];
    for await (const key of kv.scan('scan:*', { pageSize: 4 })) scanned.push(key);
    expect(scanned).toEqual(keys);
    expect(await kv.keys('scan:*')).toEqual(keys);
    const entries = [];
    for await (const entry of kv.scanEntries('scan:1?', { pageSize: 3 })) entries.push(entry);
    expect(entries.map((entry) => entry.key)).toEqual(keys.slice(10, 20));
    expect(entries[0]).not.toHaveProperty('value');
    const all: string[] = [];
    for await (const key of kv.scan()) all.push(key);
    expect(all).toEqual([...keys, 'other'].sort(compareKeys));
    const first = (iterable: AsyncIterable<unknown>) => iterable[Symbol.asyncIterator]().next();
    await expectReject(() => first(kv.scan('*', { pageSize: 0 })), 'E_INVALID_OPTION', 'pageSize 0');
    await expectReject(() => first(kv.scan('bad\\')), 'E_INVALID_KEY', 'dangling escape');
  });

  it('recentEntries lists the live entries under a prefix newest first, page by page', async (s) => {
    const kv = await s.kv();
    if (!kv.recentEntries) return s.skip('the store has no recentEntries (optional)');
    const ids = ['a', 'b', 'c', 'd', 'e'];
    for (const id of ids) {
      await kv.set(`wf:${id}`, id);
      await sleep(5); // distinct updatedAt on any store clock (milliseconds)
    }
    await kv.set('other:z', 'z');
    await kv.set('wf:gone', 'x', { ttl: SHORT_TTL });
    await sleep(PAST_SHORT_TTL);
    const first = await kv.recentEntries({ prefix: 'wf:', limit: 2 });
    expect(first.map((entry) => entry.key)).toEqual(['wf:e', 'wf:d']);
    const rest = await kv.recentEntries({ prefix: 'wf:', limit: 10, after: first.at(-1)! });
    expect(rest.map((entry) => entry.key)).toEqual(['wf:c', 'wf:b', 'wf:a']);
    expect((await kv.recentEntries({ limit: 1 })).map((entry) => entry.key)).toEqual(['other:z']);
    await expectReject(() => kv.recentEntries!({ prefix: 'wf:', limit: 0 }), 'E_INVALID_OPTION', 'limit 0');
    for (const ms of [-8.64e15, 8.64e15]) {
      const after = { updatedAt: new Date(ms), key: 'wf:a' };
      await expectReject(() => kv.recentEntries!({ prefix: 'wf:', limit: 1, after }), 'E_INVALID_OPTION', `after a time no database stores (${after.updatedAt.toISOString()})`);
    }
  });

  it('getMany returns values aligned with the keys, null for missing', async (s) => {
    const kv = await s.kv();
    await kv.set('a', '1');
    await kv.set('c', '3');
    expect(await kv.getMany(['c', 'missing', 'a', 'a'])).toEqual(['3', null, '1', '1']);
    expect(await kv.getMany([])).toEqual([]);
  });

  it('setMany writes all entries, with per-entry TTL; a repeated key keeps its last value', async (s) => {
    const kv = await s.kv();
    await kv.setMany([
      { key: 'a', value: 'first' },
      { key: 'b', value: 'b', ttl: SHORT_TTL },
      { key: 'a', value: 'last' },
    ]);
    expect(await kv.getMany(['a', 'b'])).toEqual(['last', 'b']);
    await kv.setMany([]);
    await sleep(PAST_SHORT_TTL);
    expect(await kv.getMany(['a', 'b'])).toEqual(['last', null]);
  });

  it('setMany is all or nothing when one entry is invalid', async (s) => {
    const kv = await s.kv();
    await kv.set('existing', 'kept');
    await expectReject(
      () => kv.setMany([{ key: 'x1', value: 'v' }, { key: 'existing', value: 'changed' }, { key: 'x2', value: 42 as never }]),
      'E_INVALID_VALUE',
      'setMany with a non-string value',
    );
    await expectReject(
      () => kv.setMany([{ key: 'x1', value: 'v' }, { key: '', value: 'v' }]),
      'E_INVALID_KEY',
      'setMany with an empty key',
    );
    await expectReject(
      () => kv.setMany([{ key: 'x1', value: 'v' }, { key: 'x3', value: 'v', ttl: -5 }]),
      'E_INVALID_OPTION',
      'setMany with a negative ttl',
    );
    expect(await kv.keys()).toEqual(['existing']);
    expect(await kv.get('existing')).toBe('kept');
  });

  it('deleteMany counts live keys removed, each once', async (s) => {
    const kv = await s.kv();
    await kv.setMany([
      { key: 'a', value: '1' },
      { key: 'b', value: '2' },
      { key: 'c', value: '3' },
      { key: 'short', value: '4', ttl: SHORT_TTL },
    ]);
    await sleep(PAST_SHORT_TTL);
    expect(await kv.deleteMany(['a', 'b', 'missing', 'a', 'short'])).toBe(2);
    expect(await kv.keys()).toEqual(['c']);
    expect(await kv.deleteMany([])).toBe(0);
  });

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

  it('versions grow with every write and are never reused for a key, also after delete or expiry', async (s) => {
    const kv = await s.kv();
    const versions: number[] = [];
    const record = async (key: string) => {
      const entry = await kv.getEntry(key);
      expect(Number.isSafeInteger(entry?.version) && entry!.version > 0, `version of ${key}: ${entry?.version}`).toBe(true);
      versions.push(entry!.version);
    };
    await kv.set('a', '1');
    await record('a');
    await kv.set('a', '2');
    await record('a');
    await kv.setMany([{ key: 'a', value: '3' }]);
    await record('a');
    const entry = await kv.getEntry('a');
    expect(entry).toMatchObject({ key: 'a', value: '3', expiresAt: null });
    expect(entry?.updatedAt).toBeInstanceOf(Date);
    versions.push(await kv.compareAndSet('a', '4', entry!.version));
    await record('a');
    for (let round = 0; round < 3; round++) {
      await kv.delete('a');
      await kv.set('a', `again ${round}`);
      await record('a');
    }
    await kv.set('a', 'short', { ttl: SHORT_TTL });
    await record('a');
    await sleep(PAST_SHORT_TTL);
    await kv.set('a', 'fresh');
    await record('a');
    // compareAndSet's result is the version getEntry then reads; every other version is new.
    expect(versions[4]).toBe(versions[3]);
    const distinct = versions.filter((version, index) => index !== 4);
    for (let i = 1; i < distinct.length; i++) expect(distinct[i], `version ${i} after ${distinct.slice(0, i)}`).toBeGreaterThan(distinct[i - 1]!);
  });

  it('compareAndSet holds only against the incarnation it read: a version from before a delete or expiry never matches again', async (s) => {
    const kv = await s.kv();
    await kv.set('k', 'first');
    const beforeDelete = (await kv.getEntry('k'))!.version;
    await kv.delete('k');
    await kv.set('k', 'acknowledged');
    await kv.set('k', 'acknowledged again');
    await expectReject(() => kv.compareAndSet('k', 'stale write', beforeDelete), 'E_VERSION_CONFLICT', 'version from before delete');
    expect(await kv.get('k')).toBe('acknowledged again');

    await kv.compareAndSet('t', 'expiring', null, { ttl: SHORT_TTL });
    const beforeExpiry = (await kv.getEntry('t'))!.version;
    await sleep(PAST_SHORT_TTL);
    await kv.compareAndSet('t', 'recreated', null);
    await expectReject(() => kv.compareAndSet('t', 'stale write', beforeExpiry), 'E_VERSION_CONFLICT', 'version from before expiry');
    expect(await kv.get('t')).toBe('recreated');

    // A version from another key's history does not match either.
    await kv.setMany([{ key: 'x', value: '1' }, { key: 'y', value: '1' }]);
    const xVersion = (await kv.getEntry('x'))!.version;
    const yVersion = (await kv.getEntry('y'))!.version;
    if (xVersion !== yVersion) await expectReject(() => kv.compareAndSet('y', 'z', xVersion), 'E_VERSION_CONFLICT', 'version of another key');
  });

  it('entries returns metadata of matching live keys in order', async (s) => {
    const kv = await s.kv();
    await kv.setMany([
      { key: 'x:2', value: 'b', ttl: 60_000 },
      { key: 'x:1', value: 'a' },
      { key: 'y:1', value: 'c' },
    ]);
    const entries = await kv.entries('x:*');
    expect(entries.map((e) => e.key)).toEqual(['x:1', 'x:2']);
    for (const entry of entries) expect(entry.version).toBe((await kv.getEntry(entry.key))!.version);
    expect(entries[0]).not.toHaveProperty('value');
    expect(entries[0]!.expiresAt).toBeNull();
    expect(entries[1]!.expiresAt).toBeInstanceOf(Date);
  });

  it('compareAndSet: null creates only when absent; a version writes only when current', async (s) => {
    const kv = await s.kv();
    const v1 = await kv.compareAndSet('k', 'v1', null);
    expect(v1).toBe((await kv.getEntry('k'))!.version);
    await expectReject(() => kv.compareAndSet('k', 'other', null), 'E_VERSION_CONFLICT', 'create over existing');
    expect(await kv.get('k')).toBe('v1');
    const v2 = await kv.compareAndSet('k', 'v2', v1);
    expect(v2).toBeGreaterThan(v1);
    await expectReject(() => kv.compareAndSet('k', 'stale', v1), 'E_VERSION_CONFLICT', 'stale version');
    await expectReject(() => kv.compareAndSet('k', 'future', v2 + 1000), 'E_VERSION_CONFLICT', 'future version');
    await expectReject(() => kv.compareAndSet('absent', 'x', v1), 'E_VERSION_CONFLICT', 'version on absent key');
    expect(await kv.get('k')).toBe('v2');
    expect(await kv.get('absent')).toBeNull();
    await expectReject(() => kv.compareAndSet('k', 'x', 0), 'E_INVALID_OPTION', 'version 0');
    await expectReject(() => kv.compareAndSet('k', 'x', 1.5), 'E_INVALID_OPTION', 'version 1.5');
    await expectReject(() => kv.compareAndSet('k', 42 as never, v2), 'E_INVALID_VALUE', 'non-string value');
    expect(await kv.getEntry('k')).toMatchObject({ value: 'v2', version: v2 });
  });

  it('compareAndSet: an expired or deleted key counts as absent; ttl applies', async (s) => {
    const kv = await s.kv();
    const expiring = await kv.compareAndSet('k', 'v', null, { ttl: SHORT_TTL });
    await sleep(PAST_SHORT_TTL);
    await expectReject(() => kv.compareAndSet('k', 'x', expiring), 'E_VERSION_CONFLICT', 'version of an expired key');
    await kv.compareAndSet('k', 'again', null);
    await kv.delete('k');
    await kv.compareAndSet('k', 'third', null);
    expect(await kv.get('k')).toBe('third');
  });

  it('compareAndSet: 8 concurrent increment loops on one key lose no update', { needs: ['atomicUpdates'] }, async (s) => {
    const stores = await s.many(4, (session) => session.kv());
    await stores[0]!.compareAndSet('counter', '0', null);
    const loops = 8;
    const incrementsPerLoop = 10;
    await parallel(loops, async (loop) => {
      const kv = stores[loop % stores.length]!;
      for (let i = 0; i < incrementsPerLoop; i++) {
        await retryOnConflict(async () => {
          const entry = await kv.getEntry('counter');
          await kv.compareAndSet('counter', String(Number(entry!.value) + 1), entry!.version);
        });
      }
    });
    expect(await stores[0]!.get('counter')).toBe(String(loops * incrementsPerLoop));
  });

  it('compareAndSet: of many concurrent creates exactly one wins', async (s) => {
    const stores = await s.many(4, (session) => session.kv());
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => stores[i % stores.length]!.compareAndSet('once', `writer ${i}`, null)),
    );
    const winners = results.filter((result) => result.status === 'fulfilled');
    expect(winners).toHaveLength(1);
    for (const result of results) {
      if (result.status === 'rejected') expect(result.reason).toMatchObject({ code: 'E_VERSION_CONFLICT' });
    }
  });

  // All or nothing under concurrency needs multi-document transactions (a MongoDB standalone or FerretDB has none).
  it('batches over the same keys in opposite order never deadlock', { needs: ['transactions'] }, async (s) => {
    const [a, b] = await s.many(2, (session) => session.kv());
    const keys = Array.from({ length: 20 }, (_, i) => `batch:${String(i).padStart(2, '0')}`);
    for (let round = 0; round < 10; round++) {
      const forward = keys.map((key) => ({ key, value: `a${round}` }));
      const backward = [...keys].reverse().map((key) => ({ key, value: `b${round}` }));
      await Promise.all([a!.setMany(forward), b!.setMany(backward), a!.deleteMany(keys.slice(5)), b!.deleteMany([...keys].reverse().slice(5))]);
    }
    // Each batch is all or nothing: the first five keys hold one batch's value, all alike.
    const values = await a!.getMany(keys.slice(0, 5));
    expect(new Set(values).size, `values: ${values}`).toBe(1);
  });

  it('close() settles every call in flight before it resolves; nothing acknowledged is lost', async (s) => {
    const kv = await s.kv();
    await kv.get('warm-up');
    const writes = Array.from({ length: 50 }, (_, i) => kv.set(`inflight:${String(i).padStart(2, '0')}`, String(i)));
    const outcomes: PromiseSettledResult<void>[] = [];
    const settledAll = Promise.allSettled(writes).then((results) => outcomes.push(...results));
    await kv.close();
    // Every call settled by the time close() resolved: none still pending, none left hanging.
    await Promise.race([settledAll, sleep(0).then(() => expect.fail('calls still pending after close() resolved'))]);
    for (const outcome of outcomes) {
      if (outcome.status === 'rejected') expect(errorCode(outcome.reason)).toBe('E_CLOSED');
    }
    const other = await s.kv();
    const acknowledged = outcomes.map((outcome, i) => (outcome.status === 'fulfilled' ? `inflight:${String(i).padStart(2, '0')}` : null)).filter((key) => key !== null);
    const stored = await other.keys('inflight:*');
    for (const key of acknowledged) expect(stored, `acknowledged write ${key}`).toContain(key);
  });

  it('instances from one context share data; closing one leaves the others working', async (s) => {
    const [a, b] = await s.many(2, (session) => session.kv());
    await a!.set('shared', 'from a');
    expect(await b!.get('shared')).toBe('from a');
    await a!.close();
    await b!.set('shared', 'from b');
    expect(await b!.get('shared')).toBe('from b');
  });

  it('concurrent first use: several fresh instances work at once', async (s) => {
    const stores = await s.many(5, (session) => session.kv());
    await parallel(stores.length, async (i) => {
      await stores[i]!.set(`first:${i}`, String(i));
      await stores[i]!.get(`first:${(i + 1) % stores.length}`);
    });
    expect(await stores[0]!.keys('first:*')).toEqual(stores.map((_, i) => `first:${i}`));
  });

  it('close is idempotent and every method then rejects with E_CLOSED', async (s) => {
    const kv = await s.kv();
    await kv.set('a', '1');
    await Promise.all([kv.close(), kv.close()]);
    await kv.close();
    const calls: [string, () => unknown][] = [
      ['get', () => kv.get('a')],
      ['set', () => kv.set('a', '2')],
      ['delete', () => kv.delete('a')],
      ['exists', () => kv.exists('a')],
      ['keys', () => kv.keys()],
      ['getMany', () => kv.getMany(['a'])],
      ['setMany', () => kv.setMany([{ key: 'a', value: '2' }])],
      ['deleteMany', () => kv.deleteMany(['a'])],
      ['getEntry', () => kv.getEntry('a')],
      ['entries', () => kv.entries()],
      ['compareAndSet', () => kv.compareAndSet('a', '2', 1)],
      ['clearExpired', () => kv.clearExpired()],
    ];
    for (const [name, call] of calls) await expectReject(call, 'E_CLOSED', name);
    const other = await s.kv();
    expect(await other.get('a')).toBe('1');
  });

  it('skewed client clock: expiry follows the store clock, not Date', { needs: ['serverClock'], exclusive: true }, async (s) => {
    const kv = await s.kv();
    await withClientSkew(async (skew) => {
      for (const offset of CLIENT_SKEWS) {
        // Written while the client clock is off one way, read while it is off the other way.
        skew.set(offset);
        await kv.set(`live:${offset}`, 'v', { ttl: 30_000 });
        await kv.set(`short:${offset}`, 'v', { ttl: SHORT_TTL });
        skew.set(-offset);
        expect(await kv.get(`live:${offset}`), `30 s key written at ${offset} ms skew`).toBe('v');
        expect(await kv.exists(`live:${offset}`)).toBe(true);
        expect(await kv.get(`short:${offset}`), `${SHORT_TTL} ms key just written at ${offset} ms skew`).toBe('v');
      }
      await sleep(PAST_SHORT_TTL);
      for (const readAt of CLIENT_SKEWS) {
        skew.set(readAt);
        for (const offset of CLIENT_SKEWS) {
          const what = `${SHORT_TTL} ms key written at ${offset} ms skew, read after expiry at ${readAt} ms skew`;
          expect(await kv.get(`short:${offset}`), what).toBeNull();
          expect(await kv.get(`live:${offset}`)).toBe('v');
        }
      }
      skew.set(-CLIENT_SKEWS[0]);
      expect(await kv.keys('short:*')).toEqual([]);
      const version = await kv.compareAndSet('cas', 'v', null, { ttl: 30_000 });
      skew.set(CLIENT_SKEWS[0]);
      expect(await kv.getEntry('cas')).toMatchObject({ value: 'v', version });
    });
  });
});
