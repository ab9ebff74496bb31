import { StowageError, type JsonObject } from '@stowage/core';
import { expect, test } from 'vitest';
import { PostgresCacheProvider, PostgresIdempotencyStore, PostgresKeyValueStore, PostgresLockProvider, createPostgresPersistence, postgres } from '../src/index.js';
import { uniqueSuffix } from './support/context.js';
import { serverTestSetup } from './support/server.js';

/**
 * Every failure the server or the driver reports reaches the caller as a `StowageError` whose
 * code says what to do: retry (`E_UNAVAILABLE`, `E_TIMEOUT`), fix the configuration
 * (`E_INVALID_OPTION`), or fix the input (`E_INVALID_KEY`). One case per kind of failure.
 */
const { url, admin, describeServer, freshTables } = await serverTestSetup();

/** The rejection of `promise`, which must be a StowageError with `code` caused by a driver error. */
async function failure(promise: Promise<unknown>, code: string): Promise<StowageError & { cause: { code?: string; message?: string } }> {
  const error = await promise.then(
    () => null,
    (reason: unknown) => reason,
  );
  expect(error, `expected a rejection with ${code}`).toBeInstanceOf(StowageError);
  expect((error as StowageError).code, (error as Error).message).toBe(code);
  expect((error as StowageError).cause, 'the driver error is the cause').toBeDefined();
  return error as StowageError & { cause: { code?: string; message?: string } };
}

describeServer('errors a caller can act on', () => {

  test('a read-only server (a failover target): a fresh store with the default autoCreate reads; writes are E_UNAVAILABLE', async () => {
    const tables = freshTables();
    const writer = new PostgresKeyValueStore({ url, table: tables.kv });
    const locksWriter = new PostgresLockProvider({ url, table: tables.locks, wakeups: false });
    await writer.set('k', 'v');
    await locksWriter.ready();
    await Promise.all([writer.close(), locksWriter.close()]);
    // Every transaction read-only, as on a hot standby.
    const readOnly = { url, pool: { options: '-c default_transaction_read_only=on' } };
    const kv = new PostgresKeyValueStore({ ...readOnly, table: tables.kv });
    expect(await kv.get('k')).toBe('v');
    expect(await kv.keys('*')).toEqual(['k']);
    const write = await failure(kv.set('k', 'w'), 'E_UNAVAILABLE');
    expect(write.cause.code).toBe('25006');
    expect(write.message).toMatch(/read-only/);
    const locks = new PostgresLockProvider({ ...readOnly, table: tables.locks, wakeups: false });
    await failure(locks.acquire('job', 1000), 'E_UNAVAILABLE');
    // Tables that do not exist cannot be created there: still retryable (the primary can).
    const missing = new PostgresKeyValueStore({ ...readOnly, table: `missing_${uniqueSuffix()}` });
    expect((await failure(missing.get('k'), 'E_UNAVAILABLE')).cause.code).toBe('25006');
    await Promise.all([kv.close(), locks.close(), missing.close()]);
  });

  test('a prefix and key too long for the index together are E_INVALID_KEY (54000)', async () => {
    const tables = freshTables();
    const random = Array.from({ length: 1000 }, () => String.fromCharCode(33 + Math.floor(Math.random() * 94))).join('');
    const cache = new PostgresCacheProvider({ url, table: tables.cache, prefix: random });
    await cache.ready();
    // Incompressible keys would not fit either; uncompressed storage makes any long key show it.
    await admin.query(`ALTER TABLE ${tables.cache} ALTER COLUMN key SET STORAGE PLAIN`);
    const key = Array.from({ length: 1000 }, (_, i) => (i % 2 ? '\u0000' : '\u0001')).join('');
    const error = await failure(cache.set(key, 1), 'E_INVALID_KEY');
    expect(error.cause.code).toBe('54000');
    await cache.close();
  });

  test('a table name taken by another kind of object (a view) is E_INVALID_OPTION (42809); pg_… without a schema is refused upfront', async () => {
    const tables = freshTables();
    const view = `view_${uniqueSuffix()}`;
    // A view with the columns of a key-value table: only its kind is wrong.
    await admin.query(`CREATE VIEW ${view} AS SELECT ''::text AS key, ''::text AS value, 0::bigint AS version,
      now() AS updated_at, NULL::timestamptz AS expires_at`);
    try {
      const kv = new PostgresKeyValueStore({ url, table: view });
      expect((await failure(kv.get('k'), 'E_INVALID_OPTION')).cause.code).toBe('42809');
      await kv.close();
    } finally {
      await admin.query(`DROP VIEW ${view}; DROP SEQUENCE IF EXISTS ${view}_version_seq`);
    }
    expect(() => new PostgresKeyValueStore({ url, table: 'pg_class' })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    expect(() => postgres({ url, table: tables.snapshots, lock: { lockTableName: 'pg_locks' } })).toThrow(
      expect.objectContaining({ code: 'E_INVALID_OPTION' }),
    );
  });

  test('a renamed column is E_INVALID_OPTION (42703): the table does not fit the layout', async () => {
    const tables = freshTables();
    const kv = new PostgresKeyValueStore({ url, table: tables.kv });
    await kv.set('k', 'v');
    await admin.query(`ALTER TABLE ${tables.kv} RENAME COLUMN value TO renamed`);
    const error = await failure(kv.get('k'), 'E_INVALID_OPTION');
    expect(error.cause.code).toBe('42703');
    expect(error.message).toMatch(/layout/);
    await kv.close();
  });

  test('TLS: an unreadable certificate file and a certificate that fails verification are E_INVALID_OPTION', async () => {
    const tables = freshTables();
    const file = new URL(url);
    file.searchParams.set('sslmode', 'verify-full');
    file.searchParams.set('sslrootcert', `/nonexistent/${uniqueSuffix()}/root.crt`);
    const missingFile = new PostgresKeyValueStore({ url: file.toString(), table: tables.kv });
    expect((await failure(missingFile.get('k'), 'E_INVALID_OPTION')).cause.code).toBe('ENOENT');
    await missingFile.close();

    // The server's certificate is self-signed: full verification against the system CAs fails.
    const { rows } = await admin.query(`SELECT current_setting('ssl') AS ssl`);
    if (rows[0].ssl === 'on') {
      const verified = new URL(url);
      verified.searchParams.set('sslmode', 'verify-full');
      const untrusted = new PostgresKeyValueStore({ url: verified.toString(), table: tables.kv });
      const error = await failure(untrusted.get('k'), 'E_INVALID_OPTION');
      expect(error.message).toMatch(/TLS/);
      await untrusted.close();
    } else {
      // Without TLS on the server, asking for it is the configuration error.
      const required = new PostgresKeyValueStore({ url, pool: { ssl: { rejectUnauthorized: true } }, table: tables.kv });
      await failure(required.get('k'), 'E_INVALID_OPTION');
      await required.close();
    }
  });

  test('a database that does not exist is E_INVALID_OPTION (3D000), a server that does not answer E_UNAVAILABLE', async () => {
    const wrong = new URL(url);
    wrong.pathname = `/missing_${uniqueSuffix()}`;
    const kv = new PostgresKeyValueStore({ url: wrong.toString() });
    expect((await failure(kv.get('k'), 'E_INVALID_OPTION')).cause.code).toBe('3D000');
    await kv.close();
    const unreachable = new PostgresKeyValueStore({ url: 'postgresql://postgres@127.0.0.1:1/test' });
    await failure(unreachable.get('k'), 'E_UNAVAILABLE');
    await unreachable.close();
  });

  test('rows other code wrote that a store cannot read back are E_INVALID_VALUE, never a raw SyntaxError or a non-object snapshot', async () => {
    const tables = freshTables();
    const snapshots = postgres<JsonObject>({ url, table: tables.snapshots });
    const persistence = await createPostgresPersistence<JsonObject>({ url, table: tables.kv, prefix: 'wf:' });
    const cache = new PostgresCacheProvider({ url, table: tables.cache });
    const idempotency = new PostgresIdempotencyStore({ url, table: tables.idempotency });
    await Promise.all([snapshots.save('s', { ok: true }), persistence.save('p', { ok: true }), cache.set('c', 1), idempotency.set('i', 1)]);
    // As a hand-written migration or another tool might leave them.
    await admin.query(`UPDATE ${tables.snapshots} SET snapshot = '42'`);
    await admin.query(`UPDATE ${tables.kv} SET value = '{not json' WHERE key = 'wf:p'`);
    await admin.query(`UPDATE ${tables.cache} SET value = '{not json'`);
    await admin.query(`UPDATE ${tables.idempotency} SET value = '{not json'`);
    await expect(snapshots.load('s')).rejects.toMatchObject({ code: 'E_INVALID_VALUE' });
    for (const read of [() => persistence.load('p'), () => cache.get('c'), () => idempotency.get('i')]) {
      const error = await read().then(() => null, (reason: unknown) => reason);
      expect(error).toMatchObject({ code: 'E_INVALID_VALUE' });
      expect((error as Error).cause).toBeInstanceOf(SyntaxError);
    }
    await Promise.all([snapshots.close(), persistence.close(), cache.close(), idempotency.close()]);
  });
});
