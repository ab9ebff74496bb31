/**
 * One OS process for the "awaited calls keep the process alive" test (`node
 * listen-exit-worker.ts` with STOWAGE_WORKER_URL and STOWAGE_WORKER_TABLES set). Its pool lets
 * the process exit whenever it is idle (`allowExitOnIdle`), so while `ready()` probes LISTEN
 * and while `close()` sends UNLISTEN or ends the LISTEN connection, the LISTEN connection's
 * socket is all that keeps the process alive. It prints what it got through as one JSON line
 * (nothing if the process exited in the middle of an awaited call), then exits by itself.
 */
import '@stowage/test-env/source-hooks';

const stowage = await import('../../src/index.js');

const tables = JSON.parse(process.env.STOWAGE_WORKER_TABLES!) as Record<string, string>;
const settings = { url: process.env.STOWAGE_WORKER_URL!, cleanupInterval: false as const, pool: { allowExitOnIdle: true } };
const locks = new stowage.PostgresLockProvider({ ...settings, table: tables.locks! });
const other = new stowage.PostgresLockProvider({ ...settings, table: tables.workflowLocks! });
// The tables exist and the pool's client is idle (unref'd) before the LISTEN connection opens.
await locks.acquire('warm-up', 1000);
await other.acquire('warm-up', 1000);
await locks.ready();
const wakeups = locks.capabilities.wakeups;
await other.ready();
await other.close(); // UNLISTEN of its channel on the shared LISTEN connection
await locks.close(); // the last store: the LISTEN connection ends
process.stdout.write(`${JSON.stringify({ ready: true, wakeups, closed: true })}\n`);
