/**
 * `pnpm start`: several processes increment one record under a stowage lock, writing with the
 * fencing token; one is frozen past its lease and its stale write is rejected.
 * Runs on DATABASE_URL when set, otherwise on an embedded PostgreSQL (PGlite).
 */
import { connectExampleDatabase } from '@stowage/test-env';
import { runLockDemo } from './demo.ts';

console.log('stowage example: a distributed lock with fencing tokens (@stowage/postgres)');
const database = await connectExampleDatabase();
console.log(`database: ${database.label}`);

try {
  const { checks } = await runLockDemo({ url: database.url });
  const failed = checks.filter((check) => !check.ok);
  if (failed.length > 0) {
    console.log(`${failed.length} of ${checks.length} checks FAILED`);
    process.exitCode = 1;
  } else {
    console.log(`All ${checks.length} checks passed.`);
  }
} finally {
  await database.stop();
}
