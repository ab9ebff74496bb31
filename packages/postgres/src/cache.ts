import {
  StowageError,
  assertCodec,
  assertOptionalDuration,
  encodeValue,
  compareKeys,
  jsonCodec,
  SingleFlight,
  type CacheOptions,
  type CacheProvider,
  type Codec,
} from '@stowage/core';
import { decodeText, encodeText, globParameters, keyMatchSql, storedKey, storedPrefixLike } from './key-encoding.js';
import { DEFAULT_TABLE_NAMES } from './schema.js';
import { LIVE, PostgresStoreBase, msInterval, storeSetup, type PostgresStoreOptions } from './store.js';

export interface PostgresCacheProviderOptions extends PostgresStoreOptions, CacheOptions {}

/**
 * {@link CacheProvider} on one table (default `stowage_cache`), shared by any number of
 * caches with different prefixes. Values are stored as the codec's text (strict JSON by
 * default), so any JSON value round-trips identically.
 */
export class PostgresCacheProvider extends PostgresStoreBase implements CacheProvider {
  readonly #sql: ReturnType<typeof cacheStatements>;
  readonly #prefix: string;
  readonly #defaultTtl: number | undefined;
  readonly #codec: Codec;
  readonly #loading = new SingleFlight<unknown>();

  constructor(options: PostgresCacheProviderOptions | string) {
    const setup = storeSetup('cache', options, DEFAULT_TABLE_NAMES.cache);
    super('PostgresCacheProvider', setup);
    const parsed = typeof options === 'string' ? {} : options;
    this.#sql = cacheStatements(setup.tables[0]![1].sql);
    this.#prefix = parsed.prefix ?? '';
    if (typeof this.#prefix !== 'string') throw new StowageError('E_INVALID_OPTION', 'prefix must be a string');
    assertOptionalDuration(parsed.defaultTtl, 'defaultTtl');
    this.#defaultTtl = parsed.defaultTtl;
    const codec = parsed.codec ?? jsonCodec;
    assertCodec(codec);
    this.#codec = codec;
    this.startCleanup(parsed.cleanupInterval, () => this.clearExpired());
  }

  async get<T = unknown>(key: string): Promise<T | null> {
    const found = await this.#lookup(key);
    return found.hit ? (found.value as T) : null;
  }

  async set<T = unknown>(key: string, value: T, ttl?: number): Promise<void> {
    this.assertOpen();
    const stored = this.#stored(key);
    const effectiveTtl = ttl ?? this.#defaultTtl;
    assertOptionalDuration(effectiveTtl, 'ttl');
    const text = this.#encode(value);
    await this.run(this.#sql.set, [stored, text, effectiveTtl ?? null]);
  }

  async delete(key: string): Promise<void> {
    this.assertOpen();
    await this.run(this.#sql.delete, [this.#stored(key)]);
  }

  async has(key: string): Promise<boolean> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.has, [this.#stored(key)]);
    return rows.length > 0;
  }

  /** Removes every entry under this cache's prefix (all entries when the prefix is empty). */
  async clear(): Promise<void> {
    this.assertOpen();
    await this.run(this.#sql.clear, [storedPrefixLike(this.#prefix)]);
  }

  async keys(pattern = '*'): Promise<string[]> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.keys, globParameters(pattern, this.#prefix));
    const prefixLength = encodeText(this.#prefix).length;
    return rows.map((row: { key: string }) => decodeText(row.key.slice(prefixLength))).sort(compareKeys);
  }

  getOrSet<T>(key: string, loader: () => Promise<T>, ttl?: number): Promise<T> {
    return this.#loading.run(key, async () => {
      if (typeof loader !== 'function') throw new StowageError('E_INVALID_OPTION', 'getOrSet needs a loader function');
      assertOptionalDuration(ttl ?? this.#defaultTtl, 'ttl');
      const found = await this.#lookup(key);
      if (found.hit) return found.value;
      const value = await loader();
      await this.set(key, value, ttl);
      return value;
    }) as Promise<T>;
  }

  async clearExpired(): Promise<number> {
    this.assertOpen();
    const { rowCount } = await this.run(this.#sql.clearExpired);
    return rowCount ?? 0;
  }

  async #lookup(key: string): Promise<{ hit: boolean; value?: unknown }> {
    this.assertOpen();
    const { rows } = await this.run(this.#sql.get, [this.#stored(key)]);
    return rows.length === 0 ? { hit: false } : { hit: true, value: this.#codec.decode(rows[0].value) };
  }

  /** The row key: the cache's prefix plus `key`, in stored form. */
  #stored(key: string): string {
    storedKey(key);
    return encodeText(this.#prefix + key);
  }

  #encode(value: unknown): string {
    const text = encodeValue(this.#codec, value);
    if (text.includes('\u0000')) {
      throw new StowageError('E_INVALID_VALUE', 'the encoded value contains U+0000, which PostgreSQL text cannot store');
    }
    return text;
  }
}

/** Every statement of the cache, built once (see `keyValueStatements` in kv.ts). */
function cacheStatements(table: string) {
  return {
    get: `SELECT value FROM ${table} WHERE key = $1 AND ${LIVE}`,
    set: `INSERT INTO ${table} (key, value, updated_at, expires_at) VALUES ($1, $2, now(), now() + ${msInterval('$3')})
      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at`,
    delete: `DELETE FROM ${table} WHERE key = $1`,
    has: `SELECT 1 FROM ${table} WHERE key = $1 AND ${LIVE}`,
    clear: `DELETE FROM ${table} WHERE key LIKE $1`,
    keys: `SELECT key FROM ${table} WHERE ${keyMatchSql('key', '$1', '$2', '$3')} AND ${LIVE}`,
    clearExpired: `DELETE FROM ${table} WHERE expires_at <= now()`,
  };
}
