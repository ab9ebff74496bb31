import { startEmbeddedPostgres } from '@stowage/test-env';
import { afterAll, expect, test } from 'vitest';
import { PostgresLockProvider, createPostgresPersistence } from '../src/index.js';
import { uniqueSuffix } from './support/context.js';

/**
 * PGlite specifics. Its socket server multiplexes every connection onto one session, so a
 * NOTIFY is delivered to the connection that sent it, never to a listener: the lock provider
 * must notice (its probe comes back to the sender) and fall back to polling.
 */
const embedded = await startEmbeddedPostgres({ separateProcess: true });
console.log(`[stowage postgres] PGlite specifics backend: ${embedded.label}`);
afterAll(() => embedded.stop());

// One connection per pool: see conformance.pglite.test.ts for why.
const options = () => ({ url: embedded.url, pool: { max: 1 } });

test('LISTEN does not reach a listener through the PGlite socket: wakeups false, waiting falls back to polling', async () => {
  const table = `lock_${uniqueSuffix()}`;
  const holder = new PostgresLockProvider({ ...options(), table });
  const waiter = new PostgresLockProvider({ ...options(), table });
  await Promise.all([holder.ready(), waiter.ready()]);
  expect(waiter.capabilities.wakeups).toBe(false);
  expect(waiter.capabilities.changeFeed).toBe(false);
  const held = await holder.acquire('job', 60_000, 'holder');
  const waiting = waiter.acquire('job', 60_000, { owner: 'waiter', wait: 5_000, pollInterval: 50 });
  await new Promise((resolve) => setTimeout(resolve, 200));
  await held!.release();
  expect((await waiting)?.owner).toBe('waiter');
  await Promise.all([holder.close(), waiter.close()]);
});

test('createPostgresPersistence works on PGlite', async () => {
  const store = await createPostgresPersistence({ ...options(), tableName: `state_${uniqueSuffix()}` });
  const snapshot = { formatVersion: 1 as const, steps: {}, execution: { status: 'running' as const, lastUpdated: '2024-01-01T00:00:00.000Z' } };
  await store.save('wf', snapshot);
  expect(await store.load('wf')).toEqual(snapshot);
  await store.close();
});
