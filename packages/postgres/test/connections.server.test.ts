import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { LockHandle } from '@stowage/core';
import pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { PostgresKeyValueStore, PostgresLockProvider, connect, grantsSql, schemaSql } from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { uniqueSuffix } from './support/context.js';
import { serverTestSetup } from './support/server.js';

/**
 * How stores use connections: one pool and one LISTEN connection per database, wake-ups that
 * come back after a failure, one waiter woken per release, and what happens to calls in
 * flight when a store is closed or its pool ended. Counts (connections, statements) and
 * outcomes, never timings.
 */
const { url, admin, describeServer, freshTables } = await serverTestSetup();
const roles: string[] = [];

/** Polls `condition` until it holds (the server and the listener act asynchronously). */
async function eventually(condition: () => boolean | Promise<boolean>, what: string, attempts = 3000): Promise<void> {
  for (let i = 0; i < attempts; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`never happened: ${what}`);
}

async function connectionsOf(applicationName: string): Promise<number> {
  const { rows } = await admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [applicationName]);
  return rows[0].n;
}

/** The pid of the LISTEN connection of `applicationName` (its last statement was a LISTEN). */
async function listenerPid(applicationName: string): Promise<number | undefined> {
  const { rows } = await admin.query(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, [applicationName]);
  return rows.length === 1 ? (rows[0].pid as number) : undefined;
}

/**
 * Runs `test/support/<name>` in a child process on fresh tables and returns what it printed,
 * after checking it exited by itself with 0 (if it hangs, the test's own timeout fails it).
 */
async function runWorker(name: string): Promise<string> {
  const worker = fileURLToPath(new URL(`./support/${name}`, import.meta.url));
  const child = spawn(process.execPath, [worker], {
    env: { ...process.env, STOWAGE_WORKER_URL: url, STOWAGE_WORKER_TABLES: JSON.stringify(freshTables()) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  expect(code, stderr).toBe(0);
  return stdout;
}

/**
 * A waiting acquisition that can only be woken by a NOTIFY: its poll interval is longer than
 * the test. Resolves to the handle once the holder releases.
 */
async function expectWokenByRelease(holder: PostgresLockProvider, waiter: PostgresLockProvider, key: string): Promise<void> {
  const held = (await holder.acquire(key, 60_000, 'holder'))!;
  const waiting = waiter.acquire(key, 60_000, { owner: 'waiter', wait: 600_000, pollInterval: 600_000 });
  // Usually the waiter has tried (and failed) by now, so the release is what wakes it. Should
  // it not have, its first attempt succeeds: the outcome is the same either way.
  await new Promise((resolve) => setTimeout(resolve, 100));
  await held.release();
  const handle = await waiting;
  expect(handle?.owner).toBe('waiter');
  await handle!.release();
}

describeServer('connections', () => {
  afterAll(async () => {
    for (const role of roles) await admin.query(`DROP OWNED BY ${role}; DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
  });

  test('every store on one URL shares one pool and one LISTEN connection: at most pool max + 1 server connections', async () => {
    const applicationName = `stowage-share-${uniqueSuffix()}`;
    const tables = freshTables();
    const max = 3;
    // A long idle timeout: every connection a pool opened is still there when counted.
    const settings = { url, applicationName, pool: { max, idleTimeoutMillis: 600_000 } };
    const db = connect(settings);
    const stores = {
      kv: db.kv({ table: tables.kv }),
      snapshots: db.snapshots({ table: tables.snapshots, lock: { lockTableName: tables.workflowLocks } }),
      locks: db.locks({ table: tables.locks }),
      cache: db.cache({ table: tables.cache }),
      breaker: db.circuitBreaker({ table: tables.circuitBreaker }),
      checkpoints: db.checkpoints({ table: tables.checkpoints }),
      idempotency: db.idempotency({ table: tables.idempotency }),
      process: db.process({ itemsTable: tables.processItems, transitionsTable: tables.processTransitions }),
      // Created directly from the same settings: the same pool again.
      direct: new PostgresKeyValueStore({ ...settings, table: tables.kv }),
      directLocks: new PostgresLockProvider({ ...settings, table: tables.locks }),
    };
    await Promise.all(Object.values(stores).map((store) => store.ready()));
    expect(stores.locks.capabilities.wakeups).toBe(true);
    expect(stores.process.capabilities.wakeups).toBe(true);
    const each = Array.from({ length: 20 }, (_, i) => i);
    await Promise.all([
      ...each.map((i) => stores.kv.compareAndSet(`k${i}`, 'v', null)),
      ...each.map((i) => stores.direct.getEntry(`k${i}`)),
      ...each.map((i) => stores.snapshots.save(`s${i}`, { formatVersion: 1 } as never)),
      ...each.map((i) => stores.snapshots.tryAcquire(`w${i}`)),
      ...each.map((i) => stores.cache.set(`c${i}`, i)),
      ...each.map((i) => stores.breaker.recordFailure(`b${i}`, 5)),
      ...each.map((i) => stores.checkpoints.save({ id: `cp${i}`, taskId: 't', sequence: i, timestamp: 0, progress: 0, data: null })),
      ...each.map((i) => stores.idempotency.reserve(`op${i}`, 60_000)),
      ...each.map((i) => stores.process.createItem({ process: 'p', id: `i${i}`, state: 'new', data: {} })),
      ...each.map((i) => stores.locks.acquire(`l${i}`, 60_000)),
      ...each.map((i) => stores.directLocks.acquire(`d${i}`, 60_000)),
    ]);
    await expectWokenByRelease(stores.locks, stores.directLocks, 'handed-over');
    const open = await connectionsOf(applicationName);
    expect(open, 'pool max + the LISTEN connection').toBeLessThanOrEqual(max + 1);
    expect(await listenerPid(applicationName), 'one LISTEN connection').toBeDefined();

    // A store that closes leaves the pool to the others; connect() closes the rest and the pool.
    await stores.direct.close();
    await stores.directLocks.close();
    expect(await stores.kv.get('k1')).toBe('v');
    await db.close();
    await expect(stores.kv.get('k1')).rejects.toMatchObject({ code: 'E_CLOSED' });
    expect(() => db.kv()).toThrow(expect.objectContaining({ code: 'E_CLOSED' }));
    await eventually(async () => (await connectionsOf(applicationName)) === 0, 'every connection closed');
  });

  test('connect() takes the connection settings once: a store given its own is E_INVALID_OPTION', async () => {
    const db = connect({ url, pool: { max: 1 } });
    expect(() => db.kv({ url } as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    expect(() => db.locks({ pool: { max: 5 } } as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    await db.close();
    await db.close();
  });

  test('connect(pool) puts every store on a pg.Pool of yours, and close() leaves it open', async () => {
    const tables = freshTables();
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    const counting = new CountingPool(pool);
    const db = connect(counting);
    const kv = db.kv({ table: tables.kv });
    const locks = db.locks({ table: tables.locks, wakeups: false });
    await kv.set('k', 'v');
    expect((await locks.acquire('l', 60_000))?.fence).toBeGreaterThan(0);
    expect(counting.statements.some((text) => text.includes(tables.kv)), 'the kv store sent through the given pool').toBe(true);
    expect(counting.statements.some((text) => text.includes(tables.locks)), 'the lock provider sent through the given pool').toBe(true);
    await db.close();
    await expect(kv.get('k')).rejects.toMatchObject({ code: 'E_CLOSED' });
    expect((await pool.query('SELECT 1 AS one')).rows[0].one, 'the pool is still yours, and open').toBe(1);
    await pool.end();
  });

  test('a LISTEN connection the server terminates is opened again, and wake-ups work again', async () => {
    const applicationName = `stowage-relisten-${uniqueSuffix()}`;
    const tables = freshTables();
    const locks = new PostgresLockProvider({ url, applicationName, table: tables.locks });
    const other = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await locks.ready();
    expect(locks.capabilities.wakeups).toBe(true);
    const first = await listenerPid(applicationName);
    expect(first).toBeDefined();
    await admin.query('SELECT pg_terminate_backend($1)', [first]);
    await eventually(async () => {
      const pid = await listenerPid(applicationName);
      return pid !== undefined && pid !== first && locks.capabilities.wakeups;
    }, 'a new LISTEN connection');
    await expectWokenByRelease(other, locks, 'after-reconnect');
    await Promise.all([locks.close(), other.close()]);
  });

  test('a refused first LISTEN connection is retried: wakeups false while it is refused, true once it is open', async () => {
    const suffix = uniqueSuffix();
    const role = `stowage_limited_${suffix}`;
    roles.push(role);
    const tables = freshTables();
    await admin.query(schemaSql({ only: ['locks'], tables: { locks: tables.locks } }));
    // One connection for the role: the pool takes it, the LISTEN connection is refused (53300).
    await admin.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 1`);
    await admin.query(grantsSql(role, { only: ['locks'], tables: { locks: tables.locks } }));
    const limited = new URL(url);
    limited.username = role;
    const locks = new PostgresLockProvider({ url: limited.toString(), table: tables.locks, autoCreate: false, pool: { max: 1, idleTimeoutMillis: 600_000 } });
    await locks.ready(); // takes the role's one connection: the probe runs on it
    expect(await locks.acquire('warm-up', 60_000)).not.toBeNull();
    expect(locks.capabilities.wakeups, 'no LISTEN connection yet').toBe(false);

    await admin.query(`ALTER ROLE ${role} CONNECTION LIMIT 2`);
    await eventually(() => locks.capabilities.wakeups, 'the LISTEN connection, once the server takes it');
    const other = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await expectWokenByRelease(other, locks, 'after-refusal');
    await Promise.all([locks.close(), other.close()]);
  });

  test('a pool kept busy while LISTEN is probed does not switch wake-ups off: they come on once the probe gets a client', async () => {
    const tables = freshTables();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const locks = new PostgresLockProvider({ pool, table: tables.locks });
    const other = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await locks.clearExpired(); // the table exists; the LISTEN connection is not open yet
    let held = await pool.connect();
    const readying = locks.ready();
    // Three times the probe queues for the pool's one client and gets it later than its NOTIFY
    // would take (2 s): time spent waiting for the pool is no silence of the server.
    for (let round = 0; round < 3; round++) {
      await eventually(() => pool.waitingCount > 0 || locks.capabilities.wakeups, 'the probe waits for a client');
      if (locks.capabilities.wakeups) break;
      await new Promise((resolve) => setTimeout(resolve, 2500));
      held.release();
      held = await pool.connect();
    }
    held.release();
    await readying;
    await eventually(() => locks.capabilities.wakeups, 'wake-ups once the pool has room');
    await expectWokenByRelease(other, locks, 'after-busy-pool');
    await Promise.all([locks.close(), other.close()]);
    await pool.end();
  });

  test('a release wakes one waiter of the process, not all: at most 3 statements per acquisition with 16 and 64 waiters', { timeout: 120_000 }, async () => {
    for (const waiters of [16, 64]) {
      const tables = freshTables();
      const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 4 }));
      const locks = new PostgresLockProvider({ pool: counting, table: tables.locks });
      await locks.ready();
      expect(locks.capabilities.wakeups).toBe(true);
      counting.reset();
      const holder = (await locks.acquire('job', 60_000, 'holder'))!;
      const granted: string[] = [];
      // No poll fires during the test: every retry is a wake-up.
      const acquisitions = Array.from({ length: waiters }, (_, i) =>
        locks.acquire('job', 60_000, { owner: `waiter-${i}`, wait: 600_000, pollInterval: 600_000 }).then(async (handle: LockHandle | null) => {
          granted.push(handle!.owner);
          await handle!.release();
        }),
      );
      await eventually(() => counting.count >= 1 + waiters, 'every waiter tried once');
      await holder.release();
      await Promise.all(acquisitions);
      expect(new Set(granted).size).toBe(waiters);
      const perAcquisition = counting.count / (waiters + 1);
      console.log(`[stowage postgres] ${waiters} waiters on one key: ${counting.count} statements, ${perAcquisition.toFixed(2)} per acquisition`);
      expect(perAcquisition).toBeLessThanOrEqual(3);
      await locks.close();
      await counting.end();
    }
  });

  test('close() with 50 writes and a waiting acquisition in flight: all settle, close resolves last, no acknowledged write lost', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv, pool: { max: 2 } });
    const locks = new PostgresLockProvider({ url, table: tables.locks });
    const holder = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await Promise.all([kv.ready(), locks.ready()]);
    const held = await holder.acquire('job', 60_000, 'holder');
    const events: string[] = [];
    const writes = Array.from({ length: 50 }, (_, i) =>
      kv.setMany([{ key: `k${i}`, value: `v${i}` }]).then(
        () => (events.push(`set k${i}`), 'ok'),
        (error: { code?: string }) => (events.push(`set k${i} failed`), error.code),
      ),
    );
    const waiting = locks.acquire('job', 60_000, { owner: 'waiter', wait: 3000 }).then(
      () => (events.push('acquired'), 'acquired'),
      (error: { code?: string }) => (events.push('acquire failed'), error.code),
    );
    const closing = Promise.all([kv.close(), locks.close()]).then(() => events.push('closed'));
    const outcomes = await Promise.all(writes);
    expect(await waiting).toBe('E_CLOSED');
    await closing;
    expect(events.at(-1)).toBe('closed');
    expect(events).toHaveLength(52);
    const reader = new PostgresKeyValueStore({ url, table: tables.kv });
    const acknowledged = outcomes.flatMap((outcome, i) => (outcome === 'ok' ? [`k${i}`] : []));
    for (const outcome of outcomes) expect(['ok', 'E_CLOSED']).toContain(outcome);
    expect(await reader.getMany(acknowledged)).toEqual(acknowledged.map((key) => `v${key.slice(1)}`));
    await held!.release();
    await Promise.all([reader.close(), holder.close()]);
  });

  test('a pool its owner ends under live stores: queued calls and a waiting acquisition fail with E_UNAVAILABLE, and the process exits by itself', async () => {
    // The child never calls close(): it must exit once the pool is ended.
    const stdout = await runWorker('pool-ended-worker.ts');
    const report = JSON.parse(stdout.trim()) as { writes: string[]; acquire: string; wakeups: boolean };
    expect(report.wakeups, 'the LISTEN connection was open').toBe(true);
    expect(report.acquire).toBe('E_UNAVAILABLE');
    for (const outcome of report.writes) expect(['ok', 'E_UNAVAILABLE']).toContain(outcome);
    expect(report.writes.filter((outcome) => outcome === 'E_UNAVAILABLE').length, 'queued writes').toBeGreaterThan(0);
  });

  test('a pool its owner ends while holding every client: calls waiting for one fail with E_UNAVAILABLE without waiting for the owner', async () => {
    const tables = freshTables();
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    const kv = new PostgresKeyValueStore({ pool, table: tables.kv });
    const locks = new PostgresLockProvider({ pool, table: tables.locks });
    const holder = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await Promise.all([kv.ready(), locks.ready()]);
    await holder.acquire('job', 60_000, 'holder');
    const clients = [await pool.connect(), await pool.connect()];
    const outcome = (promise: Promise<unknown>) =>
      promise.then(
        () => 'ok',
        (error: { code?: string }) => error.code,
      );
    const calls = [
      ...Array.from({ length: 10 }, (_, i) => outcome(kv.setMany([{ key: `k${i}`, value: 'v' }]))),
      outcome(kv.get('k0')),
      outcome(locks.acquire('job', 60_000, { owner: 'waiter', wait: 600_000 })),
    ];
    await eventually(() => pool.waitingCount > 0, 'calls wait for a client of the pool');
    // pg-pool's end() waits for the clients its owner holds, and tells nobody meanwhile.
    const ending = pool.end();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const settled = await Promise.race([
      Promise.all(calls),
      new Promise<'hang'>((resolve) => (timer = setTimeout(() => resolve('hang'), 20_000))),
    ]);
    clearTimeout(timer);
    expect(settled).toEqual(calls.map(() => 'E_UNAVAILABLE'));
    for (const client of clients) client.release();
    await ending;
    await Promise.all([kv.close(), locks.close(), holder.close()]);
  });

  test('a call on a pool passed in costs no timer and no listener of its own: 200 sequential gets and sets start no setInterval or setTimeout, and leave the pool\'s listeners as they were', async () => {
    const tables = freshTables();
    // idleTimeoutMillis 0: pg-pool's own timer per released client is not counted.
    const pool = new pg.Pool({ connectionString: url, max: 2, idleTimeoutMillis: 0 });
    const kv = new PostgresKeyValueStore({ pool, table: tables.kv, coalesce: false });
    await kv.set('k', 'v');
    const events = ['release', 'remove', 'acquire', 'connect', 'error'] as const;
    const listeners = () => events.map((event) => pool.listenerCount(event));
    const before = listeners();
    // Counted, not replaced: the timers still run. (The watch for the owner's end() is per pool,
    // started only while calls queue for a client of a full pool: none queue here.)
    const { setInterval: originalInterval, setTimeout: originalTimeout } = globalThis;
    let timers = 0;
    globalThis.setInterval = ((...args: Parameters<typeof setInterval>) => (timers++, originalInterval(...args))) as typeof setInterval;
    globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => (timers++, originalTimeout(...args))) as typeof setTimeout;
    try {
      for (let i = 0; i < 100; i++) {
        expect(await kv.get('k')).toBe('v');
        await kv.set(`k${i}`, 'v');
      }
    } finally {
      globalThis.setInterval = originalInterval;
      globalThis.setTimeout = originalTimeout;
    }
    expect(timers, 'timers started by 200 calls').toBe(0);
    expect(listeners()).toEqual(before);
    await kv.close();
    await pool.end();
  });

  test('maxWaiting: with that many calls waiting for a connection, the next fails at once with E_UNAVAILABLE; those let in succeed', async () => {
    const tables = freshTables();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const kv = new PostgresKeyValueStore({ pool, table: tables.kv, coalesce: false, maxWaiting: 2 });
    await kv.set('k', 'v');
    const held = await pool.connect();
    const admitted = [kv.get('k'), kv.get('k')];
    await eventually(() => pool.waitingCount === 2, 'two calls wait for the one connection');
    const refused = kv.get('k').then(
      () => 'ok',
      (error: { code?: string }) => error.code,
    );
    held.release();
    expect(await refused).toBe('E_UNAVAILABLE');
    expect(await Promise.all(admitted)).toEqual(['v', 'v']);
    // once the queue is short again, calls are let in
    expect(await kv.get('k')).toBe('v');
    await kv.close();
    await pool.end();
  });

  test('awaited ready() and close() keep the process alive until they settle, also when the pool lets it exit while idle', async () => {
    const stdout = await runWorker('listen-exit-worker.ts');
    expect(stdout.trim(), 'the process exited in the middle of an awaited call').not.toBe('');
    expect(JSON.parse(stdout.trim())).toEqual({ ready: true, wakeups: true, closed: true });
  });

  test('a table dropped under a live store is created again once (autoCreate) and the call retried; without autoCreate the error says the table is missing', async () => {
    const tables = freshTables();
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 4 }));
    const [first, second] = [0, 1].map(() => new PostgresKeyValueStore({ pool: counting, table: tables.kv }));
    await first!.set('a', '1');
    await second!.set('b', '1');
    await admin.query(`DROP TABLE ${tables.kv}`);
    counting.reset();
    await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? first! : second!).setMany([{ key: `k${i}`, value: `${i}` }])));
    expect(await first!.getMany(['k0', 'k9', 'a'])).toEqual(['0', '9', null]);
    const creations = counting.statements.filter((statement) => statement.includes('pg_advisory_xact_lock'));
    expect(creations, 'the table was created again once').toHaveLength(1);

    const manual = new PostgresKeyValueStore({ pool: counting, table: tables.kv, autoCreate: false });
    expect(await manual.get('k0')).toBe('0');
    await admin.query(`DROP TABLE ${tables.kv}`);
    const error = await manual.get('k0').then(
      () => null,
      (reason: Error & { code?: string }) => reason,
    );
    expect(error?.code).toBe('E_INVALID_OPTION');
    expect(error?.message).toMatch(/missing.*autoCreate is false/);
    await Promise.all([first!.close(), second!.close(), manual.close()]);
    await counting.end();
  });

  test('a dropped version or fence sequence is never created again from 1: E_INVALID_OPTION naming it, at run time and at start-up', async () => {
    const tables = freshTables();
    const locks = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    for (let i = 0; i < 3; i++) await (await locks.acquire('job', 60_000))!.release();
    const last = (await locks.acquire('job', 60_000))!;
    await last.release();
    await kv.set('k', 'v1');
    await kv.set('k', 'v2');
    const missing = async (sequence: string) => (await admin.query('SELECT to_regclass($1) IS NULL AS gone', [sequence])).rows[0].gone as boolean;
    const rejection = (promise: Promise<unknown>) =>
      promise.then(
        () => null,
        (error: Error & { code?: string }) => error,
      );

    // Under live stores: the statement that meets the missing sequence fails, and it stays missing.
    await admin.query(`DROP SEQUENCE ${tables.locks}_fence_seq; DROP SEQUENCE ${tables.kv}_version_seq`);
    for (const [call, sequence] of [
      [() => locks.acquire('job', 60_000), `${tables.locks}_fence_seq`],
      [() => kv.set('k', 'v3'), `${tables.kv}_version_seq`],
    ] as const) {
      const error = await rejection(call());
      expect(error?.code, error?.message).toBe('E_INVALID_OPTION');
      expect(error?.message).toContain(sequence);
      expect(error?.message).toMatch(/START WITH/);
      expect(await missing(sequence), `${sequence} was not created again`).toBe(true);
    }
    // At start-up (autoCreate), and without autoCreate at the first statement.
    for (const autoCreate of [true, false]) {
      const fresh = new PostgresLockProvider({ url, table: tables.locks, wakeups: false, autoCreate });
      const error = await rejection(autoCreate ? fresh.ready() : fresh.acquire('job', 60_000));
      expect(error?.code, error?.message).toBe('E_INVALID_OPTION');
      expect(error?.message).toContain(`${tables.locks}_fence_seq`);
      await fresh.close();
    }
    expect(await missing(`${tables.locks}_fence_seq`)).toBe(true);

    // Created again as the error says, above every fence ever handed out: fences go on growing.
    await admin.query(`CREATE SEQUENCE ${tables.locks}_fence_seq AS BIGINT START WITH ${last.fence + 1000}`);
    const next = (await locks.acquire('job', 60_000))!;
    expect(next.fence).toBeGreaterThan(last.fence);
    await next.release();
    // A dropped table keeps its sequence: the table alone is created again, fences go on.
    await admin.query(`DROP TABLE ${tables.locks}`);
    const after = (await locks.acquire('job', 60_000))!;
    expect(after.fence).toBeGreaterThan(next.fence);
    await after.release();
    await Promise.all([locks.close(), kv.close()]);
  });
});
