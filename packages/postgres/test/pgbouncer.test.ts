import { findPgBouncer, findPostgresServer } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { PostgresKeyValueStore, PostgresLockProvider, PostgresProcessBackend } from '../src/index.js';
import { dropTables, tableSet, uniqueSuffix } from './support/context.js';

/**
 * PgBouncer in transaction mode (STOWAGE_PGBOUNCER_URL; required under CI=true). A
 * transaction pooler hands each transaction to any server session: a LISTEN sent through it
 * stays on a pooled session and its NOTIFYs (lock keys, item ids) reach whichever client uses
 * that session next. Stowage must never LISTEN there, and say so in `capabilities`.
 */
const bouncer = await findPgBouncer();
const server = bouncer ? await findPostgresServer() : null;
const describeBouncer = bouncer && server ? describe : describe.skip;
if (bouncer) console.log(`[stowage postgres] pooler backend: ${bouncer.label}`);

describeBouncer('behind PgBouncer (transaction mode)', () => {
  const admin = new pg.Pool({ connectionString: server?.url, max: 2, application_name: 'stowage-test-admin' });
  afterAll(async () => {
    await admin.end();
    await bouncer?.stop();
    await server?.stop();
  });

  test('no LISTEN ever goes through the pooler: wakeups false, and no other client receives a NOTIFY of locks or items', { timeout: 120_000 }, async () => {
    const tables = tableSet();
    const applicationName = `stowage-bouncer-${uniqueSuffix()}`;
    const through = { url: bouncer!.url, applicationName, pool: { max: 3 } };
    // Plain clients of the pooler that LISTEN to nothing, each in and out of transactions all
    // along: a NOTIFY that reaches the server session one of them is on is passed to it.
    const observers = await Promise.all(
      [0, 1, 2].map(async () => {
        const client = new pg.Client({ connectionString: bouncer!.url, application_name: applicationName });
        const received: string[] = [];
        client.on('notification', (message) => received.push(`${message.channel}: ${message.payload}`));
        await client.connect();
        return { client, received };
      }),
    );
    let observing = true;
    const observing$ = observers.map(async ({ client }) => {
      while (observing) await client.query('BEGIN; SELECT pg_sleep(0.01); COMMIT');
    });

    // Several rounds of stores starting, working and closing, as processes would.
    for (let round = 0; round < 3; round++) {
      const stores = [
        ...[0, 1, 2].map(() => new PostgresLockProvider({ ...through, table: tables.locks })),
        ...[0, 1].map(() => new PostgresProcessBackend({ ...through, itemsTable: tables.processItems, transitionsTable: tables.processTransitions })),
      ];
      await Promise.all(stores.map((store) => store.ready()));
      for (const store of stores) expect(store.capabilities).toMatchObject({ wakeups: false, changeFeed: false });

      const [a, b] = stores as [PostgresLockProvider, PostgresLockProvider];
      for (let i = 0; i < 10; i++) {
        const key = `job-${round}-${i}`;
        const held = await a.acquire(key, 60_000);
        const waiting = b.acquire(key, 60_000, { wait: 30_000, pollInterval: 20 }); // polls
        await held!.release();
        await (await waiting)!.release();
      }
      const backend = stores[3] as PostgresProcessBackend;
      for (let i = 0; i < 10; i++) {
        const id = `item-${round}-${i}`;
        const { item } = await backend.createItem({ process: 'p', id, state: 'new', data: {} });
        await backend.transition({ process: 'p', itemId: id, from: 'new', version: item.version, to: 'done', kind: 'advance', key: id });
      }
      await Promise.all(stores.map((store) => store.close()));
    }
    observing = false;
    await Promise.all(observing$);
    for (const { client } of observers) await client.query('BEGIN; SELECT 1; COMMIT'); // delivers what is pending
    for (const { received } of observers) expect(received).toEqual([]);
    await Promise.all(observers.map(({ client }) => client.end()));

    // And on the server: no session that ran our statements last ran a LISTEN.
    const { rows } = await admin.query(`SELECT pid, query FROM pg_stat_activity WHERE application_name = $1 AND query ILIKE '%LISTEN %'`, [
      applicationName,
    ]);
    expect(rows).toEqual([]);
    await dropTables(admin, tables);
  });

  test('with listenUrl at the server itself, wake-ups work behind PgBouncer, and no other client receives a NOTIFY', { timeout: 60_000 }, async () => {
    const tables = tableSet();
    const applicationName = `stowage-bouncer-${uniqueSuffix()}`;
    const observer = new pg.Client({ connectionString: bouncer!.url, application_name: applicationName });
    const received: string[] = [];
    observer.on('notification', (message) => received.push(`${message.channel}: ${message.payload}`));
    await observer.connect();
    let observing = true;
    const observing$ = (async () => {
      while (observing) await observer.query('BEGIN; SELECT pg_sleep(0.01); COMMIT');
    })();

    const through = { url: bouncer!.url, listenUrl: server!.url, applicationName, pool: { max: 3 } };
    const locks = new PostgresLockProvider({ ...through, table: tables.locks });
    const holder = new PostgresLockProvider({ url: bouncer!.url, table: tables.locks, wakeups: false });
    const backend = new PostgresProcessBackend({ ...through, itemsTable: tables.processItems, transitionsTable: tables.processTransitions });
    await Promise.all([locks.ready(), backend.ready()]);
    expect(locks.capabilities.wakeups).toBe(true);
    expect(backend.capabilities).toMatchObject({ wakeups: true, changeFeed: true });
    for (let i = 0; i < 5; i++) {
      const held = await holder.acquire(`job-${i}`, 60_000);
      // Only a NOTIFY can wake it before the end of the test: it never polls.
      const waiting = locks.acquire(`job-${i}`, 60_000, { wait: 600_000, pollInterval: 600_000 });
      await held!.release();
      await (await waiting)!.release();
    }
    await Promise.all([locks.close(), holder.close(), backend.close()]);
    observing = false;
    await observing$;
    await observer.query('BEGIN; SELECT 1; COMMIT');
    expect(received).toEqual([]);
    await observer.end();
    await dropTables(admin, tables);
  });

  test('a startup parameter PgBouncer refuses (statement_timeout) is E_INVALID_OPTION, not retryable', async () => {
    const kv = new PostgresKeyValueStore({ url: bouncer!.url, table: `kv_${uniqueSuffix()}`, pool: { statement_timeout: 5000 } });
    const error = await kv.get('k').then(
      () => null,
      (reason: Error & { code?: string; cause?: { code?: string } }) => reason,
    );
    expect(error?.code).toBe('E_INVALID_OPTION');
    expect(error?.cause?.code).toBe('08P01');
    expect(error?.message).toMatch(/ALTER ROLE/);
    // ignore_startup_parameters would make PgBouncer drop the timeout without a word.
    expect(error?.message).not.toMatch(/ignore_startup_parameters/);
    await kv.close();
  });
});
