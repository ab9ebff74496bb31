/**
 * One OS process of the "concurrent first use" test (`node first-use-worker.ts <index>` with
 * STOWAGE_WORKER_URL, STOWAGE_WORKER_SCHEMA and STOWAGE_WORKER_TABLES set). It opens every
 * store on tables nobody has created yet, at the same moment as its siblings, then contends
 * with them, and prints what it saw as one JSON line. Runs the sources with Node's type
 * stripping (see @stowage/test-env/source-hooks).
 */
import '@stowage/test-env/source-hooks';

const stowage = await import('../../src/index.js');
const pg = (await import('pg')).default;

const index = Number(process.argv[2]);
const url = process.env.STOWAGE_WORKER_URL!;
const schema = process.env.STOWAGE_WORKER_SCHEMA!;
const tables = JSON.parse(process.env.STOWAGE_WORKER_TABLES!) as Record<string, string>;
const failuresEach = Number(process.env.STOWAGE_WORKER_FAILURES ?? 10);
const maxFailures = Number(process.env.STOWAGE_WORKER_MAX_FAILURES ?? 100);

const pool = new pg.Pool({ connectionString: url, max: 2, application_name: 'stowage-first-use' });
const common = { pool, schema };
const kv = new stowage.PostgresKeyValueStore({ ...common, table: tables.kv });
const snapshots = stowage.postgres({ ...common, table: tables.snapshots, lock: { lockTableName: tables.workflowLocks } });
const locks = new stowage.PostgresLockProvider({ ...common, table: tables.locks, wakeups: false });
const cache = new stowage.PostgresCacheProvider({ ...common, table: tables.cache });
const breaker = new stowage.PostgresCircuitBreakerStore({ ...common, table: tables.circuitBreaker });
const checkpoints = new stowage.PostgresCheckpointStore({ ...common, table: tables.checkpoints });
const idempotency = new stowage.PostgresIdempotencyStore({ ...common, table: tables.idempotency });

// Say so once loaded, then wait for the parent's go: every process makes its first call at the same moment.
process.stdout.write('ready\n');
await new Promise((resolve) => process.stdin.once('data', resolve));

const [, , lock, workflowLock, reservation] = await Promise.all([
  kv.set(`worker-${index}`, String(index)),
  snapshots.save(`wf-${index}`, { formatVersion: 1, steps: {}, execution: { status: 'running', lastUpdated: new Date(0).toISOString() } }),
  locks.acquire('job', 60_000, `worker-${index}`),
  snapshots.tryAcquire('workflow', { ttlMs: 60_000 }),
  idempotency.reserve('operation', 60_000),
  cache.set(`worker-${index}`, { index }),
  checkpoints.save({ id: `cp-${index}`, taskId: 'task', sequence: index, timestamp: 0, progress: index, data: { index } }),
]);
const failureCounts: number[] = [];
for (let i = 0; i < failuresEach; i++) failureCounts.push(await breaker.recordFailure('service', maxFailures));

process.stdout.write(
  `${JSON.stringify({
    index,
    lockWon: lock !== null,
    fence: lock?.fence ?? null,
    workflowLockWon: workflowLock !== null,
    reservation: reservation.status,
    failureCounts,
  })}\n`,
);
await Promise.all([kv, snapshots, locks, cache, breaker, checkpoints, idempotency].map((store) => store.close()));
await pool.end();
