/**
 * A crash-test worker process (spawned by the state-machine tests, one OS process each):
 * `node state-machine-worker.ts <name>` with STOWAGE_WORKER_URL, STOWAGE_WORKER_DATABASE and
 * STOWAGE_WORKER_COLLECTIONS set. It runs the adapter's sources directly with Node's type
 * stripping (see @stowage/test-env/source-hooks).
 */
import '@stowage/test-env/source-hooks';

const { MongoKeyValueStore, MongoProcessBackend } = await import('../src/index.js');
const { runCrashTestWorker } = await import('@stowage/core/conformance/crash');

const name = process.argv[2]!;
const url = process.env.STOWAGE_WORKER_URL!;
const database = process.env.STOWAGE_WORKER_DATABASE!;
const collections = JSON.parse(process.env.STOWAGE_WORKER_COLLECTIONS!) as { process: string; cursors: string };
const backend = new MongoProcessBackend({ url, database, collection: collections.process });
await backend.ready();
const cursors = new MongoKeyValueStore({ url, database, collection: collections.cursors });
await cursors.ready();
await runCrashTestWorker({ backend, cursors, name });
await backend.close();
await cursors.close();
