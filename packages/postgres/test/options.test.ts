import { describe, expect, test } from 'vitest';
import {
  PostgresCacheProvider,
  PostgresCheckpointStore,
  PostgresCircuitBreakerStore,
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresProcessBackend,
  PostgresSnapshotStore,
} from '../src/index.js';

/** Never connected: every case here is decided before anything is sent. */
const url = 'postgresql://postgres@127.0.0.1:1/unused';

const stores = {
  kv: (options: object) => new PostgresKeyValueStore({ url, ...options }),
  snapshots: (options: object) => new PostgresSnapshotStore({ url, ...options }),
  locks: (options: object) => new PostgresLockProvider({ url, ...options }),
  cache: (options: object) => new PostgresCacheProvider({ url, ...options }),
  circuitBreaker: (options: object) => new PostgresCircuitBreakerStore({ url, ...options }),
  checkpoints: (options: object) => new PostgresCheckpointStore({ url, ...options }),
  idempotency: (options: object) => new PostgresIdempotencyStore({ url, ...options }),
  process: (options: object) => new PostgresProcessBackend({ url, ...options }),
};

describe('options every store reads the same way', () => {
  test('applicationName must be a string without U+0000 of at most 63 UTF-8 bytes', async () => {
    for (const [name, open] of Object.entries(stores)) {
      for (const applicationName of [42, 'app\u0000name', 'a'.repeat(64), `${'a'.repeat(62)}é`]) {
        expect(() => open({ applicationName }), `${name}: ${JSON.stringify(applicationName)}`).toThrow(
          expect.objectContaining({ code: 'E_INVALID_OPTION' }),
        );
      }
      await open({ applicationName: `${'a'.repeat(61)}é` }).close();
    }
  });

  test('a URL string is the url option; two spellings of one option must agree', async () => {
    for (const open of Object.values(stores)) await open({}).close();
    for (const [name, open] of Object.entries(stores)) {
      for (const options of [
        { connectionString: 'postgresql://postgres@127.0.0.1:2/other' },
        { autoCreate: true, autoCreateTable: false },
        { table: 'a', tableName: 'b' },
      ]) {
        expect(() => open(options), `${name}: ${JSON.stringify(options)}`).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      }
      await open({ connectionString: url, autoCreate: false, autoCreateTable: false }).close();
    }
    expect(() => new PostgresKeyValueStore(42 as never)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    await new PostgresKeyValueStore(url).close();
  });

  test('other bad settings are E_INVALID_OPTION before anything is opened', () => {
    for (const options of [
      { preparedStatements: 'yes' },
      { cleanupInterval: -1 },
      { autoCreate: 'no' },
      { existingPool: {} },
      { pool: 5 },
      { url: '' },
      { schema: 'pg_catalog' },
      { table: 'bad name' },
      { table: 'pg_class' }, // unqualified, it would be the system catalog
      { listenUrl: '' },
    ]) {
      expect(() => stores.kv(options), JSON.stringify(options)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    }
    expect(() => new PostgresKeyValueStore({})).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
  });
});
