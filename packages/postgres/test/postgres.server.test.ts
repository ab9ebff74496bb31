import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ClientClockSkew } from '@stowage/core/conformance';
import pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import {
  PostgresCacheProvider,
  PostgresCheckpointStore,
  PostgresCircuitBreakerStore,
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresSnapshotStore,
  createPostgresPersistence,
  postgres,
  schemaSql,
} from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { uniqueSuffix } from './support/context.js';
import { serverTestSetup } from './support/server.js';

/**
 * What the conformance suite cannot see from outside: processes, pools, connections, round
 * trips, identifiers and the driver's errors, against the real PostgreSQL server.
 */
const { server, url, admin, describeServer, freshTables } = await serverTestSetup();
if (server) console.log(`[stowage postgres] specific tests backend: ${server.label}`);

async function expectCode(promise: Promise<unknown>, code: string): Promise<unknown> {
  const error = await promise.then(
    () => null,
    (reason: unknown) => reason,
  );
  expect(error, `expected a rejection with ${code}`).not.toBeNull();
  expect((error as { code?: string }).code).toBe(code);
  return error;
}

/** Polls `condition` until it holds (the server ends backends asynchronously after a client leaves). */
async function eventually(condition: () => Promise<boolean>, what: string, attempts = 100): Promise<void> {
  for (let i = 0; i < attempts; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`never happened: ${what}`);
}

describeServer('postgres server specifics', () => {
  afterAll(async () => {
    await admin.query('DROP SCHEMA IF EXISTS stowage_first_use CASCADE');
  });

  test('20 OS processes use fresh tables at once: one schema, no errors, no lost increment, one winner each', { timeout: 120_000 }, async () => {
    const processes = 20;
    const failuresEach = 10;
    const maxFailures = 100;
    const schema = 'stowage_first_use';
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    const tables = freshTables(schema);
    const worker = fileURLToPath(new URL('./support/first-use-worker.ts', import.meta.url));
    const children = Array.from({ length: processes }, (_, index) =>
      spawn(process.execPath, [worker, String(index)], {
        env: {
          ...process.env,
          STOWAGE_WORKER_URL: url,
          STOWAGE_WORKER_SCHEMA: schema,
          STOWAGE_WORKER_TABLES: JSON.stringify(tables),
          STOWAGE_WORKER_FAILURES: String(failuresEach),
          STOWAGE_WORKER_MAX_FAILURES: String(maxFailures),
        },
        stdio: ['pipe', 'pipe', 'pipe'],
      }),
    );
    const ready: Promise<void>[] = [];
    const outputs = children.map(
      (child) =>
        new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
          let stdout = '';
          let stderr = '';
          ready.push(
            new Promise((loaded) =>
              child.stdout.on('data', (chunk) => {
                stdout += chunk;
                if (stdout.startsWith('ready\n')) loaded();
              }),
            ),
          );
          child.stderr.on('data', (chunk) => (stderr += chunk));
          child.on('exit', (code) => resolve({ code, stdout, stderr }));
        }),
    );
    // Once every process has loaded, release them together.
    await Promise.race([Promise.all(ready), Promise.all(outputs)]);
    for (const child of children) child.stdin.end('go\n');
    const results = await Promise.all(outputs);
    for (const result of results) expect(result.code, result.stderr).toBe(0);
    const reports = results.map((result) => JSON.parse(result.stdout.replace('ready\n', '').trim()) as {
      lockWon: boolean;
      workflowLockWon: boolean;
      reservation: string;
      failureCounts: number[];
    });

    expect(reports.filter((report) => report.lockWon)).toHaveLength(1);
    expect(reports.filter((report) => report.workflowLockWon)).toHaveLength(1);
    expect(reports.filter((report) => report.reservation === 'acquired')).toHaveLength(1);
    const counts = reports.flatMap((report) => report.failureCounts).sort((a, b) => a - b);
    const total = processes * failuresEach;
    expect(counts, 'every increment seen exactly once').toEqual(Array.from({ length: total }, (_, i) => i + 1));
    expect(counts.filter((count) => count === maxFailures)).toHaveLength(1);
    console.log(
      `[stowage postgres] ${processes} processes x ${failuresEach} recordFailure = ${total} increments, ` +
        `final count ${counts.at(-1)}, lost ${total - counts.at(-1)!}, transitions to open seen: 1`,
    );

    const { rows } = await admin.query(`SELECT count(*)::int AS n FROM ${schema}.${tables.kv}`);
    expect(rows[0].n).toBe(processes);
    const checkpoints = await admin.query(`SELECT count(*)::int AS n FROM ${schema}.${tables.checkpoints}`);
    expect(checkpoints.rows[0].n).toBe(processes);
  });

  test('a pool passed in is never ended: still usable after close()', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    const tables = freshTables();
    const stores = [
      new PostgresKeyValueStore({ pool, table: tables.kv }),
      postgres({ pool, table: tables.snapshots, lock: { lockTableName: tables.workflowLocks } }),
      new PostgresLockProvider({ pool, table: tables.locks }),
      new PostgresCacheProvider({ pool, table: tables.cache }),
      new PostgresCircuitBreakerStore({ pool, table: tables.circuitBreaker }),
      new PostgresCheckpointStore({ pool, table: tables.checkpoints }),
      new PostgresIdempotencyStore({ existingPool: pool, table: tables.idempotency }),
    ];
    for (const store of stores) await store.ready();
    await stores[0]!.close();
    for (const store of stores) await store.close();
    await expectCode((stores[0] as PostgresKeyValueStore).get('k'), 'E_CLOSED');
    const { rows } = await pool.query('SELECT 1 AS one');
    expect(rows[0].one).toBe(1);
    await pool.end();
  });

  test('no connections are left behind: pg_stat_activity is back to its baseline after close', async () => {
    const applicationName = `stowage-leak-${uniqueSuffix()}`;
    const count = async () =>
      (await admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [applicationName])).rows[0]
        .n as number;
    expect(await count()).toBe(0);
    const tables = freshTables();
    const options = { url, applicationName };
    const kv = new PostgresKeyValueStore({ ...options, table: tables.kv, cleanupInterval: 60_000 });
    const snapshots = postgres({ ...options, table: tables.snapshots, lock: { lockTableName: tables.workflowLocks } });
    const locks = new PostgresLockProvider({ ...options, table: tables.locks });
    const persistence = await createPostgresPersistence({ connectionString: url, applicationName, tableName: tables.kv });
    await Promise.all([kv.set('a', '1'), kv.set('b', '2'), snapshots.save('s', { formatVersion: 1 } as never)]);
    await snapshots.tryAcquire('s');
    await locks.ready(); // opens the LISTEN connection
    const held = await locks.acquire('job', 60_000, 'a');
    const waiting = locks.acquire('job', 60_000, { owner: 'b', wait: 2_000 });
    await held!.release();
    expect((await waiting)?.owner).toBe('b');
    await persistence.save('wf', { formatVersion: 1 } as never);
    expect(await count(), 'connections while in use').toBeGreaterThan(1);
    await Promise.all([kv.close(), snapshots.close(), locks.close(), persistence.close()]);
    await eventually(async () => (await count()) === 0, `connections of ${applicationName} to drop to 0`);
  });

  test('a client clock ten minutes off still sees correct expiry and leases', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    const locks = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await Promise.all([kv.ready(), locks.ready()]);
    const skew = new ClientClockSkew();
    try {
      for (const offset of [10 * 60_000, -10 * 60_000]) {
        skew.set(offset);
        await kv.set(`k${offset}`, 'v', { ttl: 30_000 });
        expect(await kv.get(`k${offset}`)).toBe('v');
        const entry = await kv.getEntry(`k${offset}`);
        const serverNow = Number((await admin.query('SELECT (extract(epoch from now()) * 1000)::float8 AS ms')).rows[0].ms);
        // Expiry is 30 s after the server's now, whatever this process's Date says.
        expect(Math.abs(entry!.expiresAt!.getTime() - (serverNow + 30_000))).toBeLessThan(5_000);
        const lease = await locks.acquire(`lock${offset}`, 30_000, 'a');
        expect(await locks.acquire(`lock${offset}`, 30_000, 'b')).toBeNull();
        expect(Math.abs(lease!.expiresAt.getTime() - (serverNow + 30_000))).toBeLessThan(5_000);
        skew.restore();
      }
    } finally {
      skew.restore();
      await kv.close();
      await locks.close();
    }
  });

  test('identifier options that try injection are rejected with E_INVALID_OPTION; valid names are quoted', async () => {
    const hostile = ['x"; DROP TABLE pg_class; --', 'a b', '1abc', 'a-b', '', 'x'.repeat(64), 'ta\u0000ble', 'naïve'];
    for (const name of hostile) {
      for (const create of [
        () => new PostgresKeyValueStore({ url, table: name }),
        () => new PostgresKeyValueStore({ url, schema: name }),
        () => new PostgresSnapshotStore({ url, table: name }),
        () => postgres({ url, lock: { lockTableName: name } }),
        () => new PostgresLockProvider({ url, table: name }),
        () => new PostgresCacheProvider({ url, table: name }),
        () => new PostgresCircuitBreakerStore({ url, table: name }),
        () => new PostgresCheckpointStore({ url, table: name }),
        () => new PostgresIdempotencyStore({ url, table: name }),
        () => schemaSql({ schema: name }),
        () => schemaSql({ tables: { kv: name } }),
      ]) {
        expect(create, JSON.stringify(name)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      }
    }
    await expectCode(createPostgresPersistence({ connectionString: url, tableName: 'bad"name' }), 'E_INVALID_OPTION');

    // Upper case survives because names are always quoted.
    const table = `Mixed_${uniqueSuffix()}`;
    freshTables(undefined, { kv: table });
    const kv = new PostgresKeyValueStore({ url, table });
    await kv.set('k', 'v');
    const { rows } = await admin.query('SELECT 1 FROM information_schema.tables WHERE table_name = $1', [table]);
    expect(rows).toHaveLength(1);
    await kv.close();
  });

  test('keys with U+0000 and U+0001 are stored escaped, round-trip, and match globs exactly', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    const keys = ['a\u0000b', 'a\u0001b', 'axb', 'a\u00010b', '\u0000', '0', 'a\u0000\u0000b'];
    await kv.setMany(keys.map((key, i) => ({ key, value: `v${i}\u0000` })));
    expect(await kv.getMany(keys)).toEqual(keys.map((_, i) => `v${i}\u0000`));
    expect(await kv.keys('a?b')).toEqual(['a\u0000b', 'a\u0001b', 'axb']);
    expect(await kv.keys('*0')).toEqual(['0']);
    expect(await kv.keys('a\u0001*')).toEqual(['a\u00010b', 'a\u0001b']);
    expect(await kv.keys('a??b')).toEqual(['a\u0000\u0000b', 'a\u00010b']);
    expect(await kv.keys('\u0000')).toEqual(['\u0000']);
    const { rows } = await admin.query(`SELECT key FROM ${tables.kv} WHERE strpos(key, chr(1)) > 0 ORDER BY key`);
    expect(rows.map((row: { key: string }) => row.key)).toContain('a\u00010b'.replace('\u0001', '\u00011'));
    expect(await kv.deleteMany(keys)).toBe(keys.length);
    await kv.close();
  });

  test('key-value values are text: ordinary ones read in SQL as written, U+0000 and U+0001 escaped and round-trip', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    const values = ['plain ✓', '\u0000', '\u0001', '\u00010', '\u00011', 'a\u0000b\u0001c', ''];
    await kv.setMany(values.map((value, i) => ({ key: `k${i}`, value })));
    expect(await kv.getMany(values.map((_, i) => `k${i}`))).toEqual(values);
    for (const [i, value] of values.entries()) {
      await kv.set(`single${i}`, value);
      expect(await kv.get(`single${i}`)).toBe(value);
      expect((await kv.getEntry(`single${i}`))?.value).toBe(value);
    }
    const k1 = (await kv.getEntry('k1'))!.version;
    expect(await kv.compareAndSet('k1', '\u0001\u0000', k1)).toBeGreaterThan(k1);
    expect(await kv.get('k1')).toBe('\u0001\u0000');
    const { rows } = await admin.query(`SELECT key, value, pg_typeof(value)::text AS type FROM ${tables.kv} WHERE key IN ('k0', 'k3')`);
    const stored = Object.fromEntries(rows.map((row: { key: string; value: string }) => [row.key, row.value]));
    expect(stored).toEqual({ k0: 'plain ✓', k3: '\u00011' + '0' });
    expect(rows.every((row: { type: string }) => row.type === 'text')).toBe(true);
    await kv.close();
  });

  test('1 MB values round-trip in every store', async () => {
    const tables = freshTables();
    const big = 'x'.repeat(1024 * 1024 - 2) + '\u0000😀';
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    const snapshots = new PostgresSnapshotStore<{ big: string }>({ url, table: tables.snapshots });
    const cache = new PostgresCacheProvider({ url, table: tables.cache });
    const checkpoints = new PostgresCheckpointStore({ url, table: tables.checkpoints });
    await kv.set('big', big);
    expect(await kv.get('big')).toBe(big);
    await snapshots.save('big', { big });
    expect(await snapshots.load('big')).toEqual({ big });
    await cache.set('big', { big });
    expect(await cache.get('big')).toEqual({ big });
    await checkpoints.save({ id: 'c', taskId: 't', sequence: 1, timestamp: 1, progress: 0.5, data: { big } });
    expect((await checkpoints.load('c'))!.data).toEqual({ big });
    await Promise.all([kv.close(), snapshots.close(), cache.close(), checkpoints.close()]);
  });

  test('every single and batch operation is one statement (one round trip)', async () => {
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 2 }));
    const tables = freshTables();
    const pool = counting;
    const kv = new PostgresKeyValueStore({ pool, table: tables.kv });
    const snapshots = postgres({ pool, table: tables.snapshots, lock: { lockTableName: tables.workflowLocks } });
    const locks = new PostgresLockProvider({ pool, table: tables.locks, wakeups: false });
    const cache = new PostgresCacheProvider({ pool, table: tables.cache, prefix: 'p:' });
    const breaker = new PostgresCircuitBreakerStore({ pool, table: tables.circuitBreaker });
    const checkpoints = new PostgresCheckpointStore({ pool, table: tables.checkpoints });
    const idempotency = new PostgresIdempotencyStore({ pool, table: tables.idempotency });

    const statementsOf = async (what: string, operation: () => Promise<unknown>, expected = 1) => {
      counting.reset();
      await operation();
      expect(counting.count, `${what}: ${counting.statements.join(' | ')}`).toBe(expected);
    };

    // The first call also looks for an existing table of an older layout, reads the catalog for
    // the store's tables and creates them (once); every later call is one statement.
    await statementsOf('first kv.get (with the looks and the DDL)', () => kv.get('a'), 4);
    // On tables that are all there, a store of another pool (another process) runs no DDL.
    const otherPool = new CountingPool(new pg.Pool({ connectionString: url, max: 1 }));
    const again = new PostgresKeyValueStore({ pool: otherPool, table: tables.kv });
    await again.get('a');
    expect(otherPool.statements.filter((text) => /CREATE|lock/i.test(text)), 'DDL or locks of a start on existing tables').toEqual([]);
    expect(otherPool.count, `a start on existing tables: ${otherPool.statements.join(' | ')}`).toBe(3);
    await again.close();
    await otherPool.end();
    const keys = Array.from({ length: 100 }, (_, i) => `k${i}`);
    await statementsOf('kv.get', () => kv.get('a'));
    await statementsOf('kv.set', () => kv.set('a', '1', { ttl: 60_000 }));
    await statementsOf('kv.exists', () => kv.exists('a'));
    await statementsOf('kv.delete', () => kv.delete('a'));
    await statementsOf('kv.keys', () => kv.keys('k*'));
    await statementsOf('kv.entries', () => kv.entries('k?'));
    await statementsOf('kv.setMany(100)', () => kv.setMany(keys.map((key) => ({ key, value: key }))));
    await statementsOf('kv.getMany(100)', () => kv.getMany(keys));
    await statementsOf('kv.deleteMany(100)', () => kv.deleteMany(keys));
    await statementsOf('kv.getMany([])', () => kv.getMany([]), 0);
    await statementsOf('kv.getEntry', () => kv.getEntry('a'));
    let version = 0;
    await statementsOf('kv.compareAndSet(null)', async () => (version = await kv.compareAndSet('c', 'v', null)));
    await statementsOf('kv.compareAndSet(version)', () => kv.compareAndSet('c', 'v', version));
    await statementsOf('kv.clearExpired', () => kv.clearExpired());

    await snapshots.ready();
    await statementsOf('snapshots.save', () => snapshots.save('s', { formatVersion: 1 } as never));
    const saved = (await snapshots.loadVersioned('s'))!.version;
    await statementsOf('snapshots.save(expectedVersion)', () => snapshots.save('s', { formatVersion: 1 } as never, { expectedVersion: saved }));
    await statementsOf('snapshots.load', () => snapshots.load('s'));
    await statementsOf('snapshots.loadVersioned', () => snapshots.loadVersioned('s'));
    await statementsOf('snapshots.list', () => snapshots.list({ limit: 10 }));
    await statementsOf('snapshots.listPage', () => snapshots.listPage({ limit: 1 }));
    await statementsOf('snapshots.delete', () => snapshots.delete('s'));
    let token = '';
    await statementsOf('snapshots.tryAcquire', async () => (token = (await snapshots.tryAcquire('w'))!.ownerToken));
    await statementsOf('snapshots.renew', () => snapshots.renew('w', token));
    await statementsOf('snapshots.release', () => snapshots.release('w', token));

    await locks.ready();
    let handle = null as Awaited<ReturnType<PostgresLockProvider['acquire']>>;
    await statementsOf('locks.acquire', async () => (handle = await locks.acquire('l', 60_000, 'o')));
    await statementsOf('handle.extend', () => handle!.extend(60_000));
    await statementsOf('handle.isValid', () => handle!.isValid());
    await statementsOf('locks.extend', () => locks.extend('l', 60_000, 'o'));
    await statementsOf('handle.release', () => handle!.release());
    await statementsOf('locks.release', () => locks.release('l', 'o'));
    await statementsOf('locks.forceRelease', () => locks.forceRelease('l'));
    await statementsOf('locks.clearExpired', () => locks.clearExpired());
    await statementsOf('locks.withLock (acquire + release)', () => locks.withLock('l', async () => 'x', { ttl: 60_000 }), 2);

    await cache.ready();
    await statementsOf('cache.set', () => cache.set('k', { a: 1 }));
    await statementsOf('cache.get', () => cache.get('k'));
    await statementsOf('cache.has', () => cache.has('k'));
    await statementsOf('cache.keys', () => cache.keys());
    await statementsOf('cache.getOrSet (hit)', () => cache.getOrSet('k', async () => 1));
    await statementsOf('cache.getOrSet (miss: read, then write)', () => cache.getOrSet('m', async () => 1), 2);
    await statementsOf('cache.delete', () => cache.delete('k'));
    await statementsOf('cache.clear', () => cache.clear());
    await statementsOf('cache.clearExpired', () => cache.clearExpired());

    await breaker.ready();
    await statementsOf('breaker.recordFailure', () => breaker.recordFailure('b', 3, { cooldown: 1000 }));
    await statementsOf('breaker.getState', () => breaker.getState('b'));
    await statementsOf('breaker.setState', () => breaker.setState('b', { state: 'closed', failureCount: 0 }));
    await statementsOf('breaker.recordSuccess', () => breaker.recordSuccess('b'));
    await statementsOf('breaker.delete', () => breaker.delete('b'));

    await checkpoints.ready();
    await statementsOf('checkpoints.save', () => checkpoints.save({ id: 'c1', taskId: 't', sequence: 1, timestamp: 1, progress: 0, data: null }));
    await statementsOf('checkpoints.load', () => checkpoints.load('c1'));
    await statementsOf('checkpoints.loadLatest', () => checkpoints.loadLatest('t'));
    await statementsOf('checkpoints.list', () => checkpoints.list('t'));
    await statementsOf('checkpoints.cleanup', () => checkpoints.cleanup('t', 1));
    await statementsOf('checkpoints.deleteAll', () => checkpoints.deleteAll('t'));

    await idempotency.ready();
    let claim = '';
    await statementsOf('idempotency.reserve', async () => {
      const reservation = await idempotency.reserve('op', 60_000);
      if (reservation.status === 'acquired') claim = reservation.token;
    });
    await statementsOf('idempotency.complete', () => idempotency.complete('op', claim, { ok: true }));
    await statementsOf('idempotency.get', () => idempotency.get('op'));
    await statementsOf('idempotency.set', () => idempotency.set('op2', 1, 60_000));
    await statementsOf('idempotency.fail', () => idempotency.fail('op2', 'nobody'));
    await statementsOf('idempotency.delete', () => idempotency.delete('op'));
    await statementsOf('idempotency.clearExpired', () => idempotency.clearExpired());

    const persistence = await createPostgresPersistence({ existingPool: pool, tableName: tables.kv });
    await statementsOf('persistence.save', () => persistence.save('wf', { formatVersion: 1 } as never));
    await statementsOf('persistence.load', () => persistence.load('wf'));
    await statementsOf('persistence.list', () => persistence.list());

    for (const store of [kv, snapshots, locks, cache, breaker, checkpoints, idempotency, persistence]) await store.close();
    await counting.end();
  });

  test('statements are prepared once per connection; a session that lost or already holds them falls back to unnamed statements', async () => {
    const tables = freshTables();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const prepared = async () =>
      (await pool.query(`SELECT name FROM pg_prepared_statements WHERE name LIKE 'stowage\\_%'`)).rows.map((row) => row.name as string);

    const kv = new PostgresKeyValueStore({ pool, table: tables.kv });
    await kv.set('a', '1');
    expect(await kv.get('a')).toBe('1');
    const names = await prepared();
    expect(names.length, 'kv.set and kv.get').toBe(2);

    // A pooler may hand the client another session: pg believes the statement is prepared, the
    // server does not know it (26000). The call still succeeds, unnamed from then on.
    await pool.query('DEALLOCATE ALL');
    expect(await kv.get('a')).toBe('1');
    await kv.set('a', '2');
    expect(await prepared(), 'no statement prepared again after the fallback').toEqual([]);
    await kv.close();

    // A session shared with another client that prepared the same statement (PGlite's socket
    // server) answers the Parse with 42P05: from then on the names include the pg client.
    const other = new PostgresKeyValueStore({ pool, table: tables.kv });
    await pool.query(`PREPARE "${names[0]}" AS SELECT 1`);
    await pool.query(`PREPARE "${names[1]}" AS SELECT 1`);
    expect(await other.get('a')).toBe('2');
    await other.set('a', '3');
    expect(await other.get('a')).toBe('3');
    const perClient = (await prepared()).filter((name) => !names.includes(name));
    expect(perClient).toHaveLength(2);
    for (const name of perClient) expect(names.some((shared) => name.startsWith(`${shared}_`)), name).toBe(true);
    await other.close();

    const unprepared = new PostgresKeyValueStore({ pool, table: tables.kv, preparedStatements: false });
    await pool.query('DEALLOCATE ALL');
    expect(await unprepared.get('a')).toBe('3');
    expect(await prepared()).toEqual([]);
    await expectCode(Promise.resolve().then(() => new PostgresKeyValueStore({ pool, preparedStatements: 'yes' as never })), 'E_INVALID_OPTION');
    await unprepared.close();
    await pool.end();
  });

  test('driver errors map to E_UNAVAILABLE, E_TIMEOUT and E_INVALID_OPTION with the driver error as cause', async () => {
    const unreachable = new PostgresKeyValueStore({ url: 'postgresql://postgres@127.0.0.1:1/test', pool: { connectionTimeoutMillis: 2000 } });
    const refused = (await expectCode(unreachable.get('k'), 'E_UNAVAILABLE')) as Error;
    expect(refused.cause).toBeInstanceOf(Error);
    await unreachable.close();

    // A row lock held elsewhere makes the write wait past statement_timeout (server side)...
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv, pool: { statement_timeout: 300 } });
    await kv.set('locked', 'v');
    const holder = await admin.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${tables.kv} WHERE key = 'locked' FOR UPDATE`);
      const timedOut = (await expectCode(kv.set('locked', 'w'), 'E_TIMEOUT')) as Error & { cause: { code?: string } };
      expect(timedOut.cause.code).toBe('57014');
      expect(await kv.get('locked'), 'the server cancelled the statement').toBe('v');
      // ...and past the client-side query_timeout (the server may still run that statement later:
      // a client-side timeout leaves the outcome unknown).
      const impatient = new PostgresKeyValueStore({ url, table: tables.kv, pool: { query_timeout: 300 } });
      await expectCode(impatient.set('locked', 'w'), 'E_TIMEOUT');
      await impatient.close();
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    await kv.close();

    // A missing table with autoCreate off is a configuration problem, and says how to fix it.
    const manual = new PostgresKeyValueStore({ url, table: `missing_${uniqueSuffix()}`, autoCreate: false });
    const missing = (await expectCode(manual.get('k'), 'E_INVALID_OPTION')) as Error;
    expect(missing.message).toMatch(/missing.*autoCreate is false.*schemaSql/);
    await manual.close();
  });

  test('schemaSql is the DDL the stores run; with autoCreate: false the stores use tables made from it', async () => {
    const schema = `stowage_ddl_${uniqueSuffix()}`;
    const tables = freshTables(schema);
    const names = {
      kv: tables.kv,
      snapshots: tables.snapshots,
      locks: tables.locks,
      cache: tables.cache,
      circuitBreaker: tables.circuitBreaker,
      checkpoints: tables.checkpoints,
      idempotency: tables.idempotency,
    };
    const ddl = schemaSql({ schema, tables: names });
    expect(ddl).toContain(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    expect(ddl).toContain(`CREATE TABLE IF NOT EXISTS "${schema}"."${tables.kv}"`);
    await admin.query(ddl);
    await admin.query(ddl); // idempotent
    const options = { url, schema, autoCreate: false };
    const kv = new PostgresKeyValueStore({ ...options, table: tables.kv });
    expect(kv.schemaSql()).toBe(schemaSql({ schema, tables: { kv: tables.kv }, only: ['kv'] }));
    const breaker = new PostgresCircuitBreakerStore({ ...options, table: tables.circuitBreaker });
    await kv.set('k', 'v');
    expect(await kv.get('k')).toBe('v');
    expect(await breaker.recordFailure('svc', 1)).toBe(1);
    await kv.close();
    await breaker.close();
    await admin.query(`DROP SCHEMA ${schema} CASCADE`);
  });

  test('fences never go back, also after clearExpired deletes every expired lease', async () => {
    const tables = freshTables();
    const locks = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    const first = await locks.acquire('job', 50, 'a');
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(await locks.clearExpired()).toBe(1);
    const { rows } = await admin.query(`SELECT count(*)::int AS n FROM ${tables.locks}`);
    expect(rows[0].n).toBe(0);
    const second = await locks.acquire('job', 60_000, 'b');
    expect(second!.fence).toBeGreaterThan(first!.fence);
    await locks.close();
    const restarted = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await restarted.forceRelease('job');
    const third = await restarted.acquire('job', 60_000, 'c');
    expect(third!.fence).toBeGreaterThan(second!.fence);
    await restarted.close();
  });

  test('LISTEN wake-ups are detected on the server; wakeups: false polls only and opens no listener', async () => {
    const tables = freshTables();
    const listening = new PostgresLockProvider({ url, table: tables.locks });
    expect(listening.capabilities.wakeups).toBe(false); // not known before ready()
    await listening.ready();
    expect(listening.capabilities.wakeups).toBe(true);
    expect(listening.capabilities.changeFeed).toBe(true);
    const polling = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await polling.ready();
    expect(polling.capabilities.wakeups).toBe(false);
    expect(polling.capabilities).toMatchObject({ serverClock: true, fencing: true, ttlIndex: false, transactions: true, crossProcess: true });
    await listening.close();
    await polling.close();
  });

  test('cleanupInterval removes expired rows in the background', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv, cleanupInterval: 100 });
    await kv.set('short', 'v', { ttl: 50 });
    await kv.set('long', 'v');
    const rows = async () => (await admin.query(`SELECT key FROM ${tables.kv} ORDER BY key`)).rows.map((row: { key: string }) => row.key);
    await eventually(async () => (await rows()).join() === 'long', 'the expired row to be deleted');
    await kv.close();
  });

  test('seed 002 and 003 usage: createPostgresPersistence and postgres() with the documented SQL', async () => {
    const tables = freshTables();
    const persistence = await createPostgresPersistence({
      connectionString: url,
      tableName: tables.kv,
      prefix: 'myapp:workflow:',
      pool: { max: 2, idleTimeoutMillis: 30_000, connectionTimeoutMillis: 2_000 },
    });
    const snapshot = { formatVersion: 1 as const, steps: {}, execution: { status: 'completed' as const, lastUpdated: new Date().toISOString() } };
    await persistence.save('checkout-123', snapshot);
    expect(await persistence.load('checkout-123')).toEqual(snapshot);
    expect((await persistence.list()).map((item) => item.id)).toEqual(['checkout-123']);
    // awaitly's layout, prefix and id in one key; and the record of the prefixes in use (README, "Schema").
    const keys = await admin.query(`SELECT key, value FROM ${tables.kv} ORDER BY key COLLATE "C"`);
    expect(keys.rows).toEqual([
      { key: 'myapp:workflow:checkout-123', value: JSON.stringify(snapshot) },
      { key: '\u007fstowage:state-prefixes', value: JSON.stringify({ prefixes: ['myapp:workflow:'] }) },
    ]);
    await persistence.close();

    const store = postgres({ url, table: tables.snapshots, prefix: 'orders:' });
    await store.save('wf-1', snapshot);
    const byStatus = await admin.query(
      `SELECT (snapshot->'execution')->>'status' AS status, COUNT(*)::int AS n FROM ${tables.snapshots} GROUP BY 1`,
    );
    expect(byStatus.rows).toEqual([{ status: 'completed', n: 1 }]);
    expect(await store.list({ prefix: 'wf', limit: 50 })).toEqual([{ id: 'wf-1', updatedAt: expect.any(String) }]);
    expect('tryAcquire' in store).toBe(false);
    await store.close();

    const locking = postgres(url);
    expect(locking).toBeInstanceOf(PostgresSnapshotStore);
    await locking.close();
  });
});
