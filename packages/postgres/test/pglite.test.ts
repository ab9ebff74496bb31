import { startEmbeddedPostgres } from '@stowage/test-env';
import { afterAll, expect, test } from 'vitest';
import pg from 'pg';
import { PostgresKeyValueStore, PostgresLockProvider, createPostgresPersistence } from '../src/index.js';
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

test('statements stay prepared on the shared session: each pg client gets names of its own', async () => {
  const table = `kv_${uniqueSuffix()}`;
  const first = new PostgresKeyValueStore({ ...options(), table });
  // Other settings (an application name of its own), so another pool: stores on the same
  // settings would share the first one's.
  const second = new PostgresKeyValueStore({ ...options(), applicationName: 'stowage-second', table });
  await first.set('a', '1');
  // The second pool's client meets the name the first one prepared (42P05) and names its own.
  expect(await second.get('a')).toBe('1');
  await second.set('a', '2');
  expect(await first.get('a')).toBe('2');
  const inspector = new pg.Client({ connectionString: embedded.url });
  await inspector.connect();
  const { rows } = await inspector.query(`SELECT name FROM pg_prepared_statements WHERE name LIKE 'stowage\\_%'`);
  await inspector.end();
  const names = rows.map((row: { name: string }) => row.name);
  expect(names.filter((name) => /^stowage_[0-9a-f]{24}$/.test(name)).length, names.join(' ')).toBeGreaterThan(0);
  expect(names.filter((name) => /^stowage_[0-9a-f]{24}_[0-9a-f]{8}\d+$/.test(name)).length, names.join(' ')).toBeGreaterThan(0);
  await Promise.all([first.close(), second.close()]);
});
