import { StowageError } from '@stowage/core';
import { findPostgresServer } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresProcessBackend,
  grantsSql,
  schemaSql,
} from '../src/index.js';
import { activeSweepers } from '@stowage/core/adapter';
import { everyStore, tableSet, uniqueSuffix, type TableSet } from './support/context.js';

/**
 * Least privilege: a role given exactly what `grantsSql()` grants runs every store on tables
 * another role created from `schemaSql()`, with `autoCreate` off or on (a role that may not
 * create objects finds them there), and a missing privilege is a configuration error that
 * names the fix. Roles are cluster-wide: each test makes its own and drops it.
 */
const server = await findPostgresServer();
const describeServer = server ? describe : describe.skip;

const url = server?.url ?? '';
let admin: pg.Pool;
const cleanups: (() => Promise<unknown>)[] = [];

/** A role (LOGIN, nothing granted) and a schema of its own test, both dropped after the file. */
async function roleAndSchema(): Promise<{ role: string; schema: string; tables: TableSet; roleUrl: string }> {
  const suffix = uniqueSuffix();
  const role = `stowage_app_${suffix}`;
  const schema = `stowage_priv_${suffix}`;
  await admin.query(`CREATE ROLE ${role} LOGIN`);
  await admin.query(`CREATE SCHEMA ${schema}`);
  cleanups.push(() => admin.query(`DROP SCHEMA ${schema} CASCADE; DROP OWNED BY ${role}; DROP ROLE ${role}`));
  const roleUrl = new URL(url);
  roleUrl.username = role;
  return { role, schema, tables: tableSet(suffix), roleUrl: roleUrl.toString() };
}

function tableNames(tables: TableSet) {
  return { ...tables };
}

async function failure(promise: Promise<unknown>, code: string): Promise<StowageError & { cause: { code?: string } }> {
  const error = await promise.then(
    () => null,
    (reason: unknown) => reason,
  );
  expect(error, `expected a rejection with ${code}`).toBeInstanceOf(StowageError);
  expect((error as StowageError).code, (error as Error).message).toBe(code);
  return error as StowageError & { cause: { code?: string } };
}

describeServer('least privilege', () => {
  beforeAll(() => {
    admin = new pg.Pool({ connectionString: url, max: 2, application_name: 'stowage-test-admin' });
  });
  afterAll(async () => {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
    await admin.end();
    await server?.stop();
  });

  test('a role with only the grants of grantsSql() runs every store, with autoCreate off and on', { timeout: 120_000 }, async () => {
    const { role, schema, tables, roleUrl } = await roleAndSchema();
    const options = { schema, tables: tableNames(tables) };
    await admin.query(schemaSql(options));
    await admin.query(grantsSql(role, options));
    for (const autoCreate of [false, true]) {
      const common = { url: roleUrl, schema, autoCreate, pool: { max: 2 } };
      const every = everyStore(common, tables);
      const { kv, snapshots, locks, cache, circuitBreaker: breaker, checkpoints, idempotency, process: backend } = every;
      const stores = Object.values(every);
      for (const store of stores) await store.ready();

      const key = `k-${autoCreate}`;
      await kv.set(key, 'v', { ttl: 60_000 });
      expect(await kv.compareAndSet(key, 'w', (await kv.getEntry(key))!.version)).toBeGreaterThan(0);
      expect(await kv.keys('k-*')).toContain(key);
      expect(await kv.delete(key)).toBe(true);
      await kv.clearExpired();

      await snapshots.save(key, { formatVersion: 1 } as never);
      expect((await snapshots.list({ limit: 10 })).map((item) => item.id)).toContain(key);
      const lease = await snapshots.tryAcquire(key);
      await snapshots.release(key, lease!.ownerToken);
      await snapshots.delete(key);

      const handle = await locks.acquire(key, 60_000);
      const waiting = locks.acquire(key, 60_000, { wait: 10_000 });
      await handle!.release();
      await (await waiting)!.release();
      await locks.clearExpired();

      await cache.set(key, { a: 1 });
      expect(await cache.get(key)).toEqual({ a: 1 });
      await cache.clear();

      await breaker.recordFailure(key, 3);
      await breaker.recordSuccess(key);
      await breaker.delete(key);

      await checkpoints.save({ id: key, taskId: key, sequence: 1, timestamp: 0, progress: 0, data: null });
      await checkpoints.cleanup(key, 0);

      const claim = await idempotency.reserve(key, 60_000);
      if (claim.status !== 'acquired') throw new Error('expected a fresh reservation');
      await idempotency.complete(key, claim.token, { done: true });
      await idempotency.delete(key);

      const { item } = await backend.createItem({ process: 'p', id: key, state: 'new', data: {} });
      const claimed = await backend.claim({ process: 'p', itemId: key, state: 'new', version: item.version, owner: 'w', lease: 60_000 });
      await backend.transition({ process: 'p', itemId: key, from: 'new', version: claimed!.version, to: 'done', kind: 'advance', key: 'k' });
      expect((await backend.getItem('p', key))?.state).toBe('done');
      expect(await backend.history('p', key)).toHaveLength(2);

      await Promise.all(stores.map((store) => store.close()));
    }
  });

  test('autoCreate without CREATE on the schema is E_INVALID_OPTION (42501) naming the missing privilege', async () => {
    const { role, schema, tables, roleUrl } = await roleAndSchema();
    await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`);
    const kv = new PostgresKeyValueStore({ url: roleUrl, schema, table: tables.kv });
    const error = await failure(kv.get('k'), 'E_INVALID_OPTION');
    expect(error.cause.code).toBe('42501');
    expect(error.message).toMatch(/privilege.*grantsSql/);
    await kv.close();
  });

  test("a lock table's fence sequence without USAGE is E_INVALID_OPTION (42501), not a retryable error", async () => {
    const { role, schema, tables, roleUrl } = await roleAndSchema();
    const options = { schema, tables: { locks: tables.locks }, only: ['locks' as const] };
    await admin.query(schemaSql(options));
    await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}; GRANT SELECT, INSERT, UPDATE, DELETE ON ${schema}.${tables.locks} TO ${role}`);
    const locks = new PostgresLockProvider({ url: roleUrl, schema, table: tables.locks, wakeups: false });
    const error = await failure(locks.acquire('job', 60_000), 'E_INVALID_OPTION');
    expect(error.cause.code).toBe('42501');
    expect(error.message).toMatch(/fence_seq/);
    await admin.query(grantsSql(role, options));
    expect(await locks.acquire('job', 60_000)).not.toBeNull();
    await locks.close();
  });

  test('historyRetention trims the log with exactly the grants of grantsSql() (no UPDATE on the log), on demand and by the sweeper', async () => {
    const { role, schema, tables, roleUrl } = await roleAndSchema();
    const options = { schema, tables: tableNames(tables), only: ['processItems' as const, 'processTransitions' as const] };
    await admin.query(schemaSql(options));
    await admin.query(grantsSql(role, options));
    const log = `${schema}.${tables.processTransitions}`;
    const rowsOfLog = async () => Number((await admin.query(`SELECT count(*) AS n FROM ${log}`)).rows[0].n);
    const backend = new PostgresProcessBackend({
      url: roleUrl,
      schema,
      autoCreate: false,
      wakeups: false,
      itemsTable: tables.processItems,
      transitionsTable: tables.processTransitions,
      historyRetention: 60_000,
    });
    const age = () => admin.query(`UPDATE ${log} SET at = now() - interval '2 minutes'`);
    for (const id of ['a', 'b']) await backend.createItem({ process: 'p', id, state: 'new', data: {} });
    await age();
    expect(await backend.clearHistory()).toBe(2);
    await backend.createItem({ process: 'p', id: 'c', state: 'new', data: {} });
    await age();
    const sweepers = activeSweepers(`${schema}.${tables.processTransitions}`);
    expect(sweepers).toHaveLength(1);
    await sweepers[0]!.sweep();
    expect(await rowsOfLog()).toBe(0);
    await backend.close();
  });
});
