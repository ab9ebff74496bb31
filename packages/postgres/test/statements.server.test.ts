import { findPgBouncer } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import {
  PostgresCacheProvider,
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresProcessBackend,
  TableName,
  postgres,
  quoteIdentifier,
  type PostgresConnectionOptions,
} from '../src/index.js';
import { processStatements } from '../src/process/statements.js';
import { ABOVE_EVERY_KEY, CLEAR_EXPIRED_BATCH, keyRange } from '../src/sql.js';
import { cacheStatements } from '../src/stores/cache.js';
import { keyValueStatements } from '../src/stores/kv.js';
import { snapshotStatements } from '../src/stores/snapshots.js';
import { CountingPool } from './support/counting-pool.js';
import { dropTables, tableSet } from './support/context.js';
import { serverTestSetup } from './support/server.js';

/**
 * Which statement each call sends: concurrent point calls coalesce into one statement (a lone
 * call keeps its single-key statement), listings pick the statement that narrows by the key
 * range, `scan()` pages are index ranges, and `clearExpired()` removes rows in bounded
 * batches. The plans of these statements are checked in plans.server.test.ts.
 */
const { server, url, admin, describeServer, freshTables } = await serverTestSetup();

/** The statements `operation` sent through `counting`. */
async function sentBy(counting: CountingPool, operation: () => Promise<unknown>): Promise<string[]> {
  counting.reset();
  await operation();
  return counting.statements;
}

test('keyRange: the stored keys that start with a prefix, in byte order', () => {
  expect(keyRange('user:')).toEqual({ lo: 'user:', hi: 'user;' });
  expect(keyRange('a\u{10FFFF}')).toEqual({ lo: 'a\u{10FFFF}', hi: 'b' });
  expect(keyRange('a\u{10FFFF}\u{10FFFF}')).toEqual({ lo: 'a\u{10FFFF}\u{10FFFF}', hi: 'b' });
  // Surrogates are not characters: the one after U+D7FF is U+E000.
  expect(keyRange('x\uD7FF')).toEqual({ lo: 'x\uD7FF', hi: 'x\uE000' });
  expect(keyRange('x\u{1F600}')).toEqual({ lo: 'x\u{1F600}', hi: 'x\u{1F601}' });
  expect(keyRange('\u{10FFFF}')).toEqual({ lo: '\u{10FFFF}', hi: ABOVE_EVERY_KEY });
  // The longest key (1024 UTF-8 bytes of U+10FFFF) still sorts below ABOVE_EVERY_KEY.
  expect('\u{10FFFF}'.repeat(256) < ABOVE_EVERY_KEY).toBe(true);
});

describeServer('statements stowage sends', () => {

  test('key-value store: 32 concurrent gets, exists, sets or deletes are one statement each; a lone call is its single-key statement', async () => {
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 4 }));
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ pool: counting, table: tables.kv });
    const sql = keyValueStatements(new TableName(tables.kv));
    await kv.ready();
    const keys = Array.from({ length: 32 }, (_, i) => `k${String(i).padStart(2, '0')}`);

    expect(await sentBy(counting, () => Promise.all(keys.map((key) => kv.set(key, `v-${key}`, { ttl: 60_000 }))))).toEqual([sql.setEach]);
    expect(await sentBy(counting, () => kv.set('lone', 'x'))).toEqual([sql.set]);

    let values: (string | null)[] = [];
    expect(await sentBy(counting, async () => (values = await Promise.all([...keys, 'missing', 'k00'].map((key) => kv.get(key)))))).toEqual([
      sql.getMany,
    ]);
    expect(values).toEqual([...keys.map((key) => `v-${key}`), null, 'v-k00']);
    expect(await sentBy(counting, () => kv.get('lone'))).toEqual([sql.get]);

    let exists: boolean[] = [];
    expect(await sentBy(counting, async () => (exists = await Promise.all(['k01', 'missing', 'k01', 'lone'].map((key) => kv.exists(key)))))).toEqual([
      sql.existsMany,
    ]);
    expect(exists).toEqual([true, false, true, true]);
    expect(await sentBy(counting, () => kv.exists('lone'))).toEqual([sql.exists]);

    // Each caller gets its own outcome: of two deletes of one key only the first removed it.
    let removed: boolean[] = [];
    const deletes = ['k05', 'missing', 'k05', ...keys.slice(10)];
    expect(await sentBy(counting, async () => (removed = await Promise.all(deletes.map((key) => kv.delete(key)))))).toEqual([sql.deleteEach]);
    expect(removed).toEqual([true, false, false, ...keys.slice(10).map(() => true)]);
    expect(await sentBy(counting, () => kv.delete('lone'))).toEqual([sql.delete]);
    expect(await kv.getMany(['k05', 'k04', 'k10'])).toEqual([null, 'v-k04', null]);
    await kv.close();
    await counting.end();
  });

  test('a coalesced delete reports an expired key as not live', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv, pool: { max: 2 } });
    await kv.setMany([
      { key: 'b', value: '1' },
      { key: 'a', value: '1', ttl: 1 },
    ]);
    await admin.query(`UPDATE ${quoteIdentifier(tables.kv)} SET expires_at = now() - interval '1 second' WHERE key = 'a'`);
    expect(await Promise.all([kv.delete('b'), kv.delete('a'), kv.delete('c')])).toEqual([true, false, false]);
    expect(await kv.keys()).toEqual([]);
    await kv.close();
  });

  test('coalesce: false sends every call on its own; a bad value is E_INVALID_OPTION', async () => {
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 4 }));
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ pool: counting, table: tables.kv, coalesce: false });
    const cache = new PostgresCacheProvider({ pool: counting, table: tables.cache, coalesce: false });
    await Promise.all([kv.ready(), cache.ready()]);
    const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
    expect(await sentBy(counting, () => Promise.all(keys.map((key) => kv.get(key))))).toHaveLength(keys.length);
    expect(await sentBy(counting, () => Promise.all(keys.map((key) => cache.set(key, 1))))).toHaveLength(keys.length);
    expect(() => new PostgresKeyValueStore({ pool: counting, table: tables.kv, coalesce: 'no' as never })).toThrow(
      expect.objectContaining({ code: 'E_INVALID_OPTION' }),
    );
    await Promise.all([kv.close(), cache.close()]);
    await counting.end();
  });

  test('cache: 32 concurrent gets or sets are one statement each, in the cache’s own prefix; a lone call is its single-key statement', async () => {
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 4 }));
    const tables = freshTables();
    const cache = new PostgresCacheProvider({ pool: counting, table: tables.cache, prefix: 'users:' });
    const other = new PostgresCacheProvider({ pool: counting, table: tables.cache, prefix: 'users:admin:' });
    const sql = cacheStatements(quoteIdentifier(tables.cache));
    await Promise.all([cache.ready(), other.ready()]);
    const keys = Array.from({ length: 32 }, (_, i) => `u${String(i).padStart(2, '0')}`);
    await other.set('u01', 'not mine');

    expect(await sentBy(counting, () => Promise.all(keys.map((key, i) => cache.set(key, { i }, 60_000))))).toEqual([sql.setMany]);
    expect(await sentBy(counting, () => cache.set('lone', [1]))).toEqual([sql.set]);
    let values: unknown[] = [];
    expect(await sentBy(counting, async () => (values = await Promise.all([...keys, 'missing', 'u03'].map((key) => cache.get(key)))))).toEqual([
      sql.getMany,
    ]);
    expect(values).toEqual([...keys.map((_, i) => ({ i })), null, { i: 3 }]);
    expect(await sentBy(counting, () => cache.get('lone'))).toEqual([sql.get]);
    expect(await other.get('u01')).toBe('not mine');
    expect(await other.keys()).toEqual(['u01']);
    // The last of two concurrent sets of one key wins, as it would have one after the other.
    await Promise.all([cache.set('twice', 1), cache.set('twice', 2)]);
    expect(await cache.get('twice')).toBe(2);
    await Promise.all([cache.close(), other.close()]);
    await counting.end();
  });

  test('listings: a glob with a literal start narrows by its key range, one that starts with a wildcard reads the whole table; keys come in key order', async () => {
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 2 }));
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ pool: counting, table: tables.kv });
    const cache = new PostgresCacheProvider({ pool: counting, table: tables.cache, prefix: 'c:' });
    const kvSql = keyValueStatements(new TableName(tables.kv));
    const cacheSql = cacheStatements(quoteIdentifier(tables.cache));
    // Keys around the edges of the ranges: the last code point before the surrogates, the
    // largest code point, the escape of U+0000, LIKE's wildcards as literal characters.
    const keys = ['a', 'a\uD7FF', 'a\uD7FFz', 'a\uE000', 'a\u{10FFFF}', 'a\u{10FFFF}\u{10FFFF}', 'b', 'a%', 'a_', 'a\u0000', 'a\u0001', 'a\u0000z', '\u{10FFFF}', '\u{10FFFF}x'];
    await kv.setMany(keys.map((key) => ({ key, value: key })));
    await Promise.all(keys.map((key) => cache.set(key, key)));
    // Code point order (not JavaScript's UTF-16 order), which the stored keys' byte order is.
    const sorted = keys.map((key) => [...key].map((c) => c.codePointAt(0)!));
    sorted.sort((x, y) => {
      for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
      return x.length - y.length;
    });
    const all = sorted.map((points) => String.fromCodePoint(...points));

    const cases: [pattern: string, matches: RegExp][] = [
      ['*', /^[\s\S]*$/u],
      ['a*', /^a[\s\S]*$/u],
      ['a\uD7FF*', /^a\uD7FF[\s\S]*$/u],
      ['a\u{10FFFF}*', /^a\u{10FFFF}[\s\S]*$/u],
      ['\u{10FFFF}*', /^\u{10FFFF}[\s\S]*$/u],
      ['a?', /^a[\s\S]$/u],
      // eslint-disable-next-line no-control-regex -- U+0000 in keys is the point
      ['a\u0000*', /^a\u0000[\s\S]*$/u],
      ['*z', /^[\s\S]*z$/u],
      ['a%', /^a%$/u],
    ];
    for (const [pattern, matches] of cases) {
      const want = all.filter((key) => matches.test(key));
      const ranged = pattern.startsWith('*') ? 'whole table' : 'key range';
      let got: string[] = [];
      const sent = await sentBy(counting, async () => (got = await kv.keys(pattern)));
      expect(got, `kv.keys(${JSON.stringify(pattern)})`).toEqual(want);
      expect(sent, `kv.keys(${JSON.stringify(pattern)}) reads the ${ranged}`).toEqual([ranged === 'key range' ? kvSql.keysInRange : kvSql.keys]);
      expect((await kv.entries(pattern)).map((entry) => entry.key)).toEqual(want);
      const cached = await sentBy(counting, async () => (got = await cache.keys(pattern)));
      expect(got, `cache.keys(${JSON.stringify(pattern)})`).toEqual(want);
      expect(cached).toEqual([ranged === 'key range' ? cacheSql.keysInRange : cacheSql.keys]);
      // scan() pages of 2: the same keys, one range query per page.
      const scanned: string[] = [];
      const pages = await sentBy(counting, async () => {
        for await (const key of kv.scan(pattern, { pageSize: 2 })) scanned.push(key);
      });
      expect(scanned, `kv.scan(${JSON.stringify(pattern)})`).toEqual(want);
      expect(new Set(pages)).toEqual(new Set([ranged === 'key range' ? kvSql.entriesPageInRange : kvSql.entriesPage]));
      expect(pages.length).toBe(Math.floor(want.length / 2) + 1);
      const cacheScanned: string[] = [];
      const cachePages = await sentBy(counting, async () => {
        for await (const key of cache.scan(pattern, { pageSize: 2 })) cacheScanned.push(key);
      });
      expect(cacheScanned, `cache.scan(${JSON.stringify(pattern)})`).toEqual(want);
      expect(new Set(cachePages)).toEqual(new Set([ranged === 'key range' ? cacheSql.keysPageInRange : cacheSql.keysPage]));
    }
    await Promise.all([kv.close(), cache.close()]);
    await counting.end();
  });

  test('snapshot listings page exactly on (updated_at, id), with and without an id prefix', async () => {
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 2 }));
    const tables = freshTables();
    const store = postgres<{ id: string }>({ pool: counting, table: tables.snapshots });
    const sql = snapshotStatements(new TableName(tables.snapshots));
    const ids = Array.from({ length: 12 }, (_, i) => `${i % 2 === 0 ? 'even' : 'odd'}:${i}`);
    for (const id of ids) await store.save(id, { id });
    // Ties on the millisecond, which the cursor must page through exactly, and a time with a
    // sub-millisecond part that a lossy comparison would get wrong.
    await admin.query(
      `UPDATE ${quoteIdentifier(tables.snapshots)} SET updated_at = timestamptz '2024-05-01 12:00:00.123+00' - (substr(id, strpos(id, ':') + 1)::int / 4) * interval '1 millisecond'`,
    );
    const listAll = async (prefix: string | undefined) => {
      const seen: string[] = [];
      const sent: string[] = [];
      let cursor: string | undefined;
      do {
        const statements = await sentBy(counting, async () => {
          const page = await store.listPage({ prefix, limit: 3, cursor });
          seen.push(...page.items.map((item) => item.id));
          cursor = page.nextCursor ?? undefined;
        });
        sent.push(...statements);
      } while (cursor);
      return { seen, sent };
    };
    const order = (list: string[]) =>
      [...list].sort((x, y) => {
        const tx = Math.floor(Number(x.split(':')[1]) / 4);
        const ty = Math.floor(Number(y.split(':')[1]) / 4);
        return tx !== ty ? tx - ty : x < y ? -1 : 1;
      });
    const whole = await listAll(undefined);
    expect(whole.seen).toEqual(order(ids));
    expect(new Set(whole.sent)).toEqual(new Set([sql.list, sql.listAfter]));
    const odd = await listAll('odd:');
    expect(odd.seen).toEqual(order(ids.filter((id) => id.startsWith('odd:'))));
    expect(new Set(odd.sent)).toEqual(new Set([sql.listInRange, sql.listInRangeAfter]));
    const scanned: string[] = [];
    for await (const item of store.scan({ prefix: 'even:', pageSize: 2 })) scanned.push(item.id);
    expect(scanned).toEqual(order(ids.filter((id) => id.startsWith('even:'))));
    await store.close();
    await counting.end();
  });

  test('process items list in id order along an index, with and without a state', async () => {
    const tables = freshTables();
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 2 }));
    const backend = new PostgresProcessBackend({ pool: counting, itemsTable: tables.processItems, transitionsTable: tables.processTransitions, wakeups: false });
    const sql = processStatements(quoteIdentifier(tables.processItems), quoteIdentifier(tables.processTransitions));
    const ids = ['a', 'b', 'c', 'd', 'é', '\u{10FFFF}'];
    for (const [i, id] of ids.entries()) await backend.createItem({ process: 'p', id, state: i % 2 === 0 ? 'even' : 'odd', data: {} });
    await backend.createItem({ process: 'q', id: 'a', state: 'even', data: {} });
    expect(await sentBy(counting, async () => expect((await backend.listItems({ process: 'p', limit: 10 })).map((item) => item.id)).toEqual(ids))).toEqual([
      sql.listItems,
    ]);
    expect((await backend.listItems({ process: 'p', limit: 2, after: 'b' })).map((item) => item.id)).toEqual(['c', 'd']);
    expect(
      await sentBy(counting, async () => expect((await backend.listItems({ process: 'p', state: 'even', limit: 10, after: 'a' })).map((item) => item.id)).toEqual(['c', 'é'])),
    ).toEqual([sql.listItemsInState]);
    await backend.close();
    await counting.end();
  });

  test('a process feed reads the log in (xid, seq) order, also where a number gains a digit', async () => {
    const tables = freshTables();
    const backend = new PostgresProcessBackend({ url, itemsTable: tables.processItems, transitionsTable: tables.processTransitions, wakeups: false });
    await backend.ready();
    // Log rows of transactions 99 and 100, long committed: as text, 100 sorts before 99 and 10 before 9.
    await admin.query(`INSERT INTO ${quoteIdentifier(tables.processTransitions)} (seq, xid, process, item_id, to_state, version, kind)
      OVERRIDING SYSTEM VALUE VALUES (9, '99', 'p', 'a', 's', 1, 'create'), (10, '99', 'p', 'b', 's', 1, 'create'), (11, '100', 'p', 'c', 's', 1, 'create')`);
    const feed = await backend.openFeed('p', 's', '0:0');
    const read: string[] = [];
    for (let i = 0; i < 4; i++) read.push(...(await feed.read({ limit: 1, wait: 0 })).map((change) => change.itemId));
    expect(read).toEqual(['a', 'b', 'c']);
    await feed.close();
    await backend.close();
  });

  test('clearExpired removes expired rows in batches, one statement each, only of its own table or prefix', async () => {
    const tables = freshTables();
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 2 }));
    const kv = new PostgresKeyValueStore({ pool: counting, table: tables.kv });
    const cache = new PostgresCacheProvider({ pool: counting, table: tables.cache, prefix: 'a:' });
    const neighbour = new PostgresCacheProvider({ pool: counting, table: tables.cache, prefix: 'a:b:' });
    const idempotency = new PostgresIdempotencyStore({ pool: counting, table: tables.idempotency });
    await Promise.all([kv.ready(), cache.ready(), neighbour.ready(), idempotency.ready()]);
    const expired = 2 * CLEAR_EXPIRED_BATCH + 7;
    const rows = `FROM generate_series(1, ${expired}) AS i`;
    await admin.query(`INSERT INTO ${quoteIdentifier(tables.kv)} (key, value, version, expires_at)
      SELECT 'k' || i, 'v', i, now() - interval '1 minute' ${rows}`);
    await admin.query(`INSERT INTO ${quoteIdentifier(tables.cache)} (prefix, key, value, expires_at)
      SELECT p, 'k' || i, '1', now() - interval '1 minute' ${rows}, (VALUES ('a:'), ('a:b:')) AS prefixes(p)`);
    await admin.query(`INSERT INTO ${quoteIdentifier(tables.idempotency)} (key, status, value, expires_at)
      SELECT 'k' || i, 'completed', '1', now() - interval '1 minute' ${rows}`);
    await kv.set('live', 'v', { ttl: 60_000 });
    await neighbour.set('live', 1, 60_000);

    let count = 0;
    const batches = 3; // two full batches and the rest
    expect(await sentBy(counting, async () => (count = await kv.clearExpired()))).toHaveLength(batches);
    expect(count).toBe(expired);
    expect(await kv.keys()).toEqual(['live']);
    expect(await sentBy(counting, async () => (count = await cache.clearExpired()))).toHaveLength(batches);
    expect(count).toBe(expired);
    const left = await admin.query(`SELECT prefix, count(*)::int AS n FROM ${quoteIdentifier(tables.cache)} GROUP BY prefix`);
    expect(left.rows).toEqual([{ prefix: 'a:b:', n: expired + 1 }]);
    expect(await sentBy(counting, async () => (count = await idempotency.clearExpired()))).toHaveLength(batches);
    expect(count).toBe(expired);
    expect(await sentBy(counting, async () => (count = await kv.clearExpired()))).toHaveLength(1);
    expect(count).toBe(0);
    await Promise.all([kv.close(), cache.close(), neighbour.close(), idempotency.close()]);
    await counting.end();
  });

  test('clearExpired waits for no row lock: a row another transaction holds is left for the next run', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv, pool: { max: 2 } });
    await kv.setMany([
      { key: 'a', value: '1', ttl: 1 },
      { key: 'b', value: '1', ttl: 1 },
    ]);
    await admin.query(`UPDATE ${quoteIdentifier(tables.kv)} SET expires_at = now() - interval '1 second'`);
    const holder = await admin.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${quoteIdentifier(tables.kv)} WHERE key = 'a' FOR UPDATE`);
      expect(await kv.clearExpired()).toBe(1);
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    expect(await kv.clearExpired()).toBe(1);
    await kv.close();
  });
});

/**
 * PgBouncer in transaction mode (`STOWAGE_PGBOUNCER_URL`; `.ci/pgbouncer.sh start`): versions
 * before 1.21 (Debian's is 1.18) mix named prepared statements up between clients, which the
 * connection notices and answers by sending statements unnamed. The coalesced batches, ranged
 * listings, pages and cleanup batches work both ways.
 */
const bouncer = server ? await findPgBouncer() : null;
const describeBouncer = bouncer ? describe : describe.skip;

describeBouncer('through PgBouncer in transaction mode', () => {
  const tables = tableSet();
  afterAll(async () => {
    const cleanup = new pg.Pool({ connectionString: url, max: 1 });
    await dropTables(cleanup, tables);
    await cleanup.end();
  });

  for (const preparedStatements of [true, false]) {
    test(`coalescing, ranged listings, pages and cleanup batches (preparedStatements: ${preparedStatements})`, async () => {
      const options: PostgresConnectionOptions = { url: bouncer!.url, pool: { max: 8 }, preparedStatements };
      const kv = new PostgresKeyValueStore({ ...options, table: tables.kv });
      const cache = new PostgresCacheProvider({ ...options, table: tables.cache, prefix: `p${preparedStatements}:` });
      const snapshots = postgres<{ round: number }>({ ...options, table: tables.snapshots, prefix: `p${preparedStatements}:` });
      const keys = Array.from({ length: 40 }, (_, i) => `key:${String(i).padStart(2, '0')}`);
      for (let round = 0; round < 5; round++) {
        await Promise.all(keys.map((key) => kv.set(key, `${round}`, { ttl: 60_000 })));
        expect(await Promise.all(keys.map((key) => kv.get(key)))).toEqual(keys.map(() => `${round}`));
        expect(await Promise.all(keys.map((key) => kv.exists(key)))).toEqual(keys.map(() => true));
        await Promise.all(keys.map((key) => cache.set(key, { round })));
        expect(await Promise.all(keys.map((key) => cache.get(key)))).toEqual(keys.map(() => ({ round })));
        expect(await kv.keys('key:1*')).toEqual(keys.slice(10, 20));
        expect(await cache.keys('key:2*')).toEqual(keys.slice(20, 30));
        const scanned: string[] = [];
        for await (const key of kv.scan('key:*', { pageSize: 7 })) scanned.push(key);
        expect(scanned).toEqual(keys);
        await snapshots.save(`wf:${round}`, { round });
        expect((await snapshots.list({ prefix: 'wf:', limit: 2 })).map((item) => item.id)).toHaveLength(Math.min(round + 1, 2));
        expect(await Promise.all(keys.map((key) => kv.delete(key)))).toEqual(keys.map(() => true));
        expect(await kv.clearExpired()).toBe(0);
        expect(await cache.clearExpired()).toBe(0);
      }
      await Promise.all([kv.close(), cache.close(), snapshots.close()]);
    });
  }
});
