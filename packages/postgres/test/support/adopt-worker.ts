/**
 * An adoption in an OS process of its own, for the kill-at-random test (adopt.test.ts):
 * `node adopt-worker.ts` with STOWAGE_WORKER_URL and STOWAGE_WORKER_SCHEMA set. It opens a
 * key-value store on `awaitly_workflow_state` and a snapshot store with prefix `orders:` on
 * `awaitly_snapshots` in that schema, prints `adopting`, waits until both are ready (the
 * upgrade of awaitly-postgres's tables, and the claim of the prefix's rows), prints `adopted`.
 */
import '@stowage/test-env/source-hooks';

const { PostgresKeyValueStore, postgres } = await import('../../src/index.js');

const url = process.env.STOWAGE_WORKER_URL!;
const schema = process.env.STOWAGE_WORKER_SCHEMA!;
const kv = new PostgresKeyValueStore({ url, schema, table: 'awaitly_workflow_state' });
const orders = postgres({ url, schema, prefix: 'orders:' });
process.stdout.write('adopting\n');
await Promise.all([kv.ready(), orders.ready()]);
process.stdout.write('adopted\n');
await Promise.all([kv.close(), orders.close()]);
