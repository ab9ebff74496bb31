import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { STOWAGE_CHANNELS, type OperationMessage } from '@stowage/core';
import pg from 'pg';
import { expect, test } from 'vitest';
import {
  PostgresCacheProvider,
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresProcessBackend,
  PostgresSnapshotStore,
  connect,
  postgres,
  quoteIdentifier,
} from '../src/index.js';
import { DEFAULT_CLEANUP_INTERVAL, activeSweepers, type TableSweeper } from '@stowage/core/adapter';
import { CountingPool } from './support/counting-pool.js';
import { serverTestSetup } from './support/server.js';

/**
 * Retention by default (issue 19): expired rows are removed without anyone calling
 * `clearExpired()`, by one sweeper per table however many stores use it; finished snapshots
 * and the process log have optional retention periods. No timing: each case runs the table's
 * sweep itself (`sweeper.sweep()`), as the timer would.
 */
const { url, admin, describeServer, freshTables } = await serverTestSetup();

/** The one sweeper of `table` (fails when there is none, or more than one). */
function sweeperOf(table: string): TableSweeper {
  const sweepers = activeSweepers(table);
  expect(sweepers, `sweepers of ${table}`).toHaveLength(1);
  return sweepers[0]!;
}

async function keysOf(table: string): Promise<string[]> {
  const { rows } = await admin.query(`SELECT key FROM ${quoteIdentifier(table)} ORDER BY key`);
  return rows.map((row: { key: string }) => row.key);
}

describeServer('retention by default', () => {

  test('a store with default options has a sweeper (every minute) that removes expired rows; close() stops it', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    const sweeper = sweeperOf(tables.kv);
    expect(sweeper.interval).toBe(DEFAULT_CLEANUP_INTERVAL);
    await kv.set('gone', 'v', { ttl: 60_000 });
    await kv.set('kept', 'v');
    await admin.query(`UPDATE ${quoteIdentifier(tables.kv)} SET expires_at = now() - interval '1 second' WHERE key = 'gone'`);
    await sweeper.sweep();
    expect(await keysOf(tables.kv)).toEqual(['kept']);
    await kv.close();
    expect(activeSweepers(tables.kv)).toEqual([]);
  });

  test('cleanupInterval: false or 0 turns the sweeper off; a tiny interval sweeps on its own', async () => {
    const tables = freshTables();
    const off = [new PostgresKeyValueStore({ url, table: tables.kv, cleanupInterval: false }), new PostgresKeyValueStore({ url, table: tables.kv, cleanupInterval: 0 })];
    expect(activeSweepers(tables.kv)).toEqual([]);
    const on = new PostgresKeyValueStore({ url, table: tables.kv, cleanupInterval: 20 });
    expect(sweeperOf(tables.kv).interval).toBe(20);
    await on.set('gone', 'v', { ttl: 1 });
    await on.set('kept', 'v');
    // Waits for the outcome, not for a time: the row goes at one of the timer's runs.
    for (let i = 0; i < 1000 && (await keysOf(tables.kv)).length > 1; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await keysOf(tables.kv)).toEqual(['kept']);
    await Promise.all([...off, on].map((store) => store.close()));
  });

  test('one sweeper per table however many stores point at it; each job once per sweep; it leaves with the last store', async () => {
    const tables = freshTables();
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 3 }));
    const db = connect({ pool: counting });
    const kvs = [
      new PostgresKeyValueStore({ pool: counting, table: tables.kv }),
      new PostgresKeyValueStore({ pool: counting, table: tables.kv }),
      new PostgresKeyValueStore({ pool: counting, table: tables.kv, cleanupInterval: 5_000 }),
      db.kv({ table: tables.kv }),
    ];
    // Caches clear their own prefix: one job per prefix, in the same sweeper.
    const caches = [
      new PostgresCacheProvider({ pool: counting, table: tables.cache, prefix: 'a:' }),
      db.cache({ table: tables.cache, prefix: 'a:' }),
      db.cache({ table: tables.cache, prefix: 'b:' }),
    ];
    const locks = [new PostgresLockProvider({ pool: counting, table: tables.locks }), db.locks({ table: tables.locks })];
    await Promise.all([...kvs, ...caches, ...locks].map((store) => store.ready()));

    const kvSweeper = sweeperOf(tables.kv);
    expect(kvSweeper.interval).toBe(5_000); // the shortest asked for
    expect(kvSweeper.jobKeys).toEqual(['kv:expired']);
    counting.reset();
    await kvSweeper.sweep();
    expect(counting.statements).toHaveLength(1); // one batch, nothing to delete

    const cacheSweeper = sweeperOf(tables.cache);
    expect(cacheSweeper.jobKeys).toHaveLength(2);
    counting.reset();
    await cacheSweeper.sweep();
    expect(counting.statements).toHaveLength(2);

    counting.reset();
    await sweeperOf(tables.locks).sweep();
    expect(counting.statements).toHaveLength(1);

    // Concurrent sweeps of one table are one run.
    counting.reset();
    await Promise.all([kvSweeper.sweep(), kvSweeper.sweep()]);
    expect(counting.statements).toHaveLength(1);

    await kvs[2]!.close();
    expect(sweeperOf(tables.kv).interval).toBe(DEFAULT_CLEANUP_INTERVAL);
    await kvs[0]!.close();
    await db.close();
    // The remaining store still sweeps, through its own calls.
    counting.reset();
    await sweeperOf(tables.kv).sweep();
    expect(counting.statements).toHaveLength(1);
    await Promise.all([kvs[1]!.close(), caches[0]!.close(), locks[0]!.close()]);
    expect([tables.kv, tables.cache, tables.locks].flatMap((table) => activeSweepers(table))).toEqual([]);
    await counting.end();
  });

  test('a store closing during a sweep hands its job to another store on the table', async () => {
    const tables = freshTables();
    const [closing, open] = [new PostgresKeyValueStore({ url, table: tables.kv }), new PostgresKeyValueStore({ url, table: tables.kv })];
    await closing.set('gone', 'v', { ttl: 60_000 });
    await admin.query(`UPDATE ${quoteIdentifier(tables.kv)} SET expires_at = now() - interval '1 second'`);
    const sweeper = sweeperOf(tables.kv);
    // A call in flight keeps the closing store in the sweeper until it settles; the store
    // refuses new calls (E_CLOSED) from close() on, and the sweep starts with its job.
    const inFlight = closing.get('gone');
    const closed = closing.close();
    await sweeper.sweep();
    await Promise.all([inFlight, closed]);
    expect(await keysOf(tables.kv)).toEqual([]);
    await open.close();
  });

  test('expired rows go in bounded batches through the sweeper', async () => {
    const tables = freshTables();
    const counting = new CountingPool(new pg.Pool({ connectionString: url, max: 2 }));
    const kv = new PostgresKeyValueStore({ pool: counting, table: tables.kv });
    await kv.ready();
    await admin.query(`INSERT INTO ${quoteIdentifier(tables.kv)} (key, value, version, expires_at)
      SELECT 'k' || i, 'v', i, now() - interval '1 minute' FROM generate_series(1, 12000) AS i`);
    counting.reset();
    await sweeperOf(tables.kv).sweep();
    expect(counting.statements).toHaveLength(3); // 5000 + 5000 + 2000
    expect(await keysOf(tables.kv)).toEqual([]);
    await kv.close();
    await counting.end();
  });

  test('a failing sweep waits for the next run: never a rejection, never an unhandled one; a configuration failure is reported', async () => {
    const tables = freshTables();
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    // Each run is the store's own call: telemetry sees its failure (the `stowage:operation`
    // tracing channel that StowageInstrumentation turns into spans and error counts) …
    const traced: string[] = [];
    const onTraced = (message: unknown) => {
      const { operation, store, error } = message as OperationMessage & { error: { code?: string } };
      if (store.collection === tables.kv) traced.push(`${operation} ${error.code}`);
    };
    // … and one that retrying cannot fix (E_INVALID_OPTION) is a process warning, once.
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => {
      if (warning.message.includes(tables.kv)) warnings.push(warning);
    };
    process.on('unhandledRejection', onUnhandled);
    process.on('warning', onWarning);
    subscribe(`tracing:${STOWAGE_CHANNELS.operation}:error`, onTraced);
    try {
      // The table does not exist and will not be created: every sweep fails.
      const kv = new PostgresKeyValueStore({ url, table: tables.kv, autoCreate: false });
      await expect(sweeperOf(tables.kv).sweep()).resolves.toBeUndefined();
      await expect(sweeperOf(tables.kv).sweep()).resolves.toBeUndefined();
      await expect(kv.clearExpired()).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
      await new Promise((resolve) => setImmediate(resolve));
      expect(traced).toEqual(['kv.clearExpired E_INVALID_OPTION', 'kv.clearExpired E_INVALID_OPTION', 'kv.clearExpired E_INVALID_OPTION']);
      expect(warnings.map((warning) => warning.name)).toEqual(['StowageWarning']);
      expect(warnings[0]!.message).toMatch(/sweeper.*kv:expired.*E_INVALID_OPTION/s);
      await kv.close();
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      process.off('warning', onWarning);
      unsubscribe(`tracing:${STOWAGE_CHANNELS.operation}:error`, onTraced);
    }
  });

  test('snapshotRetention.finishedAfter removes old snapshots of finished workflows of its prefix, and keeps the rest', async () => {
    const tables = freshTables();
    const store = postgres({ url, table: tables.snapshots, prefix: 'orders:', snapshotRetention: { finishedAfter: 60_000 } });
    const other = new PostgresSnapshotStore({ url, table: tables.snapshots, prefix: 'other:' });
    const snapshot = (status: string) => ({ formatVersion: 1 as const, steps: {}, execution: { status: status as 'completed', lastUpdated: new Date().toISOString() } });
    for (const [id, status] of [
      ['old-completed', 'completed'],
      ['old-failed', 'failed'],
      ['old-running', 'running'],
      ['new-completed', 'completed'],
    ] as const) {
      await store.save(id, snapshot(status));
    }
    await store.save('old-odd', { hello: 'a snapshot of another shape' } as never);
    await other.save('old-completed', snapshot('completed'));
    await admin.query(`UPDATE ${quoteIdentifier(tables.snapshots)} SET updated_at = now() - interval '2 minutes' WHERE id LIKE 'old-%'`);

    const sweeper = sweeperOf(tables.snapshots);
    await sweeper.sweep();
    const { rows } = await admin.query(`SELECT prefix || id AS id FROM ${quoteIdentifier(tables.snapshots)} ORDER BY 1`);
    expect(rows.map((row: { id: string }) => row.id)).toEqual(['orders:new-completed', 'orders:old-odd', 'orders:old-running', 'other:old-completed']);
    expect(await store.clearFinished()).toBe(0);
    await expect(other.clearFinished()).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
    await Promise.all([store.close(), other.close()]);
    expect(activeSweepers(tables.snapshots)).toEqual([]);
  });

  test('historyRetention removes old transition-log rows in batches and keeps recent ones', async () => {
    const tables = freshTables();
    const options = { url, itemsTable: tables.processItems, transitionsTable: tables.processTransitions, wakeups: false };
    const backend = new PostgresProcessBackend({ ...options, historyRetention: 60_000 });
    const plain = new PostgresProcessBackend(options);
    for (const id of ['a', 'b']) {
      await backend.createItem({ process: 'p', id, state: 'new', data: {} });
      await backend.transition({ process: 'p', itemId: id, from: 'new', to: 'done', version: 1, kind: 'advance', key: `${id}-1` });
    }
    // Item a's creation, and all of b's history, are old.
    const log = quoteIdentifier(tables.processTransitions);
    await admin.query(`UPDATE ${log} SET at = now() - interval '2 minutes' WHERE item_id = 'b' OR (item_id = 'a' AND kind = 'create')`);
    expect(activeSweepers(tables.processItems)).toEqual([]);
    await sweeperOf(tables.processTransitions).sweep();
    expect((await backend.history('p', 'a')).map((entry) => entry.to)).toEqual(['done']);
    expect(await backend.history('p', 'b')).toEqual([]);
    expect((await backend.getItem('p', 'b'))?.state).toBe('done'); // items are never touched
    expect(await backend.clearHistory()).toBe(0);
    await expect(plain.clearHistory()).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
    await Promise.all([backend.close(), plain.close()]);
    expect(activeSweepers(tables.processTransitions)).toEqual([]);
  });
});
