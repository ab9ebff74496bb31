/**
 * `pnpm start` with MONGODB_URI set: the checkout workflow of examples/checkout-workflow on
 * awaitly's durable.run with @stowage/mongo as its store: a crash between steps and the
 * resume, then two processes racing for the same workflow id.
 */
import { mongoUrlOrExit, redact } from './connection.ts';
import { runCheckoutDemo } from './demo.ts';

console.log('stowage example: a durable checkout workflow (awaitly durable.run + @stowage/mongo)');
const url = mongoUrlOrExit();
console.log(`database: MongoDB at ${redact(url)}`);

const { checks } = await runCheckoutDemo({ url });
const failed = checks.filter((check) => !check.ok);
console.log('');
if (failed.length === 0) {
  console.log(`All ${checks.length} checks passed: the workflow survived a crash without repeating a step, and the lock let exactly one of two racing processes run it.`);
} else {
  console.log(`${failed.length} of ${checks.length} checks FAILED:`);
  for (const check of failed) console.log(`  ✘ ${check.claim}`);
  process.exitCode = 1;
}
