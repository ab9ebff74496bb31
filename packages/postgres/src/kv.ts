import {
  StowageError,
  assertValidStringValue,
  describeType,
  compareKeys,
  parseKeyValueWrites,
  ttlOfSetOptions,
  type KeyValueEntry,
  type KeyValueEntryInfo,
  type KeyValueSetOptions,
  type KeyValueStore,
  type KeyValueWrite,
} from '@stowage/core';
import { DEFAULT_TABLE_NAMES } from './schema.js';
import { decodeText, encodeText, globParameters, keyMatchSql, storedKey } from './key-encoding.js';
import {
  LIVE,
  PostgresStoreBase,
  dateFromMs,
  epochMs,
  msInterval,
  storeSetup,
  type PostgresStoreOptions,
} from './store.js';

export interface PostgresKeyValueStoreOptions extends PostgresStoreOptions {
  /** Same as `table` (seed 002 spelling). Default `awaitly_workflow_state`. */
  tableName?: string;
}

/**
 * {@link KeyValueStore} on one table. Values are `text`, with the keys' escape for the
 * U+0000 that `text` cannot hold (see key-encoding.ts), so every string round-trips and
 * ordinary values read in SQL as they were written. Each method is one statement.
 */
export class PostgresKeyValueStore extends PostgresStoreBase implements KeyValueStore {
  readonly #sql: ReturnType<typeof keyValueStatements>;

  constructor(options: PostgresKeyValueStoreOptions | string) {
    const setup = storeSetup(
      'kv',
      options,
      DEFAULT_TABLE_NAMES.kv,
      typeof options === 'object' && options !== null ? options.tableName : undefined,
    );
    super('PostgresKeyValueStore', setup);
    this.#sql = keyValueStatements(setup.tables[0]![1].sql);
    if (typeof options === 'object') this.startCleanup(options.cleanupInterval, () => this.clearExpired());
  }

  async get(key: string): Promise<string | null> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.get, [storedKey(key)]);
    return rows.length === 0 ? null : decodeText(rows[0].value);
  }

  async set(key: string, value: string, options?: KeyValueSetOptions): Promise<void> {
    this.assertOpen();
    const ttl = parseWrite(key, value, options);
    await this.run(this.#sql.set, [storedKey(key), encodeText(value), ttl ?? null]);
  }

  async delete(key: string): Promise<boolean> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.delete, [storedKey(key)]);
    return rows.length > 0 && rows[0].live === true;
  }

  async exists(key: string): Promise<boolean> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.exists, [storedKey(key)]);
    return rows.length > 0;
  }

  async keys(pattern = '*'): Promise<string[]> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.keys, globParameters(pattern));
    return rows.map((row: { key: string }) => decodeText(row.key)).sort(compareKeys);
  }

  async getMany(keys: readonly string[]): Promise<(string | null)[]> {
    this.assertOpen();
    const stored = storedKeys(keys);
    if (stored.length === 0) return [];
    const { rows } = await this.run(this.#sql.getMany, [stored]);
    return rows.map((row: { value: string | null }) => (row.value === null ? null : decodeText(row.value)));
  }

  async setMany(entries: readonly KeyValueWrite[]): Promise<void> {
    this.assertOpen();
    // The last write of a key wins (one INSERT cannot touch the same row twice).
    const latest = parseKeyValueWrites(entries);
    if (latest.size === 0) return;
    const keys = [...latest.keys()].map((key) => storedKey(key));
    const writes = [...latest.values()];
    await this.run(this.#sql.setMany, [keys, writes.map((write) => encodeText(write.value)), writes.map((write) => write.ttl ?? null)]);
  }

  async deleteMany(keys: readonly string[]): Promise<number> {
    this.assertOpen();
    const stored = storedKeys(keys);
    if (stored.length === 0) return 0;
    const { rows } = await this.run(this.#sql.deleteMany, [[...new Set(stored)]]);
    return rows[0].count;
  }

  async getEntry(key: string): Promise<KeyValueEntry | null> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.getEntry, [storedKey(key)]);
    return rows.length === 0 ? null : { ...toInfo(rows[0]), value: decodeText(rows[0].value) };
  }

  async entries(pattern = '*'): Promise<KeyValueEntryInfo[]> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.entries, globParameters(pattern));
    return rows.map(toInfo).sort((a: KeyValueEntryInfo, b: KeyValueEntryInfo) => compareKeys(a.key, b.key));
  }

  async compareAndSet(
    key: string,
    value: string,
    expectedVersion: number | null,
    options?: KeyValueSetOptions,
  ): Promise<number> {
    this.assertOpen();
    const ttl = parseWrite(key, value, options);
    if (expectedVersion !== null && (!Number.isSafeInteger(expectedVersion) || expectedVersion < 1)) {
      throw new StowageError('E_INVALID_OPTION', 'expectedVersion must be a positive integer or null');
    }
    const params = [storedKey(key), encodeText(value), ttl ?? null];
    const { rows } =
      expectedVersion === null
        ? await this.run(this.#sql.create, params)
        : await this.run(this.#sql.update, [...params, expectedVersion]);
    if (rows.length === 0) {
      throw new StowageError(
        'E_VERSION_CONFLICT',
        `key "${key}" is not at version ${expectedVersion === null ? '(absent)' : expectedVersion}`,
      );
    }
    return Number(rows[0].version);
  }

  async clearExpired(): Promise<number> {
    this.assertOpen();
    const { rowCount } = await this.run(this.#sql.clearExpired);
    return rowCount ?? 0;
  }
}

/** A rewrite of a key: an expired row counts as absent, so its version starts over. */
const UPSERT_SET = `value = EXCLUDED.value,
  version = CASE WHEN e.expires_at IS NOT NULL AND e.expires_at <= now() THEN 1 ELSE e.version + 1 END,
  updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at`;

const SELECT_TIMES = `${epochMs('updated_at')} AS updated_at, ${epochMs('expires_at')} AS expires_at`;

/**
 * Every statement of a store, built once: the same string on every call is found in the
 * prepared-statement cache without hashing a new one (see `PostgresConnection.query`).
 */
function keyValueStatements(table: string) {
  return {
    get: `SELECT value FROM ${table} WHERE key = $1 AND ${LIVE}`,
    set: `INSERT INTO ${table} AS e (key, value, version, updated_at, expires_at)
      VALUES ($1, $2, 1, date_trunc('milliseconds', now()), now() + ${msInterval('$3')})
      ON CONFLICT (key) DO UPDATE SET ${UPSERT_SET}`,
    delete: `DELETE FROM ${table} WHERE key = $1 RETURNING ${LIVE} AS live`,
    exists: `SELECT 1 FROM ${table} WHERE key = $1 AND ${LIVE}`,
    keys: `SELECT key FROM ${table} WHERE ${keyMatchSql('key', '$1', '$2', '$3')} AND ${LIVE}`,
    // One row per requested key, in request order (NULL when absent or expired).
    getMany: `SELECT e.value FROM unnest($1::text[]) WITH ORDINALITY AS k(key, position)
      LEFT JOIN ${table} AS e ON e.key = k.key AND ${LIVE}
      ORDER BY k.position`,
    setMany: `INSERT INTO ${table} AS e (key, value, version, updated_at, expires_at)
      SELECT w.key, w.value, 1, date_trunc('milliseconds', now()), now() + ${msInterval('w.ttl')}
      FROM unnest($1::text[], $2::text[], $3::bigint[]) AS w(key, value, ttl)
      ON CONFLICT (key) DO UPDATE SET ${UPSERT_SET}`,
    deleteMany: `WITH removed AS (DELETE FROM ${table} WHERE key = ANY($1::text[]) RETURNING expires_at)
      SELECT count(*) FILTER (WHERE ${LIVE})::int AS count FROM removed`,
    getEntry: `SELECT key, value, version, ${SELECT_TIMES} FROM ${table} WHERE key = $1 AND ${LIVE}`,
    entries: `SELECT key, version, ${SELECT_TIMES} FROM ${table} WHERE ${keyMatchSql('key', '$1', '$2', '$3')} AND ${LIVE}`,
    // compareAndSet(…, null): only if absent or expired; an expired row is replaced and starts over at version 1.
    create: `INSERT INTO ${table} AS e (key, value, version, updated_at, expires_at)
      VALUES ($1, $2, 1, date_trunc('milliseconds', now()), now() + ${msInterval('$3')})
      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = 1,
        updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at
      WHERE e.expires_at IS NOT NULL AND e.expires_at <= now()
      RETURNING version`,
    // compareAndSet(…, version)
    update: `UPDATE ${table}
      SET value = $2, version = version + 1, updated_at = date_trunc('milliseconds', now()),
          expires_at = now() + ${msInterval('$3')}
      WHERE key = $1 AND version = $4 AND ${LIVE}
      RETURNING version`,
    clearExpired: `DELETE FROM ${table} WHERE expires_at <= now()`,
  };
}

function parseWrite(key: unknown, value: unknown, options: KeyValueSetOptions | undefined): number | undefined {
  storedKey(key);
  assertValidStringValue(value);
  return ttlOfSetOptions(options);
}

function storedKeys(keys: unknown): string[] {
  if (!Array.isArray(keys)) throw new StowageError('E_INVALID_KEY', `keys must be an array, got ${describeType(keys)}`);
  return keys.map((key) => storedKey(key));
}

function toInfo(row: { key: string; version: string | number; updated_at: number; expires_at: number | null }): KeyValueEntryInfo {
  return { key: decodeText(row.key), version: Number(row.version), updatedAt: dateFromMs(row.updated_at)!, expiresAt: dateFromMs(row.expires_at) };
}
