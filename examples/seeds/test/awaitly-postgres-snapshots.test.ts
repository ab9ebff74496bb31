/**
 * The awaitly-postgres docs' snapshot-store samples (src/awaitly-postgres-snapshots/), each run
 * as written on embedded PGlite and on the PostgreSQL server (STOWAGE_POSTGRES_URL), in the
 * docs' order. `postgresql://localhost/mydb` reaches the backend through the standard PGUSER /
 * PGPORT the URL leaves to the environment; DATABASE_URL is a database of this run.
 */
import { readFile } from 'node:fs/promises';
import type { LockingSnapshotStore, SnapshotListItem, SnapshotStore, WorkflowSnapshot } from '@stowage/core';
import { postgres as snapshotStore } from '@stowage/postgres';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  embeddedPostgres,
  freshModules,
  resourcesOf,
  runSample,
  serverPostgres,
  unique,
  setEnv,
  type Closable,
  type PostgresTarget,
} from './harness.ts';

type Calls = { calls: { fetchUser: number; createOrder: number } };
type Skippable = { skip(note?: string): never };

const snapshot: WorkflowSnapshot = {
  formatVersion: 1,
  steps: { 'fetch-user': { ok: true, value: { id: '123', name: 'Ada' } } },
  execution: { status: 'completed', lastUpdated: '2024-01-15T10:30:00.000Z', completedAt: '2024-01-15T10:30:00.000Z' },
};

const sql = (name: string) => readFile(new URL(`../src/awaitly-postgres-snapshots/${name}`, import.meta.url), 'utf8');

const TARGETS: { name: string; start(): Promise<PostgresTarget | null> }[] = [
  { name: 'embedded PGlite', start: embeddedPostgres },
  { name: 'the PostgreSQL server', start: serverPostgres },
];

for (const target of TARGETS) {
  describe(`awaitly-postgres snapshot samples on ${target.name}`, () => {
    let postgres: PostgresTarget | null;
    let restoreEnv = () => {};
    const opened: Closable[] = [];

    beforeAll(async () => {
      postgres = await target.start();
      if (postgres) {
        console.log(`[seeds] awaitly-postgres snapshot samples on ${postgres.label}`);
        restoreEnv = setEnv({ DATABASE_URL: postgres.databaseUrl, ...postgres.localhostEnv });
      }
    });
    beforeEach(() => freshModules());
    afterAll(async () => {
      await Promise.all(opened.map((resource) => resource.close()));
      restoreEnv();
      if (postgres) {
        // The rows the samples left in the databases they name.
        for (const table of ['awaitly_snapshots', 'my_workflow_snapshots', 'my_workflow_locks']) {
          await postgres.query('mydb', `DROP TABLE IF EXISTS ${table}`).catch(() => undefined);
        }
      }
      await postgres?.stop();
    });

    function target_(context: Skippable): PostgresTarget {
      if (!postgres) return context.skip('no PostgreSQL server (set STOWAGE_POSTGRES_URL)');
      if (Object.keys(postgres.localhostEnv).length === 0) return context.skip('the samples name localhost, which is not this server');
      return postgres;
    }

    async function run<T extends object>(context: Skippable, path: string): Promise<T & Calls> {
      target_(context);
      const exports = await runSample<T>(`awaitly-postgres-snapshots/${path}`);
      opened.push(...resourcesOf(exports));
      return { ...exports, ...(await runSample<Calls>('deps.ts')) };
    }

    it('Quick Start, as written: runs the workflow, saves the collected ResumeState, loads it and resumes without re-running a step', async (context) => {
      const { store, savedState, calls } = await run<{ store: SnapshotStore; savedState: unknown }>(context, 'quick-start.ts');
      expect(calls).toEqual({ fetchUser: 1, createOrder: 1 }); // the resumed run replayed both steps
      expect((savedState as { steps: Map<string, unknown> }).steps).toBeInstanceOf(Map);
      expect([...(savedState as { steps: Map<string, unknown> }).steps.keys()]).toEqual(['fetch-user', 'create-order']);
      expect((await store.list()).map((item) => item.id)).toContain('checkout-123');
    });

    it('Quick Start, with loadResumeState (the line tsc --strict needs): the same run', async (context) => {
      const { calls, savedState } = await run<{ savedState: unknown }>(context, 'quick-start.changed.ts');
      expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });
      expect((savedState as { steps: Map<string, unknown> }).steps).toBeInstanceOf(Map);
    });

    it('String Shorthand: its placeholder credentials are refused on first use (the sample needs your own URL)', async (context) => {
      const { isLocalhost5432 } = target_(context);
      if (!isLocalhost5432) return context.skip('the sample names localhost:5432, which is not this backend');
      const { store } = await run<{ store: SnapshotStore }>(context, 'string-shorthand.ts');
      await expect(store.load('checkout-123')).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringContaining('"user"') });
    });

    it("Object Options: table, prefix, autoCreateTable and lock (awaitly's WorkflowLock)", async (context) => {
      const { store } = await run<{ store: LockingSnapshotStore }>(context, 'object-options.ts');
      await store.save('wf-1', snapshot);
      expect(await store.load('wf-1')).toEqual(snapshot);
      const { rows } = await postgres!.query('mydb', 'SELECT prefix, id FROM my_workflow_snapshots');
      expect(rows).toEqual([{ prefix: 'orders:', id: 'wf-1' }]);
      const lease = await store.tryAcquire('wf-1', { ttlMs: 10_000 });
      expect(lease).not.toBeNull();
      expect(await store.tryAcquire('wf-1')).toBeNull();
      await store.release('wf-1', lease!.ownerToken);
      await store.delete('wf-1');
    });

    it('Bring Your Own Pool: the store runs on the given pool (the url is not used)', async (context) => {
      const { store, pool } = await run<{ store: SnapshotStore; pool: import('pg').Pool }>(context, 'bring-your-own-pool.ts');
      await store.save('wf-2', snapshot);
      expect(await store.load('wf-2')).toEqual(snapshot);
      const { rows } = await pool.query('SELECT count(*)::int AS n FROM awaitly_snapshots');
      expect(rows).toEqual([{ n: 1 }]); // in DATABASE_URL's database, not in mydb
      await store.delete('wf-2');
    });

    it('Usage Examples (continuing the quick start): save, load, delete, list, list by prefix, close', async (context) => {
      const { snapshot: loaded, workflows, orderWorkflows } = await run<{
        snapshot: unknown;
        workflows: SnapshotListItem[];
        orderWorkflows: SnapshotListItem[];
      }>(context, 'usage-examples.ts');
      expect((loaded as { steps: unknown }).steps).toBeInstanceOf(Map); // what was saved: the collector's ResumeState
      expect(workflows.map((item) => item.id)).toEqual(['checkout-123']); // wf-123 was deleted
      expect(workflows[0]!.updatedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(orderWorkflows).toEqual([]);
    });

    it('With Durable Execution: the checkout completes and its state is removed', async (context) => {
      const { result, store, calls } = await run<{ result: unknown; store: SnapshotStore }>(context, 'with-durable-execution.ts');
      expect(result).toEqual({ ok: true, value: { orderId: 'order-for-123', total: 42 } });
      expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });
      expect(await store.load('checkout-123')).toBeNull();
    });

    it('Connection Pooling (production): the store on a pool with min and max sizes', async (context) => {
      const { store } = await run<{ store: SnapshotStore }>(context, 'connection-pooling.ts');
      await store.save('wf-3', snapshot);
      expect(await store.list({ prefix: 'wf-' })).toEqual([expect.objectContaining({ id: 'wf-3' })]);
      await store.delete('wf-3');
    });

    it("Cleanup, as written: type-checks, but throws once the quick start's ResumeState is in the table (it has no execution)", async (context) => {
      await expect(run(context, 'cleanup.ts')).rejects.toThrow(TypeError);
      // The sample's store (opened before it threw) is still open: close it.
      opened.push(...resourcesOf(await runSample<object>('awaitly-postgres-snapshots/later-process.ts')));
    });

    it('Cleanup, reading the status with ?. : deletes the completed snapshots and keeps the rest', async (context) => {
      target_(context);
      const seeded = snapshotStore('postgresql://localhost/mydb');
      opened.push(seeded);
      await seeded.save('done-1', snapshot);
      await seeded.save('running-1', { ...snapshot, execution: { status: 'running', lastUpdated: snapshot.execution.lastUpdated } });
      await run(context, 'cleanup.changed.ts');
      expect((await seeded.list()).map((item) => item.id).sort()).toEqual(['checkout-123', 'running-1']);
    });

    it('Monitoring SQL: table size, and the count by status (a ResumeState counts under no status)', async (context) => {
      const { query } = target_(context);
      const statements = (await sql('monitoring.sql'))
        .split(/;\s*\n/)
        .map((statement) => statement.trim())
        .filter((statement) => /select/i.test(statement));
      const [size, byStatus] = [await query('mydb', statements[0]!), await query('mydb', statements[1]!)];
      expect(size.rows[0].pg_size_pretty).toMatch(/\d+ (bytes|kB)/);
      expect(Object.fromEntries(byStatus.rows.map((row) => [String(row.status), Number(row.count)]))).toEqual({ running: 1, null: 1 });
    });

    it('Table Schema SQL run first, with snapshots awaitly-postgres saved (its prefix inside the id): each store finds its own', async (context) => {
      const { query, databaseUrl } = target_(context);
      const schema = unique('adopt');
      await query('app', `CREATE SCHEMA ${schema}; SET search_path TO ${schema}; ${await sql('table-schema.sql')}; SET search_path TO DEFAULT`);
      const table = `${schema}.awaitly_snapshots`;
      // What awaitly-postgres's save(id, snapshot) wrote, for a store with prefix 'orders:' and one without.
      for (const id of ['orders:wf-1', 'orders:wf-2', 'checkout-9']) {
        await query('app', `INSERT INTO ${table} (id, snapshot, updated_at) VALUES ($1, $2, NOW()) ON CONFLICT (id) DO UPDATE SET snapshot = $2, updated_at = NOW()`, [
          id,
          JSON.stringify(snapshot),
        ]);
      }
      const orders = snapshotStore({ url: databaseUrl, schema, prefix: 'orders:' });
      const plain = snapshotStore({ url: databaseUrl, schema });
      opened.push(orders, plain);
      expect(await orders.load('wf-1')).toEqual(snapshot);
      expect((await orders.list()).map((item) => item.id).sort()).toEqual(['wf-1', 'wf-2']);
      expect(await plain.load('checkout-9')).toEqual(snapshot);
      expect(await plain.load('orders:wf-1')).toBeNull(); // the orders: store's now: prefixes are namespaces
      await orders.save('wf-4', snapshot);
      // Adopted, the id column is snapshot_id: awaitly-postgres's own statements (by id) fail there.
      const { rows } = await query('app', `SELECT prefix, snapshot_id AS id FROM ${table} ORDER BY prefix, snapshot_id`);
      expect(rows).toEqual([
        { prefix: '', id: 'checkout-9' },
        { prefix: 'orders:', id: 'wf-1' },
        { prefix: 'orders:', id: 'wf-2' },
        { prefix: 'orders:', id: 'wf-4' },
      ]);
      // The snapshot column is still JSONB: the docs' Monitoring SQL reads it.
      const count = (await sql('monitoring.sql')).split(/;\s*\n/).filter((statement) => /COUNT/.test(statement))[0]!;
      const { rows: byStatus } = await query('app', count.replace('FROM awaitly_snapshots', `FROM ${table}`));
      expect(byStatus.map((row) => [row.status, Number(row.count)])).toEqual([['completed', 4]]);
      await query('app', `DROP SCHEMA ${schema} CASCADE`);
    });
  });
}
