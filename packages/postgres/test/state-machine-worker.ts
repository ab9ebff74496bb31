/**
 * A crash-test worker process (spawned by the state-machine tests, one OS process each):
 * `node state-machine-worker.ts <name>` with STOWAGE_WORKER_URL and STOWAGE_WORKER_TABLES set.
 * It runs the adapter's sources directly with Node's type stripping (see
 * @stowage/test-env/source-hooks).
 */
import '@stowage/test-env/source-hooks';

const { PostgresKeyValueStore, PostgresProcessBackend } = await import('../src/index.js');
const { runCrashTestWorker } = await import('@stowage/core/conformance');

const name = process.argv[2]!;
const url = process.env.STOWAGE_WORKER_URL!;
const tables = JSON.parse(process.env.STOWAGE_WORKER_TABLES!) as { itemsTable: string; transitionsTable: string; cursorTable: string };
const backend = new PostgresProcessBackend({ url, pool: { max: 4 }, itemsTable: tables.itemsTable, transitionsTable: tables.transitionsTable });
const cursors = new PostgresKeyValueStore({ url, pool: { max: 1 }, table: tables.cursorTable });
await backend.ready();
await runCrashTestWorker({ backend, cursors, name });
await backend.close();
await cursors.close();
