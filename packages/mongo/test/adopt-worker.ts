/**
 * An adoption in an OS process of its own, for the kill-at-random test (adopt.test.ts):
 * `node adopt-worker.ts` with STOWAGE_WORKER_URL, STOWAGE_WORKER_DATABASE and
 * STOWAGE_WORKER_OPTIONS (goGoScopePersistence's collections and adoptFrom, as JSON) set. It
 * prints `adopting` before the adoption starts and `adopted` once it is done. It runs the
 * adapter's sources directly with Node's type stripping (see @stowage/test-env/source-hooks).
 */
import '@stowage/test-env/source-hooks';

const { goGoScopePersistence } = await import('../src/index.js');

const options = JSON.parse(process.env.STOWAGE_WORKER_OPTIONS!) as object;
const persistence = goGoScopePersistence(
  { url: process.env.STOWAGE_WORKER_URL!, database: process.env.STOWAGE_WORKER_DATABASE!, ...options },
  { keyPrefix: 'myapp:' },
);
process.stdout.write('adopting\n');
await persistence.connect();
process.stdout.write('adopted\n');
await persistence.close();
