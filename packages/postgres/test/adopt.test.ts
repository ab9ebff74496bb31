import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { JsonObject, WorkflowSnapshot } from '@stowage/core';
import { findPostgresServer, startEmbeddedPostgres, type FoundBackend } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { PostgresCheckpointStore, PostgresKeyValueStore, createPostgresPersistence, goGoScopePersistence, postgres } from '../src/index.js';
import { toStowageError } from '../src/errors.js';
import {
  awaitlyKeyValueDdl,
  awaitlyKeyValueDdlWithUpdatedAt,
  awaitlySave,
  awaitlySet,
  awaitlySnapshotDdl,
  awaitlySnapshotStatements,
  goGoScopePostgresDdl,
  goGoScopePostgresWrites,
  seededSchema,
} from './support/legacy.js';

/**
 * Tables written by awaitly-postgres, created exactly as its docs show them and filled as it
 * fills them, opened in place by stowage: every row reads back, writes work, versions and
 * namespaces behave as stowage promises, and several processes adopting at once do no harm.
 * On embedded PGlite (a C-collated database) and on the PostgreSQL server (C.UTF-8 here, so
 * the keys' collation is converted too).
 */
const backends: { name: string; found: FoundBackend | null; pool: { max: number } }[] = [
  { name: 'PGlite', found: await startEmbeddedPostgres(), pool: { max: 1 } },
  { name: 'PostgreSQL server', found: await findPostgresServer(), pool: { max: 3 } },
];
afterAll(() => Promise.all(backends.map((backend) => backend.found?.stop())));

const snapshot = (status: 'running' | 'completed', step = 'fetch-user'): WorkflowSnapshot => ({
  formatVersion: 1,
  steps: { [step]: { ok: true, value: { id: '123', name: 'Ada' } } },
  execution: { status, lastUpdated: '2024-01-15T10:30:00.000Z' },
});

for (const backend of backends) {
  describe.skipIf(backend.found === null)(`adopting awaitly-postgres tables (${backend.name})`, () => {
    const url = () => backend.found!.url;
    /** A schema of its own per test, with `sql` (the seed DDL) run in it, and an admin pool. */
    const legacySchema = (sql: string) => seededSchema(url(), 'adopt', sql);
    /** Another process: a pool of its own (an application name of its own keeps stowage from sharing one). */
    let processes = 0;
    const processOptions = (schema: string) => ({ url: url(), pool: backend.pool, schema, applicationName: `adopt-${++processes}` });

    async function layout(admin: pg.Pool, table: string) {
      const { rows: columns } = await admin.query(
        `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null, co.collname AS collation
         FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation
         WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
        [table],
      );
      const { rows: indexes } = await admin.query(
        `SELECT i.relname AS name, x.indisvalid AS valid, x.indisprimary AS primary FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
         WHERE x.indrelid = $1::regclass ORDER BY 1`,
        [table],
      );
      return { columns, indexes };
    }

    test("the key-value table of the docs, with rows: every row reads back, versions start above the legacy rows' 1, expiry keeps its meaning", async () => {
      const { schema, admin, q, drop } = await legacySchema(awaitlyKeyValueDdl());
      const name = 'awaitly_workflow_state';
      const table = q(name);
      await awaitlySet(admin, table, 'workflow:state:checkout-1', JSON.stringify(snapshot('running')));
      await awaitlySet(admin, table, 'workflow:state:checkout-2', JSON.stringify(snapshot('completed')), 3600);
      await awaitlySet(admin, table, 'session:%_.*?', 'hostile characters', 3600);
      await awaitlySet(admin, table, 'session:ünï', 'ünïcödé 😀');
      await admin.query(`INSERT INTO ${table} VALUES ('session:gone', 'expired', now()::timestamp - interval '1 minute')`);
      const before = await admin.query(`SELECT key, value FROM ${table} WHERE expires_at IS NULL OR expires_at > now() ORDER BY key`);

      const store = await createPostgresPersistence({ ...processOptions(schema), tableName: name });
      const kv = new PostgresKeyValueStore({ ...processOptions(schema), table: name });
      try {
        expect(await store.load('checkout-1')).toEqual(snapshot('running'));
        expect(await store.load('checkout-2')).toEqual(snapshot('completed'));
        for (const row of before.rows) expect(await kv.get(row.key)).toBe(row.value);
        expect(await kv.get('session:gone')).toBeNull();
        // The legacy rows, and the one row stowage adds: the record of the state prefixes in use.
        const legacyKeys = before.rows.map((row) => row.key);
        expect(await kv.keys()).toEqual(['\u007fstowage:state-prefixes', ...legacyKeys].sort((a, b) => (a < b ? -1 : 1)));
        expect(await kv.keys('session:%_.\\*\\?')).toEqual(['session:%_.*?']); // literal, as stowage's globs are everywhere

        // Legacy rows are version 1; every write takes 2 and up, never 1 again.
        const legacy = (await kv.getEntry('session:ünï'))!;
        expect(legacy.version).toBe(1);
        expect(await kv.compareAndSet('session:ünï', 'changed', 1)).toBeGreaterThan(1);
        await expect(kv.compareAndSet('session:ünï', 'again', 1)).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
        await kv.delete('workflow:state:checkout-1');
        await kv.set('workflow:state:checkout-1', 'new');
        expect((await kv.getEntry('workflow:state:checkout-1'))!.version).toBeGreaterThan(1);

        // An expiry awaitly wrote (its session's wall clock) is the same instant after the conversion.
        const expiresAt = (await kv.getEntry('workflow:state:checkout-2'))!.expiresAt!.getTime();
        expect(Math.abs(expiresAt - (Date.now() + 3_600_000))).toBeLessThan(120_000);
        expect(await kv.clearExpired()).toBe(1); // session:gone
        expect(await kv.getMany(['workflow:state:checkout-2', 'session:gone'])).toEqual([JSON.stringify(snapshot('completed')), null]);
        await kv.set('ttl', 'short', { ttl: 1 });
        await new Promise((resolve) => setTimeout(resolve, 20));
        expect(await kv.get('ttl')).toBeNull();
        expect((await store.list()).map((item) => item.id).sort()).toEqual(['checkout-1', 'checkout-2']);

        const { columns, indexes } = await layout(admin, table);
        expect(columns).toEqual([
          { name: 'key', type: 'text', not_null: true, collation: backend.name === 'PGlite' ? 'default' : 'C' },
          { name: 'value', type: 'text', not_null: true, collation: 'default' },
          { name: 'expires_at', type: 'timestamp with time zone', not_null: false, collation: null },
          { name: 'version', type: 'bigint', not_null: true, collation: null },
          { name: 'updated_at', type: 'timestamp with time zone', not_null: true, collation: null },
        ]);
        expect(indexes.map((index) => [index.name, index.valid])).toEqual(
          expect.arrayContaining([
            ['awaitly_workflow_state_expires_at_idx', true],
            ['awaitly_workflow_state_recent_idx', true],
          ]),
        );
        expect(indexes.map((index) => index.name)).not.toContain('idx_awaitly_workflow_state_expires_at'); // replaced by stowage's
        expect(indexes.filter((index) => index.primary)).toHaveLength(1);
      } finally {
        await Promise.all([store.close(), kv.close()]);
        await drop();
      }
    });

    test('a later awaitly key-value table (nullable updated_at at microseconds): NULLs filled, times at milliseconds, pages exact', async () => {
      const { schema, admin, q, drop } = await legacySchema(awaitlyKeyValueDdlWithUpdatedAt());
      const name = 'awaitly_workflow_state';
      const table = q(name);
      await admin.query(
        `INSERT INTO ${table} (key, value, updated_at)
         SELECT 'workflow:state:wf-' || g, 'v' || g, CASE WHEN g % 10 = 0 THEN NULL ELSE timestamptz '2024-01-01 00:00:00.123' + g * interval '1 microsecond' END
         FROM generate_series(1, 300) AS g`,
      );
      const store = await createPostgresPersistence({ ...processOptions(schema), tableName: name });
      try {
        const { rows } = await admin.query(`SELECT count(*)::int AS n FROM ${table} WHERE updated_at IS NULL OR updated_at <> date_trunc('milliseconds', updated_at)`);
        expect(rows).toEqual([{ n: 0 }]);
        // Rows written within one millisecond: a page boundary between them skips none.
        const seen: string[] = [];
        for await (const item of store.scan({ pageSize: 7 })) seen.push(item.id);
        expect(seen.sort()).toEqual(Array.from({ length: 300 }, (_, i) => `wf-${i + 1}`).sort());
        expect((await layout(admin, table)).columns.find((column) => column.name === 'updated_at')).toMatchObject({ not_null: true });
      } finally {
        await store.close();
        await drop();
      }
    });

    test('the snapshot table of the docs (JSONB, prefix inside the id): each prefix takes its rows, versions and namespaces hold', async () => {
      const { schema, admin, q, drop } = await legacySchema(awaitlySnapshotDdl());
      const table = q('awaitly_snapshots');
      await awaitlySave(admin, table, '', 'checkout-123', snapshot('running'));
      await awaitlySave(admin, table, 'orders:', 'wf-1', snapshot('running', 'charge'));
      await awaitlySave(admin, table, 'orders:', 'wf-2', snapshot('completed'));
      await awaitlySave(admin, table, 'users:admin:', 'wf-1', snapshot('running', 'grant'));
      await admin.query(`INSERT INTO ${table} (id, snapshot, updated_at) VALUES ('orders:', '{"formatVersion":1}', NULL)`);
      await admin.query(`UPDATE ${table} SET updated_at = updated_at - interval '1 second' WHERE id = 'orders:wf-1'`);

      const orders = postgres({ ...processOptions(schema), prefix: 'orders:' });
      const plain = postgres<JsonObject>(processOptions(schema));
      try {
        expect(await orders.load('wf-1')).toEqual(snapshot('running', 'charge'));
        expect((await orders.list()).map((item) => item.id)).toEqual(['wf-2', 'wf-1']); // newest first
        // The store without prefix sees the rows no started prefix took, under their whole id.
        expect(await plain.load('checkout-123')).toEqual(snapshot('running'));
        expect(await plain.load('users:admin:wf-1')).toEqual(snapshot('running', 'grant'));
        expect(await plain.load('orders:')).toEqual({ formatVersion: 1 }); // id equal to the prefix: not moved
        expect(await plain.load('orders:wf-1')).toBeNull(); // moved to the orders: namespace
        const users = postgres({ ...processOptions(schema), prefix: 'users:' });
        expect(await users.load('admin:wf-1')).toEqual(snapshot('running', 'grant'));
        await users.close();

        // Versions: legacy rows are 1; a save takes 2 and up; expectedVersion holds against the row read.
        const legacy = (await orders.loadVersioned('wf-2'))!;
        expect(legacy.version).toBe(1);
        await orders.save('wf-2', snapshot('running'), { expectedVersion: 1 });
        await expect(orders.save('wf-2', snapshot('running'), { expectedVersion: 1 })).rejects.toMatchObject({ code: 'E_VERSION_CONFLICT' });
        await orders.delete('wf-1');
        await orders.save('wf-1', snapshot('completed'), { expectedVersion: null });
        expect((await orders.loadVersioned('wf-1'))!.version).toBeGreaterThan(1);
        expect(await plain.load('wf-1')).toBeNull(); // namespaces: '' never sees orders:

        // JSONB keeps working: key order is jsonb's own, values are equal; it cannot hold U+0000.
        const raw = { z: 1, a: { c: [1, 'two'], b: null } };
        await plain.save('raw', raw);
        expect(await plain.load('raw')).toEqual(raw);
        await expect(plain.save('nul', { text: 'a\u0000b' })).rejects.toMatchObject({ code: 'E_INVALID_VALUE' });

        const { columns, indexes } = await layout(admin, table);
        expect(columns.map((column) => [column.name, column.type, column.not_null, column.collation])).toEqual([
          ['snapshot_id', 'text', true, 'C'], // renamed: awaitly-postgres's statements, which name id, fail
          ['snapshot', 'jsonb', true, null],
          ['updated_at', 'timestamp with time zone', true, null],
          ['prefix', 'text', true, 'C'],
          ['version', 'bigint', true, null],
        ]);
        expect(indexes.filter((index) => index.primary).map((index) => index.name)).toEqual(['awaitly_snapshots_pkey_c']);
        expect(indexes.map((index) => [index.name, index.valid])).toContainEqual(['awaitly_snapshots_list_idx', true]);
        const { rows } = await admin.query(`SELECT prefix, snapshot_id, version FROM ${table} WHERE prefix = 'orders:' ORDER BY snapshot_id`);
        expect(rows.map((row) => [row.prefix, row.snapshot_id])).toEqual([
          ['orders:', 'wf-1'],
          ['orders:', 'wf-2'],
        ]);
      } finally {
        await Promise.all([orders.close(), plain.close()]);
        await drop();
      }
    });

    test("awaitly-postgres's own statements, still running after the switch, touch no other namespace: each is refused", async () => {
      const { schema, admin, q, drop } = await legacySchema(awaitlySnapshotDdl());
      const table = q('awaitly_snapshots');
      for (const prefix of ['', 'payments:', 'shipping:']) await awaitlySave(admin, table, prefix, 'order-1001', snapshot('running', prefix || 'plain'));
      const stores = ['', 'payments:', 'shipping:'].map((prefix) => postgres({ ...processOptions(schema), prefix }));
      try {
        await Promise.all(stores.map((store) => store.ready()));
        // An old process (prefix '') finishing order-1001, and everything else it sends.
        const outcomes: Record<string, string> = {};
        for (const statement of awaitlySnapshotStatements(table, '', 'order-1001', snapshot('completed'))) {
          outcomes[statement.name] = await admin.query(statement.text, statement.values).then(
            (result) => `ran (${result.rowCount ?? 0} rows)`,
            (error: { code?: string }) => `refused (${error.code})`,
          );
        }
        expect(outcomes).toEqual({
          'create table': 'ran (0 rows)', // IF NOT EXISTS: nothing
          'create index': 'ran (0 rows)', // IF NOT EXISTS: nothing
          save: 'refused (42703)',
          load: 'refused (42703)',
          list: 'refused (42703)',
          delete: 'refused (42703)',
        });
        for (const [index, prefix] of ['', 'payments:', 'shipping:'].entries()) {
          expect(await stores[index]!.load('order-1001')).toEqual(snapshot('running', prefix || 'plain'));
        }
      } finally {
        await Promise.all(stores.map((store) => store.close()));
        await drop();
      }
    });

    test('four processes adopting the same tables at once: one upgrade, every row kept, each prefix moved once', async () => {
      const { schema, admin, q, drop } = await legacySchema(`${awaitlyKeyValueDdl()};\n${awaitlySnapshotDdl()}`);
      await admin.query(`INSERT INTO ${q('awaitly_workflow_state')} SELECT 'workflow:state:wf-' || g, 'v' || g, NULL FROM generate_series(1, 2000) AS g`);
      await admin.query(
        `INSERT INTO ${q('awaitly_snapshots')} (id, snapshot) SELECT CASE WHEN g % 2 = 0 THEN 'orders:' ELSE '' END || 'wf-' || g, jsonb_build_object('n', g) FROM generate_series(1, 2000) AS g`,
      );
      const stores = Array.from({ length: 4 }, () => ({
        kv: new PostgresKeyValueStore({ ...processOptions(schema), table: 'awaitly_workflow_state' }),
        orders: postgres({ ...processOptions(schema), prefix: 'orders:' }),
      }));
      try {
        await Promise.all(stores.flatMap(({ kv, orders }) => [kv.ready(), orders.ready()]));
        const counts = await admin.query(
          `SELECT (SELECT count(*)::int FROM ${q('awaitly_workflow_state')}) AS kv, (SELECT count(*)::int FROM ${q('awaitly_snapshots')} WHERE prefix = 'orders:') AS orders,
                  (SELECT count(*)::int FROM ${q('awaitly_snapshots')} WHERE prefix = '') AS plain`,
        );
        expect(counts.rows).toEqual([{ kv: 2000, orders: 1000, plain: 1000 }]);
        for (const { kv, orders } of stores) {
          expect(await kv.get('workflow:state:wf-1999')).toBe('v1999');
          expect(await orders.load('wf-2000')).toEqual({ n: 2000 });
        }
        for (const table of ['awaitly_workflow_state', 'awaitly_snapshots']) {
          const { indexes } = await layout(admin, q(table));
          expect(indexes.every((index) => index.valid)).toBe(true);
          expect(indexes.filter((index) => index.primary)).toHaveLength(1);
        }
      } finally {
        await Promise.all(stores.flatMap(({ kv, orders }) => [kv.close(), orders.close()]));
        await drop();
      }
    });

    // The worker process connects over TCP: the embedded PGlite lives in this process.
    test.skipIf(backend.name === 'PGlite')('an upgrade SIGKILLed at random points, then run to the end, keeps every row', { timeout: 60_000 }, async () => {
      const { schema, admin, q, drop } = await legacySchema(`${awaitlyKeyValueDdlWithUpdatedAt()};\n${awaitlySnapshotDdl()}`);
      const rows = 20_000;
      await admin.query(
        `INSERT INTO ${q('awaitly_workflow_state')} (key, value, updated_at)
         SELECT 'workflow:state:wf-' || g, 'v' || g, timestamptz '2024-01-01' + g * interval '1 microsecond' FROM generate_series(1, ${rows}) AS g`,
      );
      await admin.query(
        `INSERT INTO ${q('awaitly_snapshots')} (id, snapshot) SELECT CASE WHEN g % 2 = 0 THEN 'orders:' ELSE '' END || 'wf-' || g, jsonb_build_object('n', g) FROM generate_series(1, ${rows}) AS g`,
      );
      // The catalog of both tables (columns, indexes, constraints): each change is a step of the upgrade.
      const catalog = async () =>
        (
          await admin.query(
            `SELECT string_agg(what, ',' ORDER BY what) AS signature FROM (
               SELECT attname::text AS what FROM pg_attribute WHERE attrelid IN ($1::regclass, $2::regclass) AND attnum > 0 AND NOT attisdropped
               UNION ALL SELECT indexrelid::regclass::text || indisvalid FROM pg_index WHERE indrelid IN ($1::regclass, $2::regclass)
               UNION ALL SELECT conname::text FROM pg_constraint WHERE conrelid IN ($1::regclass, $2::regclass)) AS c`,
            [q('awaitly_workflow_state'), q('awaitly_snapshots')],
          )
        ).rows[0].signature as string;
      const worker = fileURLToPath(new URL('./support/adopt-worker.ts', import.meta.url));
      const start = () => spawn(process.execPath, [worker], { env: { ...process.env, STOWAGE_WORKER_URL: url(), STOWAGE_WORKER_SCHEMA: schema }, stdio: ['ignore', 'pipe', 'inherit'] });
      const kills: string[] = [];
      try {
        for (let round = 0; round < 5; round++) {
          // Killed after a random number (0 to 5) of catalog changes: points in the upgrade's progress, not moments in time.
          const changes = Math.floor(Math.random() * 6);
          const child = start();
          await printed(child, 'adopting');
          let seen = 0;
          let last = await catalog();
          while (seen < changes && child.exitCode === null) {
            const now = await catalog();
            if (now !== last) seen++;
            last = now;
          }
          const finished = child.exitCode !== null;
          child.kill('SIGKILL');
          await exited(child);
          kills.push(finished ? 'none (it had finished)' : `after ${seen} change(s)`);
        }
        const last = start();
        await printed(last, 'adopted');
        expect(await exited(last)).toBe(0);
        console.log(`[upgrade kill test] killed ${kills.join(', ')}`);

        const counts = await admin.query(
          `SELECT (SELECT count(*)::int FROM ${q('awaitly_workflow_state')}) AS kv, (SELECT count(*)::int FROM ${q('awaitly_snapshots')} WHERE prefix = 'orders:') AS orders,
                  (SELECT count(*)::int FROM ${q('awaitly_snapshots')} WHERE prefix = '') AS plain`,
        );
        expect(counts.rows).toEqual([{ kv: rows, orders: rows / 2, plain: rows / 2 }]);
        const kv = new PostgresKeyValueStore({ ...processOptions(schema), table: 'awaitly_workflow_state' });
        const orders = postgres({ ...processOptions(schema), prefix: 'orders:' });
        try {
          expect(await kv.get(`workflow:state:wf-${rows}`)).toBe(`v${rows}`);
          expect(await orders.load(`wf-${rows}`)).toEqual({ n: rows });
        } finally {
          await Promise.all([kv.close(), orders.close()]);
        }
        for (const table of ['awaitly_workflow_state', 'awaitly_snapshots']) expect((await layout(admin, q(table))).indexes.every((index) => index.valid)).toBe(true);
      } finally {
        await drop();
      }
    });

    test('an index an interrupted upgrade left invalid is built again', async () => {
      const { schema, admin, q, drop } = await legacySchema(awaitlyKeyValueDdl('legacy_kv'));
      await awaitlySet(admin, q('legacy_kv'), 'a', '1');
      // What a crash in the middle of CREATE INDEX CONCURRENTLY leaves: the index, marked invalid.
      await admin.query(`CREATE INDEX legacy_kv_expires_at_idx ON ${q('legacy_kv')} (value)`);
      await admin.query(`UPDATE pg_index SET indisvalid = false WHERE indexrelid = '${q('legacy_kv_expires_at_idx')}'::regclass`);
      const kv = new PostgresKeyValueStore({ ...processOptions(schema), table: 'legacy_kv' });
      try {
        expect(await kv.get('a')).toBe('1');
        const { rows } = await admin.query(
          `SELECT indisvalid AS valid, pg_get_indexdef(indexrelid) AS definition FROM pg_index WHERE indexrelid = '${q('legacy_kv_expires_at_idx')}'::regclass`,
        );
        expect(rows[0]).toMatchObject({ valid: true, definition: expect.stringContaining('(expires_at) WHERE (expires_at IS NOT NULL)') });
      } finally {
        await kv.close();
        await drop();
      }
    });

    test('a table that views or foreign keys rest on is refused with E_INVALID_OPTION before anything changes; 2BP01 is a configuration error', async () => {
      const { schema, admin, q, drop } = await legacySchema(`${awaitlyKeyValueDdl()};\n${awaitlySnapshotDdl()};
        CREATE VIEW live_state AS SELECT key, expires_at FROM awaitly_workflow_state;
        CREATE TABLE payments (workflow_id TEXT REFERENCES awaitly_snapshots (id))`);
      await awaitlySet(admin, q('awaitly_workflow_state'), 'workflow:state:wf-1', 'v1', 3600);
      await awaitlySave(admin, q('awaitly_snapshots'), '', 'wf-1', snapshot('running'));
      const before = await Promise.all(['awaitly_workflow_state', 'awaitly_snapshots'].map((table) => layout(admin, q(table))));
      const kv = new PostgresKeyValueStore({ ...processOptions(schema), table: 'awaitly_workflow_state' });
      const snapshots = postgres(processOptions(schema));
      try {
        await expect(kv.get('workflow:state:wf-1')).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringMatching(/view .*live_state.*Nothing was changed/) });
        await expect(snapshots.load('wf-1')).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringMatching(/foreign key .* of .*payments.*Nothing was changed/) });
        expect(await Promise.all(['awaitly_workflow_state', 'awaitly_snapshots'].map((table) => layout(admin, q(table))))).toEqual(before);

        // What PostgreSQL says when such an object is in the way (dependent_objects_still_exist) is a configuration error too.
        const refused = await admin.query(`ALTER TABLE ${q('awaitly_snapshots')} DROP CONSTRAINT awaitly_snapshots_pkey`).catch((error: unknown) => error);
        expect(toStowageError(refused)).toMatchObject({ code: 'E_INVALID_OPTION', cause: { code: '2BP01' } });

        // Without them, the same stores adopt the tables.
        await admin.query(`DROP VIEW ${q('live_state')}; DROP TABLE ${q('payments')}`);
        expect(await kv.get('workflow:state:wf-1')).toBe('v1');
        expect(await snapshots.load('wf-1')).toEqual(snapshot('running'));
      } finally {
        await Promise.all([kv.close(), snapshots.close()]);
        await drop();
      }
    });

    test("go-go-scope's own tables with rows: its idempotency table is adopted (a recorded charge is served, not run again), with the others (see adopt-go-go-scope.test.ts)", async () => {
      const { schema, admin, q, drop } = await legacySchema(goGoScopePostgresDdl());
      await goGoScopePostgresWrites(admin, schema, 'myapp:');
      const persistence = goGoScopePersistence({ ...processOptions(schema) }, { keyPrefix: 'myapp:' });
      try {
        await persistence.connect();
        const { idempotency } = persistence.stores;
        expect(await persistence.lock.acquire('resource:123', 30_000, 'worker-2')).toBeNull(); // go-go-scope's worker-1 holds it

        // go-go-scope looks the task's key up before running it: the recorded result is there,
        // under goGoScopePersistence's key (keyPrefix + the key its PostgresIdempotencyAdapter used).
        await ready(idempotency);
        let charges = 0;
        const charge = async (key: string) => {
          const recorded = await persistence.idempotency.get(key);
          if (recorded) return recorded.value;
          charges++;
          const result = [undefined, { chargeId: `ch_${charges + 1}` }];
          await persistence.idempotency.set(key, result, 3_600_000);
          return result;
        };
        expect(await charge('charge:order-1')).toEqual([null, { chargeId: 'ch_1' }]); // what go-go-scope's own adapter returned
        expect(await charge('charge:order-2')).toEqual([undefined, { chargeId: 'ch_2' }]);
        expect(await charge('charge:order-2')).toEqual([undefined, { chargeId: 'ch_2' }]);
        expect(charges).toBe(1);
        expect((await persistence.idempotency.get('charge:order-1'))!.expiresAt).toBeGreaterThan(Date.now());
        const { rows } = await admin.query(`SELECT key, status FROM ${q('go_goscope_idempotency')} ORDER BY key`);
        expect(rows).toEqual([
          { key: 'myapp:charge:order-1', status: 'completed' },
          { key: 'myapp:charge:order-2', status: 'completed' },
        ]);
        // A second start finds it adopted and changes nothing.
        const again = goGoScopePersistence({ ...processOptions(schema) }, { keyPrefix: 'myapp:' });
        await ready(again.stores.idempotency);
        expect(await again.idempotency.get('charge:order-1')).toMatchObject({ value: [null, { chargeId: 'ch_1' }] });
        await again.close();
      } finally {
        await persistence.close();
        await drop();
      }
    });

    test('layouts stowage does not know are refused with E_INVALID_OPTION naming what it does not recognise', async () => {
      const { schema, drop } = await legacySchema(`
        CREATE TABLE extra_kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at TIMESTAMP, tenant TEXT);
        CREATE TABLE typed_kv (key INTEGER PRIMARY KEY, value TEXT NOT NULL, expires_at TIMESTAMP);
        CREATE TABLE null_kv (key TEXT PRIMARY KEY, value TEXT, expires_at TIMESTAMP);
        INSERT INTO null_kv VALUES ('k', NULL, NULL);
        CREATE TABLE awaitly_workflow_lock (workflow_id TEXT PRIMARY KEY, owner_token TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL);
        CREATE TABLE other_snapshots (id TEXT PRIMARY KEY, data TEXT);
        CREATE TABLE go_goscope_checkpoints (id TEXT PRIMARY KEY, task_id TEXT NOT NULL, sequence INTEGER NOT NULL, timestamp BIGINT NOT NULL,
          progress INTEGER NOT NULL DEFAULT 0, data JSONB NOT NULL, estimated_time_remaining BIGINT, created_at TIMESTAMPTZ DEFAULT NOW());`);
      const open = async (make: () => { ready(): Promise<void>; close(): Promise<void> }) => {
        const store = make();
        try {
          return await store.ready().then(() => 'ready', (error: { code: string; message: string }) => `${error.code}: ${error.message}`);
        } finally {
          await store.close();
        }
      };
      try {
        expect(await open(() => new PostgresKeyValueStore({ ...processOptions(schema), table: 'extra_kv' }))).toMatch(/^E_INVALID_OPTION: .*unrecognised column\(s\) tenant/);
        expect(await open(() => new PostgresKeyValueStore({ ...processOptions(schema), table: 'typed_kv' }))).toMatch(/^E_INVALID_OPTION: .*key is integer \(expected text\)/);
        expect(await open(() => new PostgresKeyValueStore({ ...processOptions(schema), table: 'null_kv' }))).toMatch(/^E_INVALID_OPTION: .*value is NULL/);
        expect(await open(() => postgres({ ...processOptions(schema), table: 'other_snapshots' }))).toMatch(/^E_INVALID_OPTION: .*unrecognised column\(s\) data.*no column\(s\) snapshot, updated_at/);
        // A table of go-go-scope's own PostgreSQL adapter: the same column names, other types.
        expect(await open(() => new PostgresCheckpointStore({ ...processOptions(schema), table: 'go_goscope_checkpoints' }))).toMatch(
          /^E_INVALID_OPTION: .*sequence is integer \(stowage's is bigint\); timestamp is bigint \(stowage's is timestamp with time zone\)/,
        );
        expect(await open(() => postgres({ ...processOptions(schema), lock: { lockTableName: 'awaitly_workflow_lock' } }))).toMatch(
          /^E_INVALID_OPTION: .*awaitly-postgres's lock table/,
        );
      } finally {
        await drop();
      }
    });
  });
}

/** Resolves once `child` printed `line` (rejects if it exits first). */
function printed(child: ChildProcess, line: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.split('\n').includes(line)) resolve();
    });
    child.once('exit', (code, signal) => reject(new Error(`the adoption process exited (${code ?? signal}) before printing ${line}: ${output}`)));
  });
}

/** The exit code of `child` once it has exited (`null` when a signal ended it). */
async function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
  return child.exitCode;
}

/** A store's `ready()` (every Postgres store has one; the contracts do not name it). */
function ready(store: object): Promise<void> {
  return (store as { ready(): Promise<void> }).ready();
}
