import type { CacheOptions } from '@stowage/core';
import { CacheProviderBase, type CacheWrite, type Glob } from '@stowage/core/adapter';
import { resolveStore, type StoreDatabase } from '../database.js';
import { decodeText, encodeText, valuesInOrder } from '../key-encoding.js';
import type { PostgresStoreOptions } from '../options.js';
import { globMatchSql, globSelection } from '../glob.js';
import { LIVE, clearExpiredBatchSql, clearExpiredInBatches, inKeyRange, msInterval } from '../sql.js';

export interface PostgresCacheProviderOptions extends PostgresStoreOptions, CacheOptions {
  /** Send concurrent `get` and `set` calls of one tick as one statement each (default true). */
  coalesce?: boolean;
}

/**
 * {@link CacheProvider} on one table (default `stowage_cache`), shared by any number of
 * caches: a row is `(prefix, key)`, and every statement names the cache's prefix, so a cache
 * never sees, lists, clears or expires another's entries. Values are the codec's text (strict
 * JSON by default), with the keys' escape for U+0000. Concurrent `get` and `set` calls of one
 * tick go out as one statement (the kit's coalescing, on `_getMany` and `_setMany`).
 */
export class PostgresCacheProvider extends CacheProviderBase {
  readonly #db: StoreDatabase;
  readonly #sql: ReturnType<typeof cacheStatements>;

  constructor(options: PostgresCacheProviderOptions | string) {
    const { given, table, identity, db } = resolveStore('PostgresCacheProvider', options, 'cache');
    super(identity, db, { prefix: given.prefix, defaultTtl: given.defaultTtl, codec: given.codec, coalesce: given.coalesce });
    this.#db = db;
    this.#sql = cacheStatements(table.sql);
    // Each cache clears its own prefix (on the (prefix, expires_at) index): one job per prefix.
    db.sweep(table, { key: `cache:expired:${JSON.stringify(this.prefix)}`, run: () => this.clearExpired() });
  }

  /** The DDL this cache runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }

  protected async _get(key: string): Promise<string | null> {
    const { rows } = await this.#db.run(this.#sql.get, [this.prefix, encodeText(key)]);
    return rows.length === 0 ? null : decodeText(rows[0].value);
  }

  /** Concurrent `get` calls, coalesced by the kit: one text per key, in the order given (keys may repeat). */
  protected override async _getMany(keys: readonly string[]): Promise<(string | null)[]> {
    const stored = keys.map(encodeText);
    const { rows } = await this.#db.run(this.#sql.getMany, [this.prefix, stored]);
    return valuesInOrder(stored, rows);
  }

  protected async _set(key: string, text: string, ttl: number | undefined): Promise<void> {
    await this.#db.run(this.#sql.set, [this.prefix, encodeText(key), encodeText(text), ttl ?? null]);
  }

  /** Concurrent `set` calls, coalesced by the kit (keys unique and ascending): one statement, rows locked in key order. */
  /** Concurrent `set` calls, coalesced by the kit: one statement, which skips the rows another transaction holds and returns their keys. */
  protected override async _setMany(writes: readonly CacheWrite[]): Promise<ReadonlySet<string>> {
    const keys = writes.map((write) => encodeText(write.key));
    const texts = writes.map((write) => encodeText(write.text));
    const { rows } = await this.#db.run(this.#sql.setMany, [this.prefix, keys, texts, writes.map((write) => write.ttl ?? null)]);
    return new Set(rows.map((row: { key: string }) => decodeText(row.key)));
  }

  protected async _delete(key: string): Promise<void> {
    await this.#db.run(this.#sql.delete, [this.prefix, encodeText(key)]);
  }

  protected override async _has(key: string): Promise<boolean> {
    const { rows } = await this.#db.run(this.#sql.has, [this.prefix, encodeText(key)]);
    return rows.length > 0;
  }

  protected async _clear(): Promise<void> {
    await this.#db.run(this.#sql.clear, [this.prefix]);
  }

  /** In key order from `ORDER BY key`; a glob with a literal start reads only its key range. */
  protected async _keys(glob: Glob): Promise<string[]> {
    const { match, range } = globSelection(glob);
    const { rows } = range
      ? await this.#db.run(this.#sql.keysInRange, [this.prefix, ...match, ...range])
      : await this.#db.run(this.#sql.keys, [this.prefix, ...match]);
    return rows.map((row: { key: string }) => decodeText(row.key));
  }

  /** One page of `scan()`: a range of the primary key `(prefix, key)` after `after`. */
  protected override async _keysPage(glob: Glob, after: string | null, limit: number): Promise<string[]> {
    const { match, range } = globSelection(glob);
    // Keys are never empty, so '' starts before the first.
    const from = after === null ? '' : encodeText(after);
    const { rows } = range
      ? await this.#db.run(this.#sql.keysPageInRange, [this.prefix, ...match, ...range, from, limit])
      : await this.#db.run(this.#sql.keysPage, [this.prefix, ...match, from, limit]);
    return rows.map((row: { key: string }) => decodeText(row.key));
  }

  /** This cache's expired entries, in batches (see `clearExpiredBatchSql`). */
  protected async _clearExpired(): Promise<number> {
    return clearExpiredInBatches(() => this.#db.run(this.#sql.clearExpired, [this.prefix]), this.closeSignal);
  }
}

/**
 * Every statement of the cache, built once (see `keyValueStatements` in kv.ts); `$1` is always
 * the prefix. Exported for the plan check (test/plans.server.test.ts).
 */
export function cacheStatements(table: string) {
  const entry = `prefix = $1 AND key = $2`;
  const upsert = (rows: string) => `INSERT INTO ${table} (prefix, key, value, updated_at, expires_at) ${rows}
      ON CONFLICT (prefix, key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at`;
  // Listings: $2 and $3 match the glob (see globSelection); the ranged forms add the key range
  // of its literal start as $4, $5, a range of the primary key (prefix, key).
  const match = `prefix = $1 AND ${globMatchSql('key', '$2', '$3')} AND ${LIVE}`;
  const range = inKeyRange('key', '$4', '$5');
  return {
    get: `SELECT value FROM ${table} WHERE ${entry} AND ${LIVE}`,
    // The live rows of the requested keys ($2), in no order: the store puts them in request
    // order (an index probe per key, no join, no sort; see getMany in kv.ts).
    getMany: `SELECT key, value FROM ${table} WHERE prefix = $1 AND key = ANY($2::text[]) AND ${LIVE}`,
    set: upsert(`VALUES ($1, $2, $3, statement_timestamp(), statement_timestamp() + ${msInterval('$4')})`),
    // Coalesced sets: rows are locked (and inserted) in key order, so two batches cannot
    // deadlock; the rows another transaction holds are skipped and their keys returned (the kit
    // writes those alone: no caller waits for another caller's key). "Skipped" = a row of the
    // statement's snapshot that was not locked.
    setMany: `WITH locked AS MATERIALIZED (
        SELECT key FROM ${table} WHERE prefix = $1 AND key = ANY($2::text[]) ORDER BY key FOR UPDATE SKIP LOCKED
      ), skipped AS MATERIALIZED (
        SELECT s.key FROM ${table} AS s WHERE s.prefix = $1 AND s.key = ANY($2::text[]) AND NOT EXISTS (SELECT 1 FROM locked WHERE locked.key = s.key)
      ), written AS (
        ${upsert(`SELECT $1::text, w.key, w.value, statement_timestamp(), statement_timestamp() + ${msInterval('w.ttl')}
          FROM unnest($2::text[], $3::text[], $4::bigint[]) AS w(key, value, ttl)
          WHERE NOT EXISTS (SELECT 1 FROM skipped WHERE skipped.key = w.key)
          ORDER BY w.key COLLATE "C"`)}
        RETURNING 1
      )
      SELECT key FROM skipped`,
    delete: `DELETE FROM ${table} WHERE ${entry}`,
    has: `SELECT 1 FROM ${table} WHERE ${entry} AND ${LIVE}`,
    clear: `DELETE FROM ${table} WHERE prefix = $1`,
    keys: `SELECT key FROM ${table} WHERE ${match} ORDER BY key`,
    keysInRange: `SELECT key FROM ${table} WHERE ${range} AND ${match} ORDER BY key`,
    // scan() pages: after $4 (whole cache) or $6 (within the range), $5 or $7 keys.
    keysPage: `SELECT key FROM ${table} WHERE key > $4 AND ${match} ORDER BY key LIMIT $5`,
    keysPageInRange: `SELECT key FROM ${table} WHERE ${range} AND key > $6 AND ${match} ORDER BY key LIMIT $7`,
    clearExpired: clearExpiredBatchSql(table, 'prefix = $1 AND expires_at <= statement_timestamp()'),
  };
}
