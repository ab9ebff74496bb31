/**
 * One OS process for the "pool ended by its owner" test (`node pool-ended-worker.ts` with
 * STOWAGE_WORKER_URL and STOWAGE_WORKER_TABLES set). Stores run on a pool the process owns;
 * with writes queued for a connection and an acquisition waiting, the process ends the pool
 * and never closes the stores. It prints how each call settled as one JSON line, then must
 * exit by itself: nothing stowage opened may keep it alive. Runs the sources with Node's type
 * stripping (see @stowage/test-env/source-hooks).
 */
import '@stowage/test-env/source-hooks';

const stowage = await import('../../src/index.js');
const pg = (await import('pg')).default;

const tables = JSON.parse(process.env.STOWAGE_WORKER_TABLES!) as Record<string, string>;
const pool = new pg.Pool({ connectionString: process.env.STOWAGE_WORKER_URL!, max: 2 });
const kv = new stowage.PostgresKeyValueStore({ pool, table: tables.kv! });
const locks = new stowage.PostgresLockProvider({ pool, table: tables.locks! });
await Promise.all([kv.ready(), locks.ready()]);
const wakeups = locks.capabilities.wakeups; // the LISTEN connection is open

const outcome = (promise: Promise<unknown>) =>
  promise.then(
    () => 'ok',
    (error: { code?: string; message?: string }) => error.code ?? `not a StowageError: ${error.message}`,
  );
await locks.acquire('job', 60_000, 'holder');
// Batches are never merged with each other: two run, the rest wait for a connection.
const writes = Array.from({ length: 20 }, (_, i) => outcome(kv.setMany([{ key: `k${i}`, value: 'v' }])));
const acquire = outcome(locks.acquire('job', 60_000, { owner: 'waiter', wait: 3000 }));
await pool.end();
process.stdout.write(`${JSON.stringify({ writes: await Promise.all(writes), acquire: await acquire, wakeups })}\n`);
