import { expect, test } from 'vitest';
import { PostgresProcessBackend } from '../src/index.js';
import { dropProcessTables, expectCrashTestHolds, processTables } from './state-machine-support.js';
import { embeddedTestSetup } from './support/embedded.js';

/**
 * The state machine on embedded PGlite (its own process, reached through pglite-socket with
 * the real `pg` driver). LISTEN does not work through the socket multiplexer: the backend
 * detects that and its feeds poll. The process conformance cases run with the others in
 * conformance.pglite.test.ts; this file adds the multi-process crash test.
 */
// Room for the worker processes' own connections.
const { embedded, pool } = await embeddedTestSetup('stowage-state-machine', { maxConnections: 32 });
console.log(`[stowage postgres] state-machine backend: ${embedded.label}`);

test('PGlite: a worker process SIGKILLed mid-item loses nothing (multi-process crash test)', { timeout: 180_000 }, async () => {
  const tables = processTables();
  const backend = new PostgresProcessBackend({ pool, itemsTable: tables.itemsTable, transitionsTable: tables.transitionsTable });
  await backend.ready();
  expect(backend.capabilities.changeFeed, 'LISTEN through the PGlite socket is detected as missing').toBe(false);
  try {
    await expectCrashTestHolds('PGlite', embedded.url, backend, tables, { items: 40, kills: 2 });
  } finally {
    await backend.close();
    await dropProcessTables(pool, tables);
  }
});
