import pg from 'pg';
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
  connect,
  createPostgresPersistence,
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
      { maxWaiting: -1 },
      { maxWaiting: 1.5 },
      { maxWaiting: '10' },
    ]) {
      expect(() => stores.kv(options), JSON.stringify(options)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    }
    expect(() => new PostgresKeyValueStore({})).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
  });

  test('no U+0000 reaches the startup packet, from any option or URL part: E_INVALID_OPTION before anything is opened', async () => {
    // pg sends user, database, application_name, fallback_application_name, options and
    // replication as NUL-terminated strings: a U+0000 would end one and start a parameter of
    // its own (here default_transaction_read_only=on).
    const injected = 'x\u0000default_transaction_read_only\u0000on';
    const encoded = 'x%00default_transaction_read_only%00on';
    const fields = { host: '127.0.0.1', port: 1, database: 'unused', user: 'postgres' };
    for (const options of [
      { url, pool: { application_name: injected } },
      { url, applicationName: '', pool: { fallback_application_name: injected } },
      { url, pool: { options: `-c x=y\u0000${injected}` } },
      { url, pool: { replication: `database\u0000${injected}` } },
      { ...fields, user: injected },
      { ...fields, database: injected },
      { host: '127.0.0.1', port: 1, database: 'unused', pool: { user: injected } },
      { host: '127.0.0.1', port: 1, pool: { database: injected } },
      { url: `${url}?application_name=${encoded}` },
      { url: `${url}?fallback_application_name=${encoded}` },
      { url: `${url}?options=${encoded}` },
      { url: `postgresql://postgres${encoded}@127.0.0.1:1/unused` },
      { url: `postgresql://postgres@127.0.0.1:1/unused${encoded}` },
      { url: `postgresql://postgres@127.0.0.1:1/unused\u0000x` },
      { url, listenUrl: `${url}?application_name=${encoded}` },
      { url, listenUrl: `postgresql://postgres${encoded}@127.0.0.1:1/unused` },
      { pool: new pg.Pool({ connectionString: url }), listenUrl: `${url}?options=${encoded}` },
    ]) {
      for (const [name, open] of Object.entries(stores)) {
        expect(() => open(options), `${name}: ${JSON.stringify(options)}`).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      }
    }
    expect(() => connect({ url, pool: { application_name: injected } })).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    await expect(createPostgresPersistence({ url: `${url}?application_name=${encoded}` })).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
    // Server options without U+0000 are pg's documented feature, and the URL's own spelling of them too.
    await stores.kv({ pool: { options: '-c default_transaction_read_only=on' } }).close();
    await stores.kv({ url: `${url}?options=-c%20statement_timeout%3D5s&application_name=mine` }).close();
  });

  test('the application name that wins (URL, pool settings, applicationName) is at most 63 UTF-8 bytes', async () => {
    const long = 'a'.repeat(64);
    for (const options of [
      { pool: { application_name: long } },
      { url: `${url}?application_name=${long}` },
      { applicationName: '', pool: { fallback_application_name: long } },
      { url: `${url}?application_name=${long}`, applicationName: 'short' },
      { listenUrl: `${url}?application_name=${long}` },
    ]) {
      expect(() => stores.kv(options), JSON.stringify(options)).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
    }
    // A name that loses to a shorter one is never sent.
    await stores.kv({ url: `${url}?application_name=short`, applicationName: 'a'.repeat(40) }).close();
    await stores.kv({ pool: { fallback_application_name: long } }).close();
  });

  test('a port outside 1..65535 or a malformed URL is E_INVALID_OPTION before anything is opened, also for createPostgresPersistence', async () => {
    const fields = { host: '127.0.0.1', database: 'unused', user: 'postgres' };
    for (const options of [
      { ...fields, port: 99999 },
      { ...fields, port: -1 },
      { ...fields, port: 0 },
      { ...fields, port: 5432.5 },
      { ...fields, port: 'abc' },
      { ...fields, pool: { port: 70000 } },
      { url: 'postgresql://postgres@127.0.0.1:99999/unused' },
      { url: `${url}?port=abc` },
      { url: 'postgresql://[::1' },
      { url: 'postgresql://postgres@127.0.0.1:1/%E0%A4%A' },
      { url, listenUrl: 'postgresql://[::1' },
      { url, listenUrl: 'postgresql://postgres@127.0.0.1:99999/unused' },
      // Not PostgreSQL URLs: pg would connect somewhere anyway (the first to the default host,
      // reported as refused credentials).
      { url: 'localhost:5432/test' },
      { url: 'postgress://postgres@127.0.0.1:1/unused' },
      { url: 'mongodb://127.0.0.1:27017/test' },
      { url: 'http://127.0.0.1:5432/test' },
    ]) {
      for (const [name, open] of Object.entries(stores)) {
        expect(() => open(options), `${name}: ${JSON.stringify(options)}`).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      }
      await expect(createPostgresPersistence(options as never), JSON.stringify(options)).rejects.toMatchObject({ code: 'E_INVALID_OPTION' });
    }
    // What pg reads as it does: a numeric string port, a URL without host, a socket directory.
    await stores.kv({ ...fields, port: '5432' }).close();
    await stores.kv({ url: 'postgresql://postgres@/unused' }).close();
    await stores.kv({ url: '/var/run/postgresql unused' }).close();
    await stores.kv({ url: 'postgres://postgres@127.0.0.1:1/unused' }).close();
    await stores.kv({ url: 'socket:/var/run/postgresql?db=unused' }).close();
  });

  test('a store whose kit options are refused (a bad prefix, codec, onDuplicate, coalesce) leaves nothing on a pg.Pool of yours', async () => {
    const pool = new pg.Pool({ connectionString: url });
    const hooked = () => pool.listenerCount('release') + pool.listenerCount('remove');
    const refused = [
      () => new PostgresSnapshotStore({ pool, prefix: 42 as never }),
      () => new PostgresCacheProvider({ pool, prefix: 42 as never }),
      () => new PostgresKeyValueStore({ pool, coalesce: 'yes' as never }),
      () => new PostgresCheckpointStore({ pool, onDuplicate: 'ignore' as never }),
      () => new PostgresIdempotencyStore({ pool, codec: 5 as never }),
    ];
    for (const create of refused) {
      expect(create).toThrow(expect.objectContaining({ code: 'E_INVALID_OPTION' }));
      // The store took no share of the pool: nothing listens to it, nothing waits to be closed.
      expect(hooked()).toBe(0);
    }
    const kv = new PostgresKeyValueStore({ pool });
    expect(hooked()).toBeGreaterThan(0);
    await kv.close();
    expect(hooked()).toBe(0);
    await pool.end();
  });
});

describe('connection failures pg reports as Node errors', () => {
  /** The rejection of `promise` within a liveness bound ('hang' if it never settles). */
  async function settled(promise: Promise<unknown>): Promise<unknown> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const hang = new Promise((resolve) => (timer = setTimeout(() => resolve('hang'), 10_000)));
    try {
      return await Promise.race([promise.then(() => 'resolved', (error: unknown) => error), hang]);
    } finally {
      clearTimeout(timer);
    }
  }

  test('a bad port pg meets when connecting (ERR_SOCKET_BAD_PORT) is E_INVALID_OPTION, and close() still resolves', async () => {
    // PGPORT is read by pg when it connects, after stowage checked its options.
    const saved = process.env.PGPORT;
    process.env.PGPORT = '99999';
    try {
      const kv = new PostgresKeyValueStore({ host: '127.0.0.1', database: 'unused', user: 'postgres', cleanupInterval: false });
      expect(await settled(kv.get('k'))).toMatchObject({ code: 'E_INVALID_OPTION', cause: { code: 'ERR_SOCKET_BAD_PORT' } });
      expect(await settled(kv.close())).toBe('resolved');
    } finally {
      if (saved === undefined) delete process.env.PGPORT;
      else process.env.PGPORT = saved;
    }
  });

  test('the LISTEN connection of a pg.Pool of yours with a port out of range: ready() and close() settle, wake-ups off', async () => {
    const pool = new pg.Pool({ host: '127.0.0.1', port: 99999, database: 'unused', user: 'postgres' });
    const locks = new PostgresLockProvider({ pool, autoCreate: false, cleanupInterval: false });
    expect(await settled(locks.ready())).toBe('resolved');
    expect(locks.capabilities.wakeups).toBe(false);
    expect(await settled(locks.acquire('k', 1000))).toMatchObject({ code: 'E_INVALID_OPTION', cause: { code: 'ERR_SOCKET_BAD_PORT' } });
    expect(await settled(locks.close())).toBe('resolved');
  });

  test('a pg.Pool of yours with a malformed URL (ERR_INVALID_URL) is E_INVALID_OPTION', async () => {
    const pool = new pg.Pool({ connectionString: 'postgresql://[::1' });
    const kv = new PostgresKeyValueStore({ pool, cleanupInterval: false });
    expect(await settled(kv.get('k'))).toMatchObject({ code: 'E_INVALID_OPTION', cause: { code: 'ERR_INVALID_URL' } });
    expect(await settled(kv.close())).toBe('resolved');
    await pool.end();
  });
});
