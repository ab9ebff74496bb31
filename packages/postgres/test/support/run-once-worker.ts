/**
 * One OS process of the exactly-once test (`node run-once-worker.ts` with STOWAGE_WORKER_URL,
 * STOWAGE_WORKER_TABLES and STOWAGE_WORKER_KEYS set). For each key in turn it charges once with
 * `runOnce`: the effect (a key-value entry named after a fresh id, so a second application would
 * show as a second entry) and the idempotency record commit in one transaction. It pauses between
 * the effect and the commit, where the parent's SIGKILL is meant to land, prints "progress" after
 * every key and exits 0 when all are done.
 */
import { randomUUID } from 'node:crypto';
import '@stowage/test-env/source-hooks';

const { PostgresIdempotencyStore, PostgresKeyValueStore } = await import('../../src/index.js');

const url = process.env.STOWAGE_WORKER_URL!;
const tables = JSON.parse(process.env.STOWAGE_WORKER_TABLES!) as { kv: string; idempotency: string };
const keys = Number(process.env.STOWAGE_WORKER_KEYS);
const idempotency = new PostgresIdempotencyStore({ url, table: tables.idempotency });
const kv = new PostgresKeyValueStore({ url, table: tables.kv });
await Promise.all([idempotency.ready(), kv.ready()]);
process.stdout.write('ready\n');

for (let key = 0; key < keys; key++) {
  await idempotency.runOnce(`charge/${key}`, async (transaction) => {
    await kv.withTransaction(transaction).set(`effect/${key}/${randomUUID()}`, 'charged');
    await new Promise((resolve) => setTimeout(resolve, 5)); // between the effect and the completion
    return { key };
  });
  process.stdout.write('progress\n');
}
await Promise.all([idempotency.close(), kv.close()]);
