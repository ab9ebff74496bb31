import { findPostgresServer, startEmbeddedPostgres, type FoundBackend } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { goGoScopePersistence } from '../src/index.js';
import { goGoScopeAcquire, goGoScopeCacheSet, goGoScopePostgresDdl, goGoScopeSaveCheckpoint, goGoScopeSetState, seededSchema } from './support/legacy.js';

/**
 * go-go-scope's own PostgreSQL tables (`PostgresAdapter`'s locks, circuit, cache, and the
 * checkpoints it writes), created with its DDL and filled with its statements, opened in place
 * by goGoScopePersistence through the providers go-go-scope calls: a lock it holds is still
 * held, circuit states, cache entries and checkpoints read back. On embedded PGlite and on the
 * PostgreSQL server.
 */
const backends: { name: string; found: FoundBackend | null; pool: { max: number } }[] = [
  { name: 'PGlite', found: await startEmbeddedPostgres(), pool: { max: 1 } },
  { name: 'PostgreSQL server', found: await findPostgresServer(), pool: { max: 3 } },
];
afterAll(() => Promise.all(backends.map((backend) => backend.found?.stop())));

const TABLES = ['go_goscope_locks', 'go_goscope_circuit', 'go_goscope_cache', 'go_goscope_checkpoints'];

for (const backend of backends) {
  describe.skipIf(backend.found === null)(`adopting go-go-scope's own tables (${backend.name})`, () => {
    const url = () => backend.found!.url;
    /** A schema of its own per test with go-go-scope's tables (and `extra` SQL), and an admin pool. */
    const goGoScopeSchema = (extra = '') => seededSchema(url(), 'ggs', `${goGoScopePostgresDdl()}; ${extra}`);
    let processes = 0;
    /** Another process: a pool of its own (an application name of its own keeps stowage from sharing one). */
    const processOptions = (schema: string) => ({ url: url(), pool: backend.pool, schema, applicationName: `ggs-${++processes}` });

    /** Every table's columns, constraints and indexes, and its rows as text: what "nothing changed" compares. */
    async function snapshot(admin: pg.Pool, q: (table: string) => string) {
      const tables = [];
      for (const table of TABLES) {
        const { rows: layout } = await admin.query(
          `SELECT string_agg(what, ', ' ORDER BY what) AS layout FROM (
             SELECT attname || ' ' || format_type(atttypid, atttypmod) AS what FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped
             UNION ALL SELECT conname::text FROM pg_constraint WHERE conrelid = $1::regclass
             UNION ALL SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::regclass) AS c`,
          [q(table)],
        );
        const { rows } = await admin.query(`SELECT t::text AS row FROM ${q(table)} AS t ORDER BY 1`);
        tables.push({ table, layout: layout[0].layout, rows: rows.map((row) => row.row) });
      }
      return tables;
    }

    test("go-go-scope's rows are served: a held lock stays held, circuit states, cache entries and checkpoints read back", async () => {
      const { schema, admin, q, drop } = await goGoScopeSchema();
      const failedAt = Date.now() - 5_000;
      const succeededAt = Date.now() - 60_000;
      // What go-go-scope's PostgresAdapter({ keyPrefix: 'myapp:' }) left, and another application's ('other:') rows beside.
      await goGoScopeAcquire(admin, q('go_goscope_locks'), 'myapp:', 'resource:123', 60_000, 'worker-1');
      await goGoScopeAcquire(admin, q('go_goscope_locks'), 'myapp:', 'report:nightly', -60_000, 'worker-9'); // expired, never released
      await goGoScopeAcquire(admin, q('go_goscope_locks'), 'other:', 'resource:123', 60_000, 'other-worker');
      await goGoScopeSetState(admin, q('go_goscope_circuit'), 'myapp:', 'payments-api', { state: 'open', failureCount: 5, lastFailureTime: failedAt });
      await goGoScopeSetState(admin, q('go_goscope_circuit'), 'myapp:', 'search', { state: 'closed', failureCount: 0, lastSuccessTime: succeededAt });
      await goGoScopeCacheSet(admin, q('go_goscope_cache'), 'myapp:', 'user:1', { name: 'Ada', roles: ['admin'] });
      await goGoScopeCacheSet(admin, q('go_goscope_cache'), 'myapp:', 'session:9', 'token-9', 60_000);
      await goGoScopeCacheSet(admin, q('go_goscope_cache'), 'myapp:', 'stale', 'old', -60_000);
      await goGoScopeCacheSet(admin, q('go_goscope_cache'), 'other:', 'user:1', { name: 'Grace' });
      const timestamp = Date.now() - 1_000;
      await goGoScopeSaveCheckpoint(admin, q('go_goscope_checkpoints'), { id: 'cp-1', taskId: 'import-42', sequence: 1, timestamp, progress: 10, data: { offset: 1000 } });
      const latest = { id: 'cp-2', taskId: 'import-42', sequence: 2, timestamp: timestamp + 1, progress: 20, data: { offset: 2000, files: ['a.csv'] }, estimatedTimeRemaining: 30_000 };
      await goGoScopeSaveCheckpoint(admin, q('go_goscope_checkpoints'), latest);

      const persistence = goGoScopePersistence(processOptions(schema), { keyPrefix: 'myapp:' });
      const other = goGoScopePersistence(processOptions(schema), { keyPrefix: 'other:' });
      try {
        await persistence.connect();

        // Locks: worker-1's lock excludes everyone else and is renewed by worker-1 (go-go-scope's grant is fence 1).
        expect(await persistence.lock.acquire('resource:123', 30_000, 'worker-2')).toBeNull();
        const renewed = await persistence.lock.acquire('resource:123', 30_000, 'worker-1');
        expect(renewed).toMatchObject({ owner: 'worker-1', fence: 1 });
        await renewed!.release();
        const next = await persistence.lock.acquire('resource:123', 30_000, 'worker-2');
        expect(next!.fence).toBeGreaterThan(1);
        await next!.release();
        expect(await persistence.lock.acquire('report:nightly', 30_000, 'worker-3')).not.toBeNull(); // its go-go-scope lease had ended
        // The other application's lock is where its stores look, still held.
        await other.connect();
        expect(await other.lock.acquire('resource:123', 30_000, 'someone')).toBeNull();
        expect(await other.lock.acquire('resource:123', 30_000, 'other-worker')).toMatchObject({ fence: 1 });

        // Circuit breakers: as go-go-scope's getState returned them (times at its millisecond precision).
        expect(await persistence.circuitBreaker.getState('payments-api')).toEqual({ state: 'open', failureCount: 5, lastFailureTime: failedAt });
        expect(await persistence.circuitBreaker.getState('search')).toEqual({ state: 'closed', failureCount: 0, lastSuccessTime: succeededAt });
        expect(await persistence.circuitBreaker.recordFailure('payments-api', 3)).toBe(6);
        await persistence.circuitBreaker.recordSuccess('payments-api');
        expect(await persistence.circuitBreaker.getState('payments-api')).toMatchObject({ state: 'closed', failureCount: 0 });

        // Cache: live entries read back, the expired one is a miss; each application sees its own.
        expect(await persistence.cache.get('user:1')).toEqual({ name: 'Ada', roles: ['admin'] });
        expect(await persistence.cache.get('session:9')).toBe('token-9');
        expect(await persistence.cache.get('stale')).toBeNull();
        expect(await persistence.cache.keys()).toEqual(['session:9', 'user:1']);
        expect(await other.cache.get('user:1')).toEqual({ name: 'Grace' });
        await persistence.cache.set('user:2', { name: 'Linus' }, 60_000);
        expect(await persistence.cache.get('user:2')).toEqual({ name: 'Linus' });

        // Checkpoints: the task resumes from go-go-scope's latest.
        expect(await persistence.checkpoint.loadLatest('import-42')).toEqual(latest);
        expect(await persistence.checkpoint.load('cp-1')).toEqual({ id: 'cp-1', taskId: 'import-42', sequence: 1, timestamp, progress: 10, data: { offset: 1000 } });
        await persistence.checkpoint.save({ id: 'cp-3', taskId: 'import-42', sequence: 3, timestamp: timestamp + 2, progress: 30, data: { offset: 3000 } });
        expect((await persistence.checkpoint.list('import-42')).map((checkpoint) => checkpoint.id)).toEqual(['cp-1', 'cp-2', 'cp-3']);

        // go-go-scope's own processes, still running after the switch, fail loudly: no lock granted that stowage cannot see, no entry beside stowage's.
        await expect(goGoScopeAcquire(admin, q('go_goscope_locks'), 'myapp:', 'fresh', 60_000, 'worker-7')).rejects.toMatchObject({ code: '23502' });
        await expect(goGoScopeCacheSet(admin, q('go_goscope_cache'), 'myapp:', 'user:1', { name: 'Eve' })).rejects.toMatchObject({ code: '42P10' });

        // Converted once: a later start changes nothing.
        const before = await snapshot(admin, q);
        const again = goGoScopePersistence(processOptions(schema), { keyPrefix: 'myapp:' });
        await again.connect();
        expect(await again.cache.get('user:1')).toEqual({ name: 'Ada', roles: ['admin'] });
        await again.close();
        expect(await snapshot(admin, q)).toEqual(before);
      } finally {
        await Promise.all([persistence.close(), other.close()]);
        await drop();
      }
    });

    test('refused before anything changes: a view on a table, a circuit state stowage does not know, two checkpoints of one sequence', async () => {
      const { schema, admin, q, drop } = await goGoScopeSchema(`CREATE VIEW held_locks AS SELECT key, owner FROM go_goscope_locks`);
      await goGoScopeAcquire(admin, q('go_goscope_locks'), '', 'resource:123', 60_000, 'worker-1');
      await goGoScopeSetState(admin, q('go_goscope_circuit'), '', 'payments-api', { state: 'tripped', failureCount: 5 });
      await goGoScopeCacheSet(admin, q('go_goscope_cache'), '', 'user:1', { name: 'Ada' });
      await goGoScopeSaveCheckpoint(admin, q('go_goscope_checkpoints'), { id: 'cp-1', taskId: 'import-42', sequence: 1, timestamp: Date.now(), progress: 10, data: {} });
      await goGoScopeSaveCheckpoint(admin, q('go_goscope_checkpoints'), { id: 'cp-1b', taskId: 'import-42', sequence: 1, timestamp: Date.now(), progress: 11, data: {} });
      const before = await snapshot(admin, q);
      const persistence = goGoScopePersistence(processOptions(schema));
      const ready = (store: object) => (store as { ready(): Promise<void> }).ready();
      try {
        await expect(persistence.connect()).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
        await expect(ready(persistence.stores.lock)).rejects.toMatchObject({ code: 'E_INVALID_OPTION', message: expect.stringMatching(/view .*held_locks.* rest on it.*Nothing was changed/) });
        await expect(ready(persistence.stores.circuitBreaker)).rejects.toMatchObject({
          code: 'E_INVALID_OPTION',
          message: expect.stringMatching(/circuit states stowage does not know .*: circuit:payments-api has the state tripped\. Nothing was changed/),
        });
        await expect(ready(persistence.stores.checkpoint)).rejects.toMatchObject({
          code: 'E_INVALID_OPTION',
          message: expect.stringMatching(/several checkpoints of one task and sequence.*task import-42 sequence 1 \(cp-1\).*Nothing was changed/),
        });
        // The cache table had nothing wrong with it: it alone is converted.
        expect(await persistence.cache.get('user:1')).toEqual({ name: 'Ada' });
        const after = await snapshot(admin, q);
        expect(after.filter(({ table }) => table !== 'go_goscope_cache')).toEqual(before.filter(({ table }) => table !== 'go_goscope_cache'));

        // Put right, the same persistence adopts them.
        await admin.query(
          `DROP VIEW ${q('held_locks')}; UPDATE ${q('go_goscope_circuit')} SET state = 'open'; DELETE FROM ${q('go_goscope_checkpoints')} WHERE id = 'cp-1b'`,
        );
        await persistence.connect();
        expect(await persistence.lock.acquire('resource:123', 30_000, 'worker-2')).toBeNull();
        expect(await persistence.circuitBreaker.getState('payments-api')).toMatchObject({ state: 'open', failureCount: 5 });
        expect(await persistence.checkpoint.loadLatest('import-42')).toMatchObject({ id: 'cp-1', progress: 10 });
      } finally {
        await persistence.close();
        await drop();
      }
    });

    test("go-go-scope's column names with other types are refused, naming them", async () => {
      const { schema, drop } = await seededSchema(url(), 'ggs', `CREATE TABLE go_goscope_locks (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)`);
      const persistence = goGoScopePersistence(processOptions(schema));
      try {
        await expect((persistence.stores.lock as unknown as { ready(): Promise<void> }).ready()).rejects.toMatchObject({
          code: 'E_INVALID_OPTION',
          message: expect.stringMatching(/has the columns of go-go-scope's lock table .*expires_at is timestamp with time zone \(go-go-scope's is timestamp without time zone\).*Nothing was changed/),
        });
      } finally {
        await persistence.close();
        await drop();
      }
    });

    test('four processes adopting at once: each table converted once, every row served to each', async () => {
      const { schema, admin, q, drop } = await goGoScopeSchema();
      for (let n = 1; n <= 50; n++) {
        await goGoScopeAcquire(admin, q('go_goscope_locks'), 'myapp:', `job:${n}`, 60_000, `worker-${n}`);
        await goGoScopeCacheSet(admin, q('go_goscope_cache'), 'myapp:', `user:${n}`, { n });
        await goGoScopeSetState(admin, q('go_goscope_circuit'), 'myapp:', `api-${n}`, { state: 'open', failureCount: n });
        await goGoScopeSaveCheckpoint(admin, q('go_goscope_checkpoints'), { id: `cp-${n}`, taskId: 'import', sequence: n, timestamp: n, progress: n, data: { n } });
      }
      const persistences = Array.from({ length: 4 }, () => goGoScopePersistence(processOptions(schema), { keyPrefix: 'myapp:' }));
      try {
        await Promise.all(persistences.map((persistence) => persistence.connect()));
        for (const [index, persistence] of persistences.entries()) {
          const n = index + 1;
          expect(await persistence.lock.acquire(`job:${n}`, 30_000, 'intruder')).toBeNull();
          expect(await persistence.cache.get(`user:${n}`)).toEqual({ n });
          expect(await persistence.circuitBreaker.getState(`api-${n}`)).toMatchObject({ state: 'open', failureCount: n });
          expect(await persistence.checkpoint.load(`cp-${n}`)).toMatchObject({ sequence: n, data: { n } });
        }
        const { rows } = await admin.query(
          `SELECT (SELECT count(*)::int FROM ${q('go_goscope_locks')}) AS locks, (SELECT count(*)::int FROM ${q('go_goscope_cache')}) AS cache,
                  (SELECT count(*)::int FROM ${q('go_goscope_circuit')}) AS circuits, (SELECT count(*)::int FROM ${q('go_goscope_checkpoints')}) AS checkpoints`,
        );
        expect(rows).toEqual([{ locks: 50, cache: 50, circuits: 50, checkpoints: 50 }]);
      } finally {
        await Promise.all(persistences.map((persistence) => persistence.close()));
        await drop();
      }
    });

    // A second connection holds the adoption up half-way; PGlite is one session.
    test.skipIf(backend.name === 'PGlite')('an adoption whose connection dies half-way leaves the table as it was; the next start adopts it', async () => {
      const { schema, admin, q, drop } = await goGoScopeSchema();
      await goGoScopeAcquire(admin, q('go_goscope_locks'), '', 'resource:123', 60_000, 'worker-1');
      const before = await snapshot(admin, q);
      // An open transaction that creates the fence sequence's name: the adoption, after it
      // rekeyed the rows and dropped the primary key, waits for it there.
      const blocker = new pg.Client({ connectionString: url() });
      await blocker.connect();
      await blocker.query(`BEGIN; CREATE SEQUENCE ${q('go_goscope_locks_fence_seq')}`);
      const persistence = goGoScopePersistence(processOptions(schema));
      const watcher = new pg.Client({ connectionString: url() });
      await watcher.connect();
      try {
        const adoption = (persistence.stores.lock as unknown as { ready(): Promise<void> }).ready();
        // The adopting backend, waiting half-way through its transaction, is terminated: what a crash of the process does to it.
        let terminated = false;
        while (!terminated) {
          const { rows } = await watcher.query(
            `SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%stowage adopt%' AND query LIKE '%go_goscope_locks%'`,
          );
          terminated = rows.some((row) => row.done === true);
        }
        await expect(adoption).rejects.toBeDefined();
        await blocker.query('ROLLBACK');
        expect(await snapshot(admin, q)).toEqual(before);

        const next = goGoScopePersistence(processOptions(schema));
        try {
          expect(await next.lock.acquire('resource:123', 30_000, 'worker-2')).toBeNull();
          expect(await next.lock.acquire('resource:123', 30_000, 'worker-1')).toMatchObject({ fence: 1 });
        } finally {
          await next.close();
        }
      } finally {
        await Promise.all([blocker.end(), watcher.end()]);
        await persistence.close();
        await drop();
      }
    });
  });
}
