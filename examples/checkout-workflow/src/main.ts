/**
 * `pnpm demo` (from the repository root) or `pnpm start` (here).
 *
 * The checkout workflow on awaitly's durable.run with @stowage/postgres as its store: a crash
 * between steps and the resume, then two processes racing for the same workflow id.
 * Runs on DATABASE_URL when set, otherwise on an embedded PostgreSQL (PGlite).
 */
import { connectExampleDatabase } from '@stowage/test-env';
import { runCheckoutDemo } from './demo.ts';
import { DEMO_SCHEMA, SideEffects } from './side-effects.ts';

console.log('stowage demo: a durable checkout workflow (awaitly durable.run + @stowage/postgres)');
const database = await connectExampleDatabase();
console.log(`database: ${database.label}`);

// On a database of yours, everything goes into a schema of the demo's own, dropped at the end
// unless it was there before.
const schemaOwner = new SideEffects(database.url);
const dropSchemaAtEnd = database.source === 'env' && !(await schemaOwner.schemaExists());
if (database.source === 'env') {
  console.log(`tables: in schema "${DEMO_SCHEMA}"${dropSchemaAtEnd ? ', dropped at the end' : ' (it existed before: kept)'}`);
}

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
  if (dropSchemaAtEnd) await schemaOwner.dropSchema();
  await schemaOwner.close();
  await database.stop();
}
