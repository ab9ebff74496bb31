/**
 * The awaitly-postgres docs' key-value samples (src/awaitly-postgres-kv/), each run as written
 * on embedded PGlite and on the PostgreSQL server (STOWAGE_POSTGRES_URL), DATABASE_URL being a
 * database of this run. The SQL blocks run against the tables the samples created.
 */
import { readFile } from 'node:fs/promises';
import type { KeyValueStore, SnapshotStore, WorkflowSnapshot } from '@stowage/core';
import { createPostgresPersistence } from '@stowage/postgres';
import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { embeddedPostgres, freshModules, resourcesOf, runSample, serverPostgres, unique, setEnv, type Closable, type PostgresTarget } from './harness.ts';

type Calls = { calls: { fetchUser: number; createOrder: number } };
type DurableResult = { ok: boolean; value?: unknown; error?: unknown };
type Skippable = { skip(note?: string): never };

const snapshot: WorkflowSnapshot = {
  formatVersion: 1,
  steps: { 'fetch-user': { ok: true, value: { id: '123', name: 'Ada' } } },
  execution: { status: 'running', lastUpdated: '2024-01-15T10:30:00.000Z' },
};

const sql = (name: string) => readFile(new URL(`../src/awaitly-postgres-kv/${name}`, import.meta.url), 'utf8');

const TARGETS: { name: string; start(): Promise<PostgresTarget | null> }[] = [
  { name: 'embedded PGlite', start: embeddedPostgres },
  { name: 'the PostgreSQL server', start: serverPostgres },
];

for (const target of TARGETS) {
  describe(`awaitly-postgres key-value samples on ${target.name}`, () => {
    let postgres: PostgresTarget | null;
    let restoreEnv = () => {};
    const opened: Closable[] = [];

    beforeAll(async () => {
      postgres = await target.start();
      if (postgres) {
        console.log(`[seeds] awaitly-postgres key-value samples on ${postgres.label}`);
        restoreEnv = setEnv({ DATABASE_URL: postgres.databaseUrl, ...postgres.localhostEnv });
      }
    });
    beforeEach(() => freshModules());
    afterAll(async () => {
      await Promise.all(opened.map((resource) => resource.close()));
      restoreEnv();
      await postgres?.query('myapp', 'DROP TABLE IF EXISTS custom_workflow_state').catch(() => undefined);
      await postgres?.stop();
    });

    function target_(context: Skippable): PostgresTarget {
      if (!postgres) return context.skip('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
      return postgres;
    }

    async function run<T extends object>(context: Skippable, path: string): Promise<T & Calls> {
      target_(context);
      const exports = await runSample<T>(`awaitly-postgres-kv/${path}`);
      opened.push(...resourcesOf(exports));
      return { ...exports, ...(await runSample<Calls>('deps.ts')) };
    }

    it('Quick Start, as written: awaitly 1.35.0 calls the workflow with ({ step, deps }), so it fails inside awaitly', async (context) => {
      const { result, store, calls } = await run<{ result: DurableResult; store: SnapshotStore }>(context, 'quick-start.ts');
      expect(result.ok).toBe(false);
      expect(String((result.error as { cause?: unknown }).cause)).toContain("Cannot destructure property 'fetchUser'");
      expect(calls).toEqual({ fetchUser: 0, createOrder: 0 });
      expect(await store.load('checkout-123')).toBeNull();
    });

    it("Quick Start, with awaitly 1.35.0's workflow function: completes, and its state is removed", async (context) => {
      const { result, store, calls } = await run<{ result: DurableResult; store: SnapshotStore }>(context, 'quick-start.changed.ts');
      expect(result).toEqual({ ok: true, value: { orderId: 'order-for-123', total: 42 } });
      expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });
      expect(await store.load('checkout-123')).toBeNull();
    });

    it('Connection String: its placeholder credentials are refused by the server (the sample needs your own URL)', async (context) => {
      const { isLocalhost5432 } = target_(context);
      if (!isLocalhost5432) return context.skip('the sample names localhost:5432, which is not this backend');
      const attempt = runSample('awaitly-postgres-kv/connection-string.ts');
      await expect(attempt).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringContaining('"user"') });
    });

    it('Individual Options: host, port, database, user, password, tableName and prefix', async (context) => {
      const { isLocalhost5432, query } = target_(context);
      if (!isLocalhost5432) return context.skip('the sample names localhost:5432, which is not this backend');
      const { store } = await run<{ store: SnapshotStore }>(context, 'individual-options.ts');
      await store.save('wf-1', snapshot);
      const { rows } = await query('myapp', 'SELECT key FROM custom_workflow_state ORDER BY key COLLATE "C"');
      // awaitly's key, and stowage's record of the prefixes in use on the table.
      expect(rows).toEqual([{ key: 'myapp:workflow:wf-1' }, { key: '\u007fstowage:state-prefixes' }]);
      await store.delete('wf-1');
    });

    it('Using Existing Pool: the store runs on the pool and leaves it open on close', async (context) => {
      const { store, pool } = await run<{ store: SnapshotStore; pool: pg.Pool }>(context, 'existing-pool.ts');
      await store.save('wf-2', snapshot);
      expect(await store.load('wf-2')).toEqual(snapshot);
      await store.delete('wf-2');
      await store.close();
      expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    });

    it('Pool Configuration: the store works with the given pool settings', async (context) => {
      const { store } = await run<{ store: SnapshotStore }>(context, 'pool-configuration.ts');
      await store.save('wf-3', snapshot);
      expect(await store.list({ prefix: 'wf-' })).toEqual([expect.objectContaining({ id: 'wf-3' })]);
      await store.delete('wf-3');
    });

    it("Direct KeyValueStore Access: createStatePersistence over PostgresKeyValueStore keeps snapshots under 'custom:prefix:'", async (context) => {
      const { store, persistence } = await run<{ store: KeyValueStore; persistence: SnapshotStore }>(context, 'direct-key-value-store.ts');
      await persistence.save('wf-4', snapshot);
      expect(await store.keys('custom:prefix:*')).toEqual(['custom:prefix:wf-4']);
      await persistence.delete('wf-4');
    });

    it('Connection Pooling (production): the store works with min and max pool sizes', async (context) => {
      const { store } = await run<{ store: SnapshotStore }>(context, 'connection-pooling.ts');
      await store.save('wf-5', snapshot);
      expect(await store.load('wf-5')).toEqual(snapshot);
      await store.delete('wf-5');
    });

    it("Table Maintenance and Monitoring SQL run on the store's table; the index the monitoring query names has another name here", async (context) => {
      const { query, databaseUrl } = target_(context);
      const store = await createPostgresPersistence({ connectionString: databaseUrl }); // the table of the samples above
      opened.push(store);
      await store.save('wf-6', snapshot);
      await query('app', await sql('table-maintenance.sql'));
      expect(await store.load('wf-6')).toEqual(snapshot); // not expired, so kept
      const [size, indexUsage] = await Promise.all(
        (await sql('monitoring.sql'))
          .split(/;\s*\n/)
          .map((statement) => statement.trim())
          .filter((statement) => /^(--.*\n)*\s*select/i.test(statement))
          .map((statement) => query('app', statement)),
      );
      expect(size!.rows[0].pg_size_pretty).toMatch(/\d+ (bytes|kB)/);
      expect(indexUsage!.rows).toEqual([]); // stowage's index is awaitly_workflow_state_expires_at_idx
      const { rows } = await query('app', "SELECT indexrelname FROM pg_stat_user_indexes WHERE relname = 'awaitly_workflow_state' ORDER BY 1");
      expect(rows.map((row) => row.indexrelname)).toContain('awaitly_workflow_state_expires_at_idx');
      await store.delete('wf-6');
    });

    for (const [block, file] of [
      ['Table Schema', 'table-schema.sql'],
      ['Automatic Table Creation', 'automatic-table-creation.sql'],
    ] as const) {
      it(`${block} SQL run first, with rows awaitly-postgres wrote: the store adopts the table in place and reads every row`, async (context) => {
        const { query, databaseUrl } = target_(context);
        const schema = unique('adopt');
        await query('app', `CREATE SCHEMA ${schema}; SET search_path TO ${schema}; ${await sql(file)}; SET search_path TO DEFAULT`);
        const table = `${schema}.awaitly_workflow_state`;
        // What awaitly-postgres's set(key, value, { ttl }) writes: the expiry as a Date into the TIMESTAMP column.
        await query('app', `INSERT INTO ${table} (key, value, expires_at) VALUES ($1, $2, NULL), ($3, $2, $4)`, [
          'workflow:state:checkout-7',
          JSON.stringify(snapshot),
          'workflow:state:checkout-8',
          new Date(Date.now() + 3_600_000),
        ]);
        const store = await createPostgresPersistence({ connectionString: databaseUrl, schema });
        opened.push(store);
        expect(await store.load('checkout-7')).toEqual(snapshot);
        expect(await store.load('checkout-8')).toEqual(snapshot);
        await store.save('wf-7', snapshot);
        expect((await store.list()).map((item) => item.id).sort()).toEqual(['checkout-7', 'checkout-8', 'wf-7']);
        // Rows awaitly wrote are version 1; stowage's writes take versions above.
        const { rows } = await query('app', `SELECT key, version::int AS version FROM ${table} ORDER BY key COLLATE "C"`);
        expect(rows).toEqual([
          { key: 'workflow:state:checkout-7', version: 1 },
          { key: 'workflow:state:checkout-8', version: 1 },
          { key: 'workflow:state:wf-7', version: expect.any(Number) },
          { key: '\u007fstowage:state-prefixes', version: expect.any(Number) }, // stowage's record of the prefixes in use
        ]);
        expect(rows[2].version).toBeGreaterThan(1);
        // The docs' Table Maintenance SQL runs on the adopted table and keeps the live rows.
        await query('app', `SET search_path TO ${schema}; ${await sql('table-maintenance.sql')}; SET search_path TO DEFAULT`);
        expect(await store.load('checkout-8')).toEqual(snapshot);
        await query('app', `DROP SCHEMA ${schema} CASCADE`);
      });
    }
  });
}
