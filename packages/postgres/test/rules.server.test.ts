import { inspect } from 'node:util';
import { richCodec, type LockHandle, type StowageResource } from '@stowage/core';
import type { KeyValueWriteOp } from '@stowage/core/adapter';
import pg from 'pg';
import { expect, test } from 'vitest';
import {
  PostgresCacheProvider,
  PostgresCheckpointStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  connect,
  createPostgresPersistence,
  postgres,
} from '../src/index.js';
import { CountingPool } from './support/counting-pool.js';
import { everyStore, uniqueSuffix } from './support/context.js';
import { serverTestSetup } from './support/server.js';

/**
 * The rules every backend keeps, checked where only SQL shows them: the order in which
 * batches lock rows, how fences are taken, what sits in the columns, and what stowage objects
 * print.
 */
const { url, admin, describeServer, freshTables } = await serverTestSetup();

/**
 * Runs the batch statements with the keys in the order given, past the kit (which sorts
 * them): the statements themselves must take the row locks in key order.
 */
class UnsortedBatches extends PostgresKeyValueStore {
  setManyAsGiven(writes: KeyValueWriteOp[]): Promise<void> {
    return this.call('kv.setMany', () => this._setMany(writes), writes);
  }

  deleteManyAsGiven(keys: string[]): Promise<number> {
    return this.call('kv.deleteMany', () => this._deleteMany(keys), keys);
  }
}

/** Polls `condition` until it holds. */
async function eventually(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  if (!condition()) throw new Error(`never happened: ${what}`);
}

describeServer('postgres rules', () => {

  test('batches over the same keys in opposite orders never deadlock (no 40P01)', { timeout: 120_000 }, async () => {
    const tables = freshTables();
    const [a, b] = [0, 1].map(() => new UnsortedBatches({ url, table: tables.kv, pool: { max: 4 } }));
    const keys = Array.from({ length: 30 }, (_, i) => `key:${String(i).padStart(2, '0')}`);
    const reversed = [...keys].reverse();
    const writes = (order: string[], round: number) => order.map((key) => ({ key, value: `${round}`, ttl: undefined }));
    for (let round = 0; round < 40; round++) {
      await Promise.all([
        // Through the public API, in opposite orders as callers give them...
        a!.setMany(writes(keys, round)),
        b!.setMany(writes(reversed, round)),
        a!.deleteMany(reversed.slice(round % 5)),
        // ...and the statements alone, handed opposite orders.
        a!.setManyAsGiven(writes(keys, round)),
        b!.setManyAsGiven(writes(reversed, round)),
        b!.deleteManyAsGiven(keys),
        a!.deleteManyAsGiven(reversed),
        b!.setMany(writes(keys, round)),
      ]);
    }
    await Promise.all([a!.close(), b!.close()]);
  });

  test('fences count grants: acquirers polling a held lock take no fence', async () => {
    const tables = freshTables();
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 5 }));
    const open = () => new PostgresLockProvider({ pool: counting, table: tables.locks, wakeups: false });
    const [holder, ...waiters] = [open(), open(), open(), open()];
    // While the lock is held, the waiters' attempts are the only statements.
    const attempts = () => counting.count;

    let current: LockHandle = (await holder!.acquire('job', 60_000, 'holder'))!;
    const fences = [current.fence];
    const pending = new Map(
      waiters.map((waiter, i) => [i, waiter.acquire('job', 60_000, { owner: `waiter-${i}`, wait: 60_000, pollInterval: 5 }).then((handle) => ({ i, handle: handle! }))]),
    );
    while (pending.size > 0) {
      const before = attempts();
      // Let the waiters fail many times while the lock is held.
      await eventually(() => attempts() >= before + 20, 'twenty failed attempts');
      await current.release();
      const granted = await Promise.race(pending.values());
      pending.delete(granted.i);
      current = granted.handle;
      fences.push(current.fence);
    }
    await current.release();
    expect(fences, `fences of ${fences.length} grants after ${attempts()} attempts`).toEqual(fences.map((_, i) => fences[0]! + i));
    await Promise.all([holder, ...waiters].map((provider) => provider!.close()));
    await counting.end();
  });

  test('a lease whose row is deleted while the acquisition waits for it still gets a new fence', async () => {
    const tables = freshTables();
    const applicationName = `stowage-fence-${uniqueSuffix()}`;
    const locks = new PostgresLockProvider({ url, table: tables.locks, wakeups: false, applicationName });
    const first = (await locks.acquire('job', 60_000, 'a'))!;
    await first.release();
    // clearExpired in another session deletes the ended lease, and has not committed yet...
    const cleaner = await admin.connect();
    try {
      await cleaner.query('BEGIN');
      await cleaner.query(`DELETE FROM ${tables.locks} WHERE key = 'job'`);
      // ...when the acquisition starts: it sees the row, and its insert waits for the delete.
      const acquiring = locks.acquire('job', 60_000, 'b');
      let waiting = false;
      for (let i = 0; i < 1000 && !waiting; i++) {
        const { rows } = await admin.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, [applicationName]);
        waiting = rows.length > 0;
        if (!waiting) await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(waiting, 'the acquisition waits for the deleting transaction').toBe(true);
      await cleaner.query('COMMIT');
      const second = await acquiring;
      expect(second?.fence).toBe(first.fence + 1);
      expect(await locks.acquire('job', 60_000, 'c')).toBeNull();
      await second!.release();
    } finally {
      await cleaner.query('ROLLBACK').catch(() => undefined);
      cleaner.release();
    }
    await locks.close();
  });

  test('namespaces and encodings as stored: prefix columns, checkpoint data as the codec text', async () => {
    const tables = freshTables();
    const snapshots = postgres({ url, table: tables.snapshots, prefix: 'orders:' });
    await snapshots.save('wf-1', { formatVersion: 1 } as never);
    const snapshotRows = await admin.query(`SELECT prefix, id FROM ${tables.snapshots}`);
    expect(snapshotRows.rows).toEqual([{ prefix: 'orders:', id: 'wf-1' }]);

    const cache = new PostgresCacheProvider({ url, table: tables.cache, prefix: 'users:' });
    await cache.set('1', { name: 'Ada' });
    const cacheRows = await admin.query(`SELECT prefix, key, value FROM ${tables.cache}`);
    expect(cacheRows.rows).toEqual([{ prefix: 'users:', key: '1', value: '{"name":"Ada"}' }]);

    const checkpoints = new PostgresCheckpointStore({ url, table: tables.checkpoints, codec: richCodec });
    const data = { at: new Date(0), count: 12345678901234567890n, bytes: new Uint8Array([1, 2, 3]) };
    await checkpoints.save({ id: 'c', taskId: 't', sequence: 1, timestamp: 1, progress: 0, data: data as never });
    expect((await checkpoints.load('c'))!.data).toEqual(data);
    const checkpointRows = await admin.query(`SELECT data, pg_typeof(data)::text AS type FROM ${tables.checkpoints}`);
    expect(checkpointRows.rows).toEqual([{ data: richCodec.encode(data), type: 'text' }]);
    await Promise.all([snapshots.close(), cache.close(), checkpoints.close()]);
  });

  test('a table of an older layout is left as it is and reported, not written to', async () => {
    const tables = freshTables();
    // The cache table as it was before prefixes were a column.
    await admin.query(`CREATE TABLE ${tables.cache} (key TEXT COLLATE "C" NOT NULL PRIMARY KEY, value TEXT NOT NULL,
      updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), expires_at TIMESTAMPTZ)`);
    const cache = new PostgresCacheProvider({ url, table: tables.cache, prefix: 'users:' });
    const error = await cache.set('1', 'x').then(
      () => null,
      (reason: unknown) => reason as Error & { code?: string },
    );
    // A configuration problem (retrying cannot fix it), not E_UNAVAILABLE.
    expect(error?.code).toBe('E_INVALID_OPTION');
    expect(error?.message).toMatch(/layout stowage does not know for cache: no column\(s\) prefix/);
    expect((await admin.query(`SELECT count(*)::int AS n FROM ${tables.cache}`)).rows[0].n).toBe(0);
    await cache.close();
  });

  test('nothing stowage holds prints the password (URL or password option)', async () => {
    const tables = freshTables();
    const secret = `pw-${uniqueSuffix()}`;
    const withPassword = new URL(url);
    withPassword.password = secret;
    const parsed = new URL(url);
    const fields = { host: parsed.hostname, port: Number(parsed.port || 5432), database: parsed.pathname.slice(1), user: decodeURIComponent(parsed.username), password: secret };
    // The server trusts the connection, so the password is never needed: only kept.
    for (const connection of [{ url: withPassword.toString() }, fields]) {
      const every = everyStore(connection, tables, { cleanupInterval: 60_000 });
      const stores: StowageResource[] = [...Object.values(every), await createPostgresPersistence({ ...connection, tableName: tables.kv })];
      const db = connect(connection);
      stores.push(db.kv({ table: tables.kv }));
      for (const store of stores) await (store as { ready?: () => Promise<void> }).ready?.();
      const locks = every.locks;
      const handle = await locks.acquire('job', 60_000);
      const waiting = locks.acquire('job', 60_000, { wait: 100 }); // a waiter, on the LISTEN connection
      for (const printed of [...stores, handle, db]) expect(inspect(printed, { depth: 6 })).not.toContain(secret);
      expect(await waiting).toBeNull();
      await handle!.release();
      await Promise.all([...stores.map((store) => store.close()), db.close()]);
    }
  });
});
