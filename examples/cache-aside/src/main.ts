/**
 * `pnpm start`: cache-aside on @stowage/postgres.
 * Runs on DATABASE_URL when set, otherwise on an embedded PostgreSQL (PGlite).
 */
import { connectExampleDatabase } from '@stowage/test-env';
import { runCacheDemo } from './demo.ts';

console.log('stowage example: cache-aside with getOrSet, TTL and glob patterns (@stowage/postgres)');
const database = await connectExampleDatabase();
console.log(`database: ${database.label}`);
console.log('');

try {
  const { checks } = await runCacheDemo({ url: database.url });
  const failed = checks.filter((check) => !check.ok);
  console.log('');
  if (failed.length > 0) {
    console.log(`${failed.length} of ${checks.length} checks FAILED`);
    process.exitCode = 1;
  } else {
    console.log(`All ${checks.length} checks passed.`);
  }
} finally {
  await database.stop();
}
