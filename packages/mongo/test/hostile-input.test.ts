import { compareKeys } from '@stowage/core/adapter';
import { MongoClient } from 'mongodb';
import { expect, it } from 'vitest';
import { MongoCacheProvider, MongoCheckpointStore, MongoIdempotencyStore, MongoKeyValueStore, MongoLockProvider, mongo } from '../src/index.js';
import { recordCommands, storeOptions } from './helpers.js';
import { everyStore, uniqueName, whenReady } from './mongo-adapter.js';
import { describeEachServer, openTestServers } from './server.js';

/**
 * Input shaped like MongoDB syntax must stay data: operator objects where a string belongs are
 * rejected before anything is sent, and strings that look like operators, field paths or
 * regular expressions are stored and matched literally.
 */
const servers = await openTestServers('stowage_hostile');

const OPERATOR_OBJECTS: unknown[] = [{ $gt: '' }, { $ne: null }, { $where: 'sleep(1000)' }, { $regex: '.*' }, ['a'], 1];
const LOOKS_LIKE_SYNTAX = ['$where', '$gt', '$$NOW', '$$REMOVE', '$expiresAt', '$owner', '.*', '^a', 'a$', '(?i)A', '\\z', 'a.b', '{"$gt":""}'];

describeEachServer(servers, 'hostile field names and keys', (s) => {

  it('operator objects where a string key, owner, token or id is expected are rejected as invalid', async () => {
    const stores = everyStore({ url: s.url, database: s.database });
    await stores.ready();
    const { kv, locks, cache, idempotency, checkpoints, breaker, snapshots } = stores;
    await kv.set('victim', 'kept');
    for (const hostile of OPERATOR_OBJECTS) {
      const h = hostile as never;
      await expect(kv.get(h)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(kv.delete(h)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(kv.deleteMany([h])).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(kv.getMany([h])).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(kv.set('k', h)).rejects.toMatchObject({ code: 'E_INVALID_VALUE' });
      await expect(kv.keys(h)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(locks.acquire(h, 1_000)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(locks.acquire('k', 1_000, { owner: h })).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await expect(locks.release('k', h)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await expect(cache.get(h)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(idempotency.complete('k', h, 1)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await expect(idempotency.fail('k', h)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await expect(checkpoints.list(h)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(checkpoints.load(h)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(breaker.recordFailure(h, 3)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(snapshots.load(h)).rejects.toMatchObject({ code: 'E_INVALID_KEY' });
      await expect(snapshots.release('wf', h)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
    }
    expect(await kv.get('victim')).toBe('kept');
    expect(await kv.keys()).toEqual(['victim']);
    await stores.close();
  });

  it('keys, values, owners and ids that look like operators, field paths or regexes are literal', async () => {
    const kv = await whenReady(new MongoKeyValueStore(storeOptions(s)));
    const locks = await whenReady(new MongoLockProvider(storeOptions(s)));
    for (const text of LOOKS_LIKE_SYNTAX) {
      await kv.set(text, text, { ttl: 60_000 });
      expect(await kv.get(text), text).toBe(text);
      expect(await kv.keys(text.replace(/[\\*?]/g, '\\$&')), text).toEqual([text]);
      const first = (await kv.getEntry(text))!.version;
      await kv.set(text, text); // over a live key: a new version (a `$`-string value is never a field path)
      const second = (await kv.getEntry(text))!;
      expect(second, text).toMatchObject({ value: text, expiresAt: null });
      expect(second.version, text).toBeGreaterThan(first);
      expect(await kv.compareAndSet(text, text, second.version), text).toBeGreaterThan(second.version);
      const handle = await locks.acquire(`lock:${text}`, 60_000, text);
      expect(handle?.owner, text).toBe(text);
      expect(await locks.acquire(`lock:${text}`, 60_000, 'someone-else'), text).toBeNull();
      const again = await locks.acquire(`lock:${text}`, 60_000, text);
      expect(again?.fence, `${text} keeps its fence`).toBe(handle!.fence);
      expect(await locks.release(`lock:${text}`, text), text).toBe(true);
    }
    // Regex metacharacters in a pattern are literal: `.*` matches only the key ".*".
    expect(await kv.keys('.*')).toEqual(['.*']);
    expect(await kv.keys('^a')).toEqual(['^a']);
    expect((await kv.keys('$*')).sort()).toEqual(LOOKS_LIKE_SYNTAX.filter((text) => text.startsWith('$')).sort());
    expect(await kv.getMany(LOOKS_LIKE_SYNTAX)).toEqual(LOOKS_LIKE_SYNTAX);
    expect(await kv.deleteMany(['.*', '$where'])).toBe(2);
    await Promise.all([kv.close(), locks.close()]);
  });

  it('a glob of many `*` over long keys lists exactly its matches: the server never runs a glob as a backtracking expression', { timeout: 60_000 }, async () => {
    // Before: `*a*a*a*a*a*a*a*b` went to the server as an anchored regular expression, and
    // jongodb's backtracking engine gave no answer for a key of fifty `a`s in 30 s (MongoDB's
    // PCRE backtracks the same way; FerretDB took seconds for long patterns). The generous
    // timeout only bounds a hang: the assertions are on the matches.
    const kv = await whenReady(new MongoKeyValueStore(storeOptions(s)));
    const cache = await whenReady(new MongoCacheProvider({ ...storeOptions(s), prefix: 'p:' }));
    const keys = ['a'.repeat(60), `${'a'.repeat(60)}b`, `${'xa'.repeat(40)}b`, `${'a'.repeat(6)}b`, `a\u0000${'a'.repeat(50)}\u0001b`, 'b', '?'.repeat(1000)];
    const glob = `*${'a*'.repeat(7)}b`;
    const matches = [`a\u0000${'a'.repeat(50)}\u0001b`, `${'a'.repeat(60)}b`, `${'xa'.repeat(40)}b`];
    await kv.setMany(keys.map((key) => ({ key, value: 'v' })));
    for (const key of keys) await cache.set(key, 1);
    const all = async (iterable: AsyncIterable<string>) => {
      const found: string[] = [];
      for await (const key of iterable) found.push(key);
      return found;
    };
    expect(await kv.keys(glob)).toEqual(matches);
    expect((await kv.entries(glob)).map((entry) => entry.key)).toEqual(matches);
    expect(await all(kv.scan(glob, { pageSize: 2 }))).toEqual(matches);
    expect(await cache.keys(glob)).toEqual(matches);
    expect(await all(cache.scan(glob, { pageSize: 1 }))).toEqual(matches);
    // Long patterns: as expressions, FerretDB ran each for seconds over 2,000 keys, and the second is over MongoDB's 16 KiB limit.
    expect(await kv.keys('?'.repeat(1000))).toEqual(['?'.repeat(1000)]);
    expect(await kv.keys('*?'.repeat(2700))).toEqual([]);
    expect(await kv.keys('*?'.repeat(7))).toEqual(keys.filter((key) => key.length >= 7).sort(compareKeys));
    expect(await cache.keys(`*${'a'.repeat(55)}*b`)).toEqual([`${'a'.repeat(60)}b`]);
    await Promise.all([kv.close(), cache.close()]);
  });

  it('a listing the store decides reads on past keys that do not match: every match once, in order, and a page reads only as far as it needs', async () => {
    const client = await new MongoClient(s.url, { monitorCommands: true }).connect();
    const commands = recordCommands(client);
    try {
      const options = { client, database: s.database, collection: uniqueName('glob_pages') };
      const kv = await whenReady(new MongoKeyValueStore(options));
      const cache = await whenReady(new MongoCacheProvider({ ...options, collection: uniqueName('glob_pages_cache'), prefix: 'c' }));
      // 600 keys that all contain "hit" (the literal the server searches for), of which every 50th ends with it.
      const keys = Array.from({ length: 600 }, (_, i) => `row:${String(i).padStart(4, '0')}:${i % 50 === 0 ? 'hit' : 'hitx'}`);
      const matches = keys.filter((key) => key.endsWith(':hit'));
      const all = [...keys, 'rov:1:hit', 'rox:1:hit'];
      // Written directly: setMany checks each key's version, which FerretDB does by reading the whole collection.
      await client.db(s.database).collection(options.collection).insertMany(all.map((key) => ({ _id: key as never, value: 'v', version: 1, updatedAt: new Date() })));
      await kv.set('row:gone:hit', 'v', { ttl: 1 }); // expired by the time it is listed
      await Promise.all(all.map((key) => cache.set(key, 1))); // one command (the cache coalesces a tick's sets)
      const glob = 'row:*:*hit';
      for (const pageSize of [1, 5, 12, 13, 1000]) {
        const scanned: string[] = [];
        for await (const key of kv.scan(glob, { pageSize })) scanned.push(key);
        expect(scanned, `kv, pages of ${pageSize}`).toEqual(matches);
        const cached: string[] = [];
        for await (const key of cache.scan(glob, { pageSize })) cached.push(key);
        expect(cached, `cache, pages of ${pageSize}`).toEqual(matches);
      }
      expect(await kv.keys(glob)).toEqual(matches);
      // The first page of 3 (keys 0, 50 and 100) reads a batch or two of the range, not all 600 keys.
      commands.reset();
      const first = kv.scan(glob, { pageSize: 3 })[Symbol.asyncIterator]();
      for (let i = 0; i < 3; i++) await first.next();
      expect(commands.documents()).toBeLessThan(300);
      await first.return?.();
      await Promise.all([kv.close(), cache.close()]);
    } finally {
      commands.stop();
      await client.close();
    }
  });

  it('JSON values with `$` and `.` field names round-trip in the cache, snapshots, checkpoints and idempotency records', async () => {
    const value = {
      $where: 'function () { return true }',
      $gt: '',
      'a.b': { '$$NOW': 1, 'c.d.e': ['$expiresAt', { $in: [1] }] },
      nested: { _id: { $oid: '000000000000000000000000' } },
      '': '',
    };
    const cache = await whenReady(new MongoCacheProvider({ ...storeOptions(s), prefix: '$prefix.' }));
    await cache.set('$key', value);
    expect(await cache.get('$key')).toStrictEqual(value);
    expect(await cache.keys()).toEqual(['$key']);
    const snapshots = await whenReady(mongo({ ...storeOptions(s), prefix: '$ns.' }));
    await snapshots.save('$wf', value as never);
    expect(await snapshots.load('$wf')).toStrictEqual(value);
    expect(await snapshots.list({ prefix: '$' })).toEqual([expect.objectContaining({ id: '$wf' })]);
    const checkpoints = await whenReady(new MongoCheckpointStore(storeOptions(s)));
    await checkpoints.save({ id: '$cp', taskId: '$task', sequence: 1, timestamp: 1, progress: 0.5, data: value });
    expect((await checkpoints.loadLatest('$task'))?.data).toStrictEqual(value);
    const idempotency = await whenReady(new MongoIdempotencyStore(storeOptions(s)));
    await idempotency.set('$op', value);
    expect((await idempotency.get('$op'))?.value).toStrictEqual(value);
    await Promise.all([cache.close(), snapshots.close(), checkpoints.close(), idempotency.close()]);
  });
});
