import { findPostgresServer } from '@stowage/test-env';
import pg from 'pg';
import { afterAll, describe, expect, test } from 'vitest';
import { PostgresProcessBackend } from '../src/index.js';
import { dropProcessTables, expectCrashTestHolds, processTables } from './state-machine-support.js';

/**
 * The state machine on a real PostgreSQL server, with LISTEN/NOTIFY wake-ups. The process
 * conformance cases run with the others in conformance.server.test.ts; this file adds what
 * they cannot see: LISTEN detection, the DDL and the multi-process crash test.
 */
const server = await findPostgresServer();

if (server === null) {
  describe.skip('postgres server: no server found (set STOWAGE_POSTGRES_URL)', () => test('skipped', () => undefined));
} else {
  console.log(`[stowage postgres] state-machine backend: ${server.label}`);
  const admin = new pg.Pool({ connectionString: server.url, max: 2 });
  afterAll(async () => {
    await admin.end();
    await server.stop();
  });

  test('LISTEN/NOTIFY wake-ups are detected on a real server', async () => {
    const tables = processTables();
    const backend = new PostgresProcessBackend({ url: server.url, itemsTable: tables.itemsTable, transitionsTable: tables.transitionsTable });
    try {
      await backend.ready();
      expect(backend.capabilities).toMatchObject({ changeFeed: true, wakeups: true, serverClock: true, crossProcess: true });
    } finally {
      await backend.close();
      await dropProcessTables(admin, tables);
    }
  });

  test('schemaSql() is the DDL autoCreate runs, and autoCreate: false runs none', async () => {
    const tables = processTables();
    const options = { url: server.url, itemsTable: tables.itemsTable, transitionsTable: tables.transitionsTable };
    const manual = new PostgresProcessBackend({ ...options, autoCreate: false });
    try {
      await expect(manual.getItem('p', 'x')).rejects.toMatchObject({ code: 'E_INVALID_OPTION' }); // missing tables: configuration
      await admin.query(manual.schemaSql());
      await admin.query(manual.schemaSql()); // idempotent
      expect((await manual.createItem({ process: 'p', id: 'x', state: 'a', data: {} })).created).toBe(true);
    } finally {
      await manual.close();
      await dropProcessTables(admin, tables);
    }
  });

  test('postgres server: a worker process SIGKILLed mid-item loses nothing (multi-process crash test)', { timeout: 180_000 }, async () => {
    const tables = processTables();
    const backend = new PostgresProcessBackend({ url: server.url, itemsTable: tables.itemsTable, transitionsTable: tables.transitionsTable });
    await backend.ready();
    try {
      await expectCrashTestHolds('postgres server', server.url, backend, tables, { items: 60, kills: 3 });
    } finally {
      await backend.close();
      await dropProcessTables(admin, tables);
    }
  });
}
