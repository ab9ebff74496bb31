import type { DatabaseSync } from 'node:sqlite';
import {
  Lifecycle,
  StowageError,
  assertOptionalDuration,
  assertValidKey,
  assertValidKeys,
  assertValidStringValue,
  globLiteralPrefix,
  globToRegExp,
  type Capabilities,
  type KeyValueEntry,
  type KeyValueEntryInfo,
  type KeyValueSetOptions,
  type KeyValueStore,
  type KeyValueWrite,
} from '@stowage/core';
import { SQLITE_CAPABILITIES } from './capabilities.ts';
import { LIVE, NOW_MS, connect, type SqliteStoreOptions } from './database.ts';

interface KvRow {
  key: string;
  value: string;
  version: number;
  updated_at: number;
  expires_at: number | null;
}

/**
 * Insert or replace. The version grows by one while the key is live and starts over at 1
 * when the stored row had already expired (an expired key counts as absent).
 */
const UPSERT = `
  INSERT INTO kv (key, value, version, updated_at, expires_at)
  VALUES (?, ?, 1, ${NOW_MS}, ${NOW_MS} + ?)
  ON CONFLICT (key) DO UPDATE SET
    value = excluded.value,
    version = CASE WHEN kv.expires_at IS NULL OR kv.expires_at > ${NOW_MS} THEN kv.version + 1 ELSE 1 END,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at
  RETURNING version`;

export class SqliteKeyValueStore implements KeyValueStore {
  readonly capabilities: Capabilities = SQLITE_CAPABILITIES;
  readonly #db: DatabaseSync;
  readonly #ownsDatabase: boolean;
  readonly #lifecycle = new Lifecycle('sqlite key-value store');

  constructor(options: SqliteStoreOptions) {
    const { db, owned } = connect(options);
    this.#db = db;
    this.#ownsDatabase = owned;
  }

  async get(key: string): Promise<string | null> {
    this.#open();
    assertValidKey(key);
    const row = this.#db.prepare(`SELECT value FROM kv WHERE key = ? AND ${LIVE}`).get(key) as Pick<KvRow, 'value'> | undefined;
    return row?.value ?? null;
  }

  async set(key: string, value: string, options?: KeyValueSetOptions): Promise<void> {
    this.#open();
    assertValidKey(key);
    assertValidStringValue(value);
    assertOptionalDuration(options?.ttl);
    this.#db.prepare(UPSERT).get(key, value, options?.ttl ?? null);
  }

  async delete(key: string): Promise<boolean> {
    this.#open();
    assertValidKey(key);
    // An expired row is removed too, but only a live one counts as deleted.
    const row = this.#db.prepare(`DELETE FROM kv WHERE key = ? RETURNING ${LIVE} AS live`).get(key) as
      | { live: number }
      | undefined;
    return row?.live === 1;
  }

  async exists(key: string): Promise<boolean> {
    this.#open();
    assertValidKey(key);
    return this.#db.prepare(`SELECT 1 FROM kv WHERE key = ? AND ${LIVE}`).get(key) !== undefined;
  }

  async keys(pattern = '*'): Promise<string[]> {
    return (await this.entries(pattern)).map((entry) => entry.key);
  }

  async getMany(keys: readonly string[]): Promise<(string | null)[]> {
    this.#open();
    assertValidKeys(keys);
    if (keys.length === 0) return [];
    const rows = this.#db
      .prepare(`SELECT key, value FROM kv WHERE key IN (SELECT value FROM json_each(?)) AND ${LIVE}`)
      .all(JSON.stringify(keys)) as Pick<KvRow, 'key' | 'value'>[];
    const found = new Map(rows.map((row) => [row.key, row.value]));
    return keys.map((key) => found.get(key) ?? null);
  }

  async setMany(entries: readonly KeyValueWrite[]): Promise<void> {
    this.#open();
    if (!Array.isArray(entries)) throw new StowageError('E_INVALID_VALUE', 'setMany needs an array of entries');
    for (const entry of entries) {
      assertValidKey(entry?.key);
      assertValidStringValue(entry.value);
      assertOptionalDuration(entry.ttl);
    }
    const upsert = this.#db.prepare(UPSERT);
    this.#transaction(() => {
      for (const entry of entries) upsert.get(entry.key, entry.value, entry.ttl ?? null);
    });
  }

  async deleteMany(keys: readonly string[]): Promise<number> {
    this.#open();
    assertValidKeys(keys);
    const rows = this.#db
      .prepare(`DELETE FROM kv WHERE key IN (SELECT value FROM json_each(?)) RETURNING ${LIVE} AS live`)
      .all(JSON.stringify(keys)) as { live: number }[];
    return rows.filter((row) => row.live === 1).length;
  }

  async getEntry(key: string): Promise<KeyValueEntry | null> {
    this.#open();
    assertValidKey(key);
    const row = this.#db.prepare(`SELECT * FROM kv WHERE key = ? AND ${LIVE}`).get(key) as KvRow | undefined;
    return row === undefined ? null : { ...toInfo(row), value: row.value };
  }

  async entries(pattern = '*'): Promise<KeyValueEntryInfo[]> {
    this.#open();
    const matches = globToRegExp(pattern); // validates the pattern (E_INVALID_KEY)
    // Narrow the scan to the pattern's literal prefix, compared as UTF-8 bytes: SQLite's LIKE
    // ignores ASCII case, and its text functions stop at U+0000.
    const prefix = Buffer.from(globLiteralPrefix(pattern));
    const rows = this.#db
      .prepare(
        `SELECT key, version, updated_at, expires_at FROM kv
         WHERE substr(CAST(key AS BLOB), 1, ?) = ? AND ${LIVE} ORDER BY key`,
      )
      .all(prefix.length, prefix) as Omit<KvRow, 'value'>[];
    return rows.filter((row) => matches.test(row.key)).map(toInfo);
  }

  async compareAndSet(
    key: string,
    value: string,
    expectedVersion: number | null,
    options?: KeyValueSetOptions,
  ): Promise<number> {
    this.#open();
    assertValidKey(key);
    assertValidStringValue(value);
    assertOptionalDuration(options?.ttl);
    if (expectedVersion !== null && (!Number.isSafeInteger(expectedVersion) || expectedVersion < 1)) {
      throw new StowageError('E_INVALID_OPTION', 'expectedVersion must be a positive integer or null');
    }
    const ttl = options?.ttl ?? null;
    const row =
      expectedVersion === null
        ? // Only when absent or expired: the conflict branch fires for an expired row alone.
          this.#db
            .prepare(
              `INSERT INTO kv (key, value, version, updated_at, expires_at)
               VALUES (?, ?, 1, ${NOW_MS}, ${NOW_MS} + ?)
               ON CONFLICT (key) DO UPDATE SET
                 value = excluded.value, version = 1, updated_at = excluded.updated_at, expires_at = excluded.expires_at
               WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= ${NOW_MS}
               RETURNING version`,
            )
            .get(key, value, ttl)
        : this.#db
            .prepare(
              `UPDATE kv SET value = ?, version = version + 1, updated_at = ${NOW_MS}, expires_at = ${NOW_MS} + ?
               WHERE key = ? AND version = ? AND ${LIVE}
               RETURNING version`,
            )
            .get(value, ttl, key, expectedVersion);
    if (row === undefined) {
      throw new StowageError('E_VERSION_CONFLICT', `"${key}" is not at version ${expectedVersion ?? '(absent)'}`);
    }
    return (row as { version: number }).version;
  }

  async clearExpired(): Promise<number> {
    this.#open();
    const result = this.#db.prepare(`DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ${NOW_MS}`).run();
    return Number(result.changes);
  }

  /** Idempotent. Closes the database only if this store opened it. */
  close(): Promise<void> {
    return this.#lifecycle.close(async () => {
      if (this.#ownsDatabase) this.#db.close();
    });
  }

  #open(): void {
    this.#lifecycle.assertOpen();
  }

  #transaction(work: () => void): void {
    this.#db.exec('BEGIN IMMEDIATE');
    try {
      work();
      this.#db.exec('COMMIT');
    } catch (error) {
      this.#db.exec('ROLLBACK');
      throw error;
    }
  }
}

function toInfo(row: Omit<KvRow, 'value'>): KeyValueEntryInfo {
  return {
    key: row.key,
    version: row.version,
    updatedAt: new Date(row.updated_at),
    expiresAt: row.expires_at === null ? null : new Date(row.expires_at),
  };
}
