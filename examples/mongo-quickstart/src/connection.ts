/**
 * Where the MongoDB server is: `MONGODB_URI` (or `STOWAGE_MONGO_URL`, the variable this
 * repository's tests use). There is no embedded MongoDB, so without one the example says so
 * and stops: successfully on a laptop, as a failure under CI (CI=true), where a missing
 * server must never pass as a silent skip.
 */
export function mongoUrlOrExit(): string {
  const url = process.env.MONGODB_URI || process.env.STOWAGE_MONGO_URL;
  if (url) return url;
  const ci = /^(1|true)$/i.test(process.env.CI ?? '');
  console.log('This example needs a MongoDB server, and none is configured.');
  console.log('Set MONGODB_URI, for example:');
  console.log('  MONGODB_URI=mongodb://127.0.0.1:27017 pnpm --filter @stowage/example-mongo-quickstart start');
  console.log('(MongoDB 6 or later; the Postgres examples need no server at all: try `pnpm demo`.)');
  if (ci) {
    console.log('CI=true: a missing MongoDB server is a failure here, not a skip.');
    process.exit(1);
  }
  process.exit(0);
}

export function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}

/** The database the example writes to. */
export const DATABASE = 'stowage_examples';
