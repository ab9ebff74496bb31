import type { DatabaseSync } from 'node:sqlite';
import type { KeyValueEntry, KeyValueEntryInfo } from '@stowage/core';
import { KeyValueStoreBase, type Glob, type KeyValueWriteOp } from '@stowage/core/adapter';
import { LIVE, NEXT_VERSION, NOW_MS, connect, type SqliteStoreOptions } from './database.ts';

interface KvRow {
  key: string;
  value: string;
  version: number;
  updated_at: number;
  expires_at: number | null;
}

/** Insert or replace, with a version no write of any key ever had (see NEXT_VERSION). */
const INSERT_OR_REPLACE = `
  INSERT INTO kv (key, value, version, updated_at, expires_at)
  VALUES (?, ?, ${NEXT_VERSION}, ${NOW_MS}, ${NOW_MS} + ?)
  ON CONFLICT (key) DO UPDATE SET
    value = excluded.value, version = excluded.version, updated_at = excluded.updated_at, expires_at = excluded.expires_at`;
const UPSERT = `${INSERT_OR_REPLACE} RETURNING version`;
/** compareAndSet(…, null): replaces only an expired row; a live one makes the statement return nothing. */
const CREATE = `${INSERT_OR_REPLACE} WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= ${NOW_MS} RETURNING version`;

/**
 * `KeyValueStore` on SQLite. `KeyValueStoreBase` (from `@stowage/core/adapter`) does
 * everything that is the same on every backend — closed state, key/value/ttl validation,
 * batch order, the version-conflict error — and calls the `_` methods below with valid
 * arguments. Each is one SQL statement (a batch, one transaction). The rest — capabilities,
 * `ready()`, `close()` — comes from the handle (see `connect` in database.ts).
 */
export class SqliteKeyValueStore extends KeyValueStoreBase {
  readonly #db: DatabaseSync;

  constructor(options: SqliteStoreOptions) {
    const handle = connect(options);
    super('SqliteKeyValueStore', handle);
    this.#db = handle.db;
  }

  protected async _getMany(keys: readonly string[]): Promise<(string | null)[]> {
    const rows = this.#db
      .prepare(`SELECT key, value FROM kv WHERE key IN (SELECT value FROM json_each(?)) AND ${LIVE}`)
      .all(JSON.stringify(keys)) as Pick<KvRow, 'key' | 'value'>[];
    const found = new Map(rows.map((row) => [row.key, row.value]));
    return keys.map((key) => found.get(key) ?? null);
  }

  protected async _setMany(writes: readonly KeyValueWriteOp[]): Promise<void> {
    const upsert = this.#db.prepare(UPSERT);
    this.#db.exec('BEGIN IMMEDIATE');
    try {
      for (const { key, value, ttl } of writes) upsert.get(key, value, ttl ?? null);
      this.#db.exec('COMMIT');
    } catch (error) {
      this.#db.exec('ROLLBACK');
      throw error;
    }
  }

  protected async _deleteMany(keys: readonly string[]): Promise<number> {
    const rows = this.#db
      .prepare(`DELETE FROM kv WHERE key IN (SELECT value FROM json_each(?)) RETURNING ${LIVE} AS live`)
      .all(JSON.stringify(keys)) as { live: number }[];
    return rows.filter((row) => row.live === 1).length;
  }

  protected async _getEntry(key: string): Promise<KeyValueEntry | null> {
    const row = this.#db.prepare(`SELECT * FROM kv WHERE key = ? AND ${LIVE}`).get(key) as KvRow | undefined;
    return row === undefined ? null : { ...toInfo(row), value: row.value };
  }

  protected async _entries(glob: Glob): Promise<KeyValueEntryInfo[]> {
    // Narrow the scan to the pattern's literal prefix, compared as UTF-8 bytes (SQLite's LIKE
    // ignores ASCII case, and its text functions stop at U+0000), then match in JavaScript.
    const prefix = Buffer.from(glob.prefix);
    const rows = this.#db
      .prepare(
        `SELECT key, version, updated_at, expires_at FROM kv
         WHERE substr(CAST(key AS BLOB), 1, ?) = ? AND ${LIVE} ORDER BY CAST(key AS BLOB)`,
      )
      .all(prefix.length, prefix) as Omit<KvRow, 'value'>[];
    return rows.filter((row) => glob.matches(row.key)).map(toInfo);
  }

  protected async _compareAndSet(key: string, value: string, expectedVersion: number | null, ttl: number | undefined): Promise<number | null> {
    const row =
      expectedVersion === null
        ? this.#db.prepare(CREATE).get(key, value, ttl ?? null)
        : this.#db
            .prepare(
              `UPDATE kv SET value = ?, version = ${NEXT_VERSION}, updated_at = ${NOW_MS}, expires_at = ${NOW_MS} + ?
               WHERE key = ? AND version = ? AND ${LIVE} RETURNING version`,
            )
            .get(value, ttl ?? null, key, expectedVersion);
    return row === undefined ? null : (row as { version: number }).version;
  }

  protected async _clearExpired(): Promise<number> {
    return Number(this.#db.prepare(`DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ${NOW_MS}`).run().changes);
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
