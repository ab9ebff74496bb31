import { expect, it } from 'vitest';
import {
  MongoCacheProvider,
  MongoCheckpointStore,
  MongoCircuitBreakerStore,
  MongoIdempotencyStore,
  MongoKeyValueStore,
  MongoLockProvider,
  mongo,
} from '../src/index.js';
import { storeOptions } from './helpers.js';
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
    const kv = await new MongoKeyValueStore(storeOptions(s)).connect();
    const locks = await new MongoLockProvider(storeOptions(s)).connect();
    const cache = await new MongoCacheProvider(storeOptions(s)).connect();
    const idempotency = await new MongoIdempotencyStore(storeOptions(s)).connect();
    const checkpoints = await new MongoCheckpointStore(storeOptions(s)).connect();
    const breaker = await new MongoCircuitBreakerStore(storeOptions(s)).connect();
    const snapshots = await mongo({ ...storeOptions(s), lock: true }).connect();
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
    await Promise.all([kv, locks, cache, idempotency, checkpoints, breaker, snapshots].map((store) => store.close()));
  });

  it('keys, values, owners and ids that look like operators, field paths or regexes are literal', async () => {
    const kv = await new MongoKeyValueStore(storeOptions(s)).connect();
    const locks = await new MongoLockProvider(storeOptions(s)).connect();
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

  it('JSON values with `$` and `.` field names round-trip in the cache, snapshots, checkpoints and idempotency records', async () => {
    const value = {
      $where: 'function () { return true }',
      $gt: '',
      'a.b': { '$$NOW': 1, 'c.d.e': ['$expiresAt', { $in: [1] }] },
      nested: { _id: { $oid: '000000000000000000000000' } },
      '': '',
    };
    const cache = await new MongoCacheProvider({ ...storeOptions(s), prefix: '$prefix.' }).connect();
    await cache.set('$key', value);
    expect(await cache.get('$key')).toStrictEqual(value);
    expect(await cache.keys()).toEqual(['$key']);
    const snapshots = await mongo({ ...storeOptions(s), prefix: '$ns.' }).connect();
    await snapshots.save('$wf', value as never);
    expect(await snapshots.load('$wf')).toStrictEqual(value);
    expect(await snapshots.list({ prefix: '$' })).toEqual([expect.objectContaining({ id: '$wf' })]);
    const checkpoints = await new MongoCheckpointStore(storeOptions(s)).connect();
    await checkpoints.save({ id: '$cp', taskId: '$task', sequence: 1, timestamp: 1, progress: 0.5, data: value });
    expect((await checkpoints.loadLatest('$task'))?.data).toStrictEqual(value);
    const idempotency = await new MongoIdempotencyStore(storeOptions(s)).connect();
    await idempotency.set('$op', value);
    expect((await idempotency.get('$op'))?.value).toStrictEqual(value);
    await Promise.all([cache.close(), snapshots.close(), checkpoints.close(), idempotency.close()]);
  });
});
