import pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { PostgresCacheProvider, PostgresCheckpointStore, PostgresIdempotencyStore, PostgresKeyValueStore, PostgresSnapshotStore } from '../src/index.js';
import { CLEAR_EXPIRED_BATCH } from '../src/sql.js';
import { serverTestSetup } from './support/server.js';

/**
 * Promises that hold when the stores are used together, as an application does: one pool per
 * URL shared by every store, the caller's own transactions, long transactions beside a
 * start-up. Checked with the server's own views (pg_locks, pg_stat_activity) and statement
 * outcomes, not with timings.
 */
const { server, url, admin, describeServer, freshTables } = await serverTestSetup();

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Lock requests of `applicationName`'s sessions that wait (not granted): sessions holding a connection while they wait. */
async function waitingLocks(applicationName: string): Promise<number> {
  const { rows } = await admin.query<{ waiting: number }>(
    `SELECT count(*)::int AS waiting FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.application_name = $1`,
    [applicationName],
  );
  return rows[0]!.waiting;
}

async function rejection(promise: Promise<unknown>): Promise<{ code?: string }> {
  return promise.then(
    () => ({ code: 'resolved' }),
    (reason: { code?: string }) => reason,
  );
}

/** Settles with 'done' when `call` resolves, or with 'waiting' as soon as a session of `applicationName` waits on a lock. */
async function doneOrWaiting(call: Promise<unknown>, applicationName: string): Promise<'done' | 'waiting'> {
  let settled = false;
  const done = call.then(() => 'done' as const).finally(() => (settled = true));
  const waiting = (async () => {
    while (!settled) {
      if ((await waitingLocks(applicationName)) > 0) return 'waiting' as const;
      await sleep(20);
    }
    return 'done' as const;
  })();
  return Promise.race([done, waiting]);
}

describeServer('postgres: stores used together', () => {
  test('first use on an existing schema takes no lock a writer holds; a first use that must wait for one holds up no other table', async () => {
    const [complete, indexless, other] = [freshTables(), freshTables(), freshTables()];
    const options = (table: string, applicationName: string) => ({ url, applicationName, table, cleanupInterval: false as const });
    const stores: { close(): Promise<void> }[] = [];
    const open = (table: string, applicationName: string) => {
      const store = new PostgresKeyValueStore(options(table, applicationName));
      stores.push(store);
      return store;
    };
    for (const table of [complete.kv, indexless.kv]) await open(table, 'stowage-test-compose-setup').set('held', '1');
    await admin.query(`DROP INDEX "${indexless.kv}_recent_idx"`);
    const holder = await admin.connect();
    try {
      // A long transaction holds a row of both tables (and their ROW EXCLUSIVE locks) meanwhile.
      await holder.query('BEGIN');
      for (const table of [complete.kv, indexless.kv]) await holder.query(`UPDATE "${table}" SET value = '2' WHERE key = 'held'`);
      const fresh = `stowage-first-use-${complete.kv}`;
      expect(await doneOrWaiting(open(complete.kv, fresh).get('other'), fresh), 'first use of a table that has everything').toBe('done');
      // Building the missing index needs a lock the transaction holds: that store waits (a bounded time) ...
      const creating = open(indexless.kv, `stowage-first-use-${indexless.kv}`);
      const stalled = creating.ready();
      // ... and the first use of another table does not wait for it.
      const unrelated = `stowage-first-use-${other.kv}`;
      expect(await doneOrWaiting(open(other.kv, unrelated).set('k', 'v'), unrelated), 'first use of an unrelated table meanwhile').toBe('done');
      // The index cannot be built while the transaction lasts: after its tries the store runs without it.
      await stalled;
      expect(await creating.get('held')).toBe('1');
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
      await Promise.all(stores.map((store) => store.close()));
    }
  });

  test('100 concurrent runOnce of one key on the shared default pool settle with one run; no runner waits holding a connection', async () => {
    const tables = freshTables();
    const applicationName = `stowage-run-once-${tables.kv}`;
    // One URL: every store shares one pool of the default size (10 connections).
    const options = { url, applicationName };
    const idempotency = new PostgresIdempotencyStore({ ...options, table: tables.idempotency });
    const kv = new PostgresKeyValueStore({ ...options, table: tables.kv });
    await Promise.all([idempotency.ready(), kv.ready()]);
    let runs = 0;
    const waitingSeen: number[] = [];
    const charge = async (transaction: unknown) => {
      runs++;
      // Let the other 99 runners come and find the key taken.
      await sleep(300);
      const waiting = await waitingLocks(applicationName);
      waitingSeen.push(waiting);
      if (waiting > 0) throw new Error(`${waiting} runners wait on a lock, each holding a connection`);
      // Calls on the same pool outside the transaction: they need a free connection.
      await kv.set('receipt', 'sent');
      expect(await kv.get('receipt')).toBe('sent');
      await kv.withTransaction(transaction as pg.PoolClient).set('charged', 'yes');
      return 'charged';
    };
    const results = await Promise.allSettled(Array.from({ length: 100 }, () => idempotency.runOnce('order-1', charge)));
    expect(waitingSeen[0], 'lock requests waiting while the function ran').toBe(0);
    expect(results.filter((result) => result.status === 'rejected')).toEqual([]);
    expect(new Set(results.map((result) => (result as PromiseFulfilledResult<string>).value))).toEqual(new Set(['charged']));
    expect(runs).toBe(1);
    expect(await kv.get('charged')).toBe('yes');
    await Promise.all([idempotency.close(), kv.close()]);
  });

  const pool = new pg.Pool({ connectionString: url, max: 4, application_name: 'stowage-test-compose' });
  afterAll(() => pool.end());

  test('close() during a sweep of a large backlog returns after the batch in flight', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv, cleanupInterval: false });
    await kv.ready();
    const backlog = 3 * CLEAR_EXPIRED_BATCH + 1;
    await admin.query(`INSERT INTO "${tables.kv}" (key, value, version, expires_at)
      SELECT 'k' || i, 'v', i, now() - interval '1 minute' FROM generate_series(1, ${backlog}) AS i`);
    const sweeping = kv.clearExpired();
    const closing = kv.close();
    expect(await sweeping, 'rows the sweep removed before it stopped').toBe(CLEAR_EXPIRED_BATCH);
    await closing;
    const { rows } = await admin.query<{ left: number }>(`SELECT count(*)::int AS left FROM "${tables.kv}"`);
    expect(rows[0]!.left).toBe(backlog - CLEAR_EXPIRED_BATCH);
  });

  test('a key another transaction holds fails only its own call, not the calls coalesced with it', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, applicationName: 'stowage-test-compose-coalesce', pool: { statement_timeout: 800 }, table: tables.kv, cleanupInterval: false });
    await kv.setMany(['held', 'free', 'gone'].map((key) => ({ key, value: '1' })));
    const holder = await admin.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`UPDATE "${tables.kv}" SET value = 'locked' WHERE key = 'held'`);
      // One tick: the three calls go out as a batch of two sets and a delete.
      const [held, free, gone] = await Promise.allSettled([kv.set('held', '2'), kv.set('free', '2'), kv.delete('gone')]);
      expect(held).toMatchObject({ status: 'rejected', reason: { code: 'E_TIMEOUT' } });
      expect(free).toEqual({ status: 'fulfilled', value: undefined });
      expect(gone).toEqual({ status: 'fulfilled', value: true });
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect(await kv.getMany(['held', 'free', 'gone'])).toEqual(['1', '2', null]);
    await kv.close();
  });

  test('a key another transaction holds makes only its own calls wait, not the calls coalesced with it', async () => {
    const tables = freshTables();
    const applicationName = `stowage-test-compose-skip-${tables.kv}`;
    const kv = new PostgresKeyValueStore({ url, applicationName, table: tables.kv, cleanupInterval: false });
    const keys = ['held-a', 'held-b', 'held-c', 'free', 'gone'];
    await kv.setMany(keys.map((key) => ({ key, value: '1' })));
    // Clients of their own: the admin pool (3 connections) still answers waitingLocks meanwhile.
    const holders = ['held-a', 'held-b', 'held-c'].map(() => new pg.Client({ connectionString: url }));
    await Promise.all(holders.map((holder) => holder.connect()));
    let heldSettled = false;
    try {
      // Each held key is held by a transaction of its own.
      for (const [i, key] of ['held-a', 'held-b', 'held-c'].entries()) {
        await holders[i]!.query('BEGIN');
        await holders[i]!.query(`UPDATE "${tables.kv}" SET value = 'locked' WHERE key = $1`, [key]);
      }
      // One tick: a batch of three sets and a batch of two deletes.
      const held = Promise.all([kv.set('held-a', '2'), kv.set('held-b', '2'), kv.delete('held-c')]).finally(() => (heldSettled = true));
      const [free, gone] = await Promise.all([kv.set('free', '2'), kv.delete('gone')]);
      expect([free, gone]).toEqual([undefined, true]);
      // The held keys' calls wait, each alone and side by side, each for the transaction that holds its row.
      expect(heldSettled).toBe(false);
      while ((await waitingLocks(applicationName)) < 3) await sleep(20);
      for (const holder of holders) await holder.query('ROLLBACK');
      expect(await held).toEqual([undefined, undefined, true]);
    } finally {
      await Promise.all(holders.map((holder) => holder.end()));
    }
    expect(await kv.getMany(keys)).toEqual(['2', '2', null, '2', null]);
    await kv.close();
  });

  test('a cache key another transaction holds makes only its own set wait, not the sets coalesced with it', async () => {
    const tables = freshTables();
    const applicationName = `stowage-test-compose-skip-${tables.cache}`;
    const cache = new PostgresCacheProvider({ url, applicationName, table: tables.cache, cleanupInterval: false });
    await Promise.all([cache.set('held', 1), cache.set('free', 1)]);
    const holder = await admin.connect();
    let heldSettled = false;
    try {
      await holder.query('BEGIN');
      await holder.query(`UPDATE "${tables.cache}" SET value = '"locked"' WHERE key = 'held'`);
      // One tick: one batch of two sets.
      const held = cache.set('held', 2).finally(() => (heldSettled = true));
      await cache.set('free', 2);
      expect(heldSettled).toBe(false);
      while ((await waitingLocks(applicationName)) < 1) await sleep(20);
      await holder.query('ROLLBACK');
      await held;
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect([await cache.get('held'), await cache.get('free')]).toEqual([2, 2]);
    await cache.close();
  });

  test('a view on a client outside a transaction refuses with E_INVALID_OPTION instead of committing on its own', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ pool, table: tables.kv });
    const snapshots = new PostgresSnapshotStore<{ step: number }>({ pool, table: tables.snapshots });
    const idempotency = new PostgresIdempotencyStore({ pool, table: tables.idempotency });
    const checkpoints = new PostgresCheckpointStore({ pool, table: tables.checkpoints });
    const writes = (client: pg.PoolClient, tag: string) => [
      () => kv.withTransaction(client).set(tag, 'v'),
      () => snapshots.withTransaction(client).save(tag, { step: 1 }),
      () => idempotency.withTransaction(client).set(tag, 'result'),
      () => checkpoints.withTransaction(client).save({ id: tag, taskId: tag, sequence: 1, timestamp: 1, progress: 0, data: {} }),
    ];
    const client = await pool.connect();
    try {
      // A forgotten BEGIN.
      for (const write of writes(client, 'no-begin')) expect((await rejection(write())).code).toBe('E_INVALID_OPTION');
      // A view kept past its transaction's COMMIT.
      await client.query('BEGIN');
      const views = writes(client, 'after-commit');
      await client.query('COMMIT');
      for (const write of views) expect((await rejection(write())).code).toBe('E_INVALID_OPTION');
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    for (const tag of ['no-begin', 'after-commit']) {
      expect(await kv.get(tag)).toBeNull();
      expect(await snapshots.load(tag)).toBeNull();
      expect(await idempotency.get(tag)).toBeNull();
      expect(await checkpoints.list(tag)).toEqual([]);
    }
    await Promise.all([kv.close(), snapshots.close(), idempotency.close(), checkpoints.close()]);
  });
});

if (server) console.log(`[stowage postgres] compose tests backend: ${server.label}`);
