/**
 * `pnpm demo` (from the repository root) or `pnpm start` (here).
 *
 * The checkout workflow on awaitly's durable.run with @stowage/postgres as its store: a crash
 * between steps and the resume, then two processes racing for the same workflow id.
 * Runs on DATABASE_URL when set, otherwise on an embedded PostgreSQL (PGlite).
 */
import { connectExampleDatabase } from '@stowage/test-env';
import { runCheckoutDemo } from './demo.ts';

console.log('stowage demo: a durable checkout workflow (awaitly durable.run + @stowage/postgres)');
const database = await connectExampleDatabase();
console.log(`database: ${database.label}`);

try {
  const { checks } = await runCheckoutDemo({ url: database.url });
  const failed = checks.filter((check) => !check.ok);
  console.log('');
  if (failed.length === 0) {
    console.log(`All ${checks.length} checks passed: the workflow survived a crash without repeating a step, and the lock let exactly one of two racing processes run it.`);
  } else {
    console.log(`${failed.length} of ${checks.length} checks FAILED:`);
    for (const check of failed) console.log(`  ✘ ${check.claim}`);
    process.exitCode = 1;
  }
} finally {
  await database.stop();
}
