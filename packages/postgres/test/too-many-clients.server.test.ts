import { StowageError } from '@stowage/core';
import pg from 'pg';
import { afterAll, expect, test } from 'vitest';
import { PostgresIdempotencyStore, PostgresKeyValueStore, grantsSql, schemaSql } from '../src/index.js';
import { uniqueSuffix, type TableSet } from './support/context.js';
import { serverTestSetup } from './support/server.js';

/**
 * A server that refuses new connections (53300 too_many_connections: `max_connections`, or a
 * role's `CONNECTION LIMIT`, which answers with the same SQLSTATE): a pool that already holds
 * connections waits for one of its own, as if its `max` were what the server granted; a pool
 * that holds none waits for room the same way, up to its bound. Outcomes only, never timings.
 */
const { url, admin, describeServer, freshTables } = await serverTestSetup();
const roles: string[] = [];

/** A role of its own that may hold at most `limit` connections, granted the kv and idempotency tables of `tables`; its URL. */
async function limitedRole(tables: TableSet, limit: number): Promise<string> {
  const role = `stowage_full_${uniqueSuffix()}`;
  roles.push(role);
  const only = ['kv', 'idempotency'] as const;
  const names = { kv: tables.kv, idempotency: tables.idempotency };
  await admin.query(schemaSql({ only: [...only], tables: names }));
  await admin.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT ${limit}`);
  await admin.query(grantsSql(role, { only: [...only], tables: names }));
  const limited = new URL(url);
  limited.username = role;
  return limited.toString();
}

/** The code of each outcome: 'ok', or the StowageError's code. */
function outcomes(settled: PromiseSettledResult<unknown>[]): string[] {
  return settled.map((result) => (result.status === 'fulfilled' ? 'ok' : result.reason instanceof StowageError ? result.reason.code : String(result.reason)));
}

describeServer('too many clients (53300)', () => {
  afterAll(async () => {
    for (const role of roles) await admin.query(`DROP OWNED BY ${role}; DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
  });

  test('the server refuses a connection with 53300 for a role at its connection limit', async () => {
    const limited = await limitedRole(freshTables(), 0);
    const client = new pg.Client({ connectionString: limited });
    const refused = await client.connect().then(
      () => undefined,
      (error: unknown) => error,
    );
    await client.end().catch(() => undefined);
    expect((refused as { code?: string }).code).toBe('53300');
  });

  test('50 concurrent calls on a pool of max 10 that the server grants 3 connections: all succeed, transactions included', async () => {
    const tables = freshTables();
    const limited = await limitedRole(tables, 3);
    // Nothing coalesced: every call is a statement of its own, needing a connection.
    const options = { url: limited, autoCreate: false, cleanupInterval: false, pool: { max: 10 } } as const;
    const kv = new PostgresKeyValueStore({ ...options, table: tables.kv, coalesce: false });
    const idempotency = new PostgresIdempotencyStore({ ...options, table: tables.idempotency });
    await kv.ready(); // the pool holds a connection of its own from here on

    const calls = [
      ...Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? kv.set(`key-${i}`, `value-${i}`) : kv.get(`key-${i - 1}`))),
      // Transactions check their client out the same way.
      ...Array.from({ length: 10 }, (_, i) => idempotency.runOnce(`once-${i}`, async () => i)),
    ];
    const results = outcomes(await Promise.allSettled(calls));
    expect(results.filter((outcome) => outcome !== 'ok'), 'failed calls').toEqual([]);
    expect(await kv.get('key-48')).toBe('value-48');
    await Promise.all([kv.close(), idempotency.close()]);
  });

  test('while its one connection stays busy, a call waits for it up to connectionTimeoutMillis, then fails with E_UNAVAILABLE naming max_connections', async () => {
    const tables = freshTables();
    const limited = await limitedRole(tables, 1);
    const options = { url: limited, autoCreate: false, cleanupInterval: false, pool: { max: 10, connectionTimeoutMillis: 3000 } } as const;
    const kv = new PostgresKeyValueStore({ ...options, table: tables.kv, coalesce: false });
    const idempotency = new PostgresIdempotencyStore({ ...options, table: tables.idempotency });
    // A transaction holds the role's one connection until the waiting call has given up.
    let started!: () => void;
    const holding = new Promise<void>((resolve) => (started = resolve));
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const holder = idempotency.runOnce('holder', async () => {
      started();
      await finished;
      return 'held';
    });
    await holding;
    const failure = await kv.get('anything').then(
      () => undefined,
      (error: unknown) => error,
    );
    finish();
    expect(await holder).toBe('held');
    expect(failure).toBeInstanceOf(StowageError);
    expect((failure as StowageError).code).toBe('E_UNAVAILABLE');
    expect((failure as StowageError).message).toMatch(/max_connections/);
    expect(((failure as StowageError).cause as { code?: string }).code).toBe('53300');
    // The connection came back: the same call now runs on it.
    expect(await kv.get('anything')).toBeNull();
    await Promise.all([kv.close(), idempotency.close()]);
  });

  test('a pool that holds no connection waits for room up to connectionTimeoutMillis, then E_UNAVAILABLE (cause 53300)', async () => {
    const limited = await limitedRole(freshTables(), 0);
    const kv = new PostgresKeyValueStore({ url: limited, autoCreate: false, cleanupInterval: false, pool: { max: 10, connectionTimeoutMillis: 500 } });
    const failure = await kv.get('anything').then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(StowageError);
    expect((failure as StowageError).code).toBe('E_UNAVAILABLE');
    expect(((failure as StowageError).cause as { code?: string }).code).toBe('53300');
    await kv.close();
  });
});
