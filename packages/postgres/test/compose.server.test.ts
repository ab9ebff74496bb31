import pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { PostgresCheckpointStore, PostgresIdempotencyStore, PostgresKeyValueStore, PostgresSnapshotStore } from '../src/index.js';
import { serverTestSetup } from './support/server.js';

/**
 * Promises that hold when the stores are used together, as an application does: one pool per
 * URL shared by every store, the caller's own transactions, long transactions beside a
 * start-up. Checked with the server's own views (pg_locks, pg_stat_activity) and statement
 * outcomes, not with timings.
 */
const { server, url, describeServer, freshTables } = await serverTestSetup();

async function rejection(promise: Promise<unknown>): Promise<{ code?: string }> {
  return promise.then(
    () => ({ code: 'resolved' }),
    (reason: { code?: string }) => reason,
  );
}

describeServer('postgres: stores used together', () => {
  const pool = new pg.Pool({ connectionString: url, max: 4, application_name: 'stowage-test-compose' });
  afterAll(() => pool.end());

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
