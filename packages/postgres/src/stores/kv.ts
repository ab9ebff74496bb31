import type { KeyValueEntry, KeyValueEntryInfo } from '@stowage/core';
import { KeyValueStoreBase, RUN_ALONE, type Glob, type KeyValueStoreBaseOptions, type KeyValueWriteOp } from '@stowage/core/adapter';
import { plannedEachCall } from '../connection/prepared-statements.js';
import { resolveStore, type StoreDatabase } from '../database.js';
import { decodeText, encodeText, valuesInOrder } from '../key-encoding.js';
import type { PostgresStoreOptions } from '../options.js';
import type { TableName } from '../schema/names.js';
import { globMatchSql, globSelection } from '../glob.js';
import {
  LIVE,
  NOW_MS,
  clearExpiredBatchSql,
  clearExpiredInBatches,
  dateFromMs,
  epochMs,
  inKeyRange,
  keyRange,
  msInterval,
  nextval,
  timestampFromMs,
} from '../sql.js';

/** The connection and table options of every store, and `coalesce` (default true: concurrent point calls of one tick go out as one statement). */
export interface PostgresKeyValueStoreOptions extends PostgresStoreOptions, KeyValueStoreBaseOptions {}

/**
 * {@link KeyValueStore} on one table (default `awaitly_workflow_state`). Values are `text`,
 * with the keys' escape for the U+0000 that `text` cannot hold (see key-encoding.ts), so every
 * string round-trips and ordinary values read in SQL as they were written. Every write takes
 * its version from the table's sequence, so a version is never reused for a key. Each
 * operation is one statement (`clearExpired()`: one per batch); concurrent `get`, `exists`,
 * `set` and `delete` calls of one tick go out as one statement (the kit's coalescing, on
 * `_getMany`, `_existsMany`, `_setMany` and `_deleteEach`).
 */
export class PostgresKeyValueStore extends KeyValueStoreBase {
  readonly #db: StoreDatabase;
  readonly #sql: ReturnType<typeof keyValueStatements>;

  constructor(options: PostgresKeyValueStoreOptions | string) {
    const { given, table, identity, db } = resolveStore('PostgresKeyValueStore', options, 'kv');
    super(identity, db, { coalesce: given.coalesce });
    this.#db = db;
    this.#sql = keyValueStatements(table);
    db.sweep(table, { key: 'kv:expired', run: () => this.clearExpired() });
  }

  /** The DDL this store runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }

  protected override _bind(transaction: object): this {
    return new PostgresKeyValueStore(this.#db.viewOptions(transaction)) as this;
  }

  protected override async _get(key: string): Promise<string | null> {
    const { rows } = await this.#db.run(this.#sql.get, [encodeText(key)]);
    return rows.length === 0 ? null : decodeText(rows[0].value);
  }

  protected async _getMany(keys: readonly string[]): Promise<(string | null)[]> {
    const stored = keys.map(encodeText);
    const { rows } = await this.#db.run(this.#sql.getMany, [stored]);
    return valuesInOrder(stored, rows);
  }

  protected override async _set(key: string, value: string, ttl: number | undefined): Promise<void> {
    await this.#db.run(this.#sql.set, [encodeText(key), encodeText(value), ttl ?? null]);
  }

  protected async _setMany(writes: readonly KeyValueWriteOp[]): Promise<void> {
    await this.#db.run(this.#sql.setMany, writeColumns(writes));
  }

  /** Concurrent `set` calls, coalesced by the kit: one statement, which skips the rows another transaction holds. */
  protected override async _setEach(writes: readonly KeyValueWriteOp[]): Promise<ReadonlySet<string>> {
    const { rows } = await this.#db.run(this.#sql.setEach, writeColumns(writes));
    return new Set(rows.map((row: { key: string }) => decodeText(row.key)));
  }

  protected override async _delete(key: string): Promise<boolean> {
    const { rows } = await this.#db.run(this.#sql.delete, [encodeText(key)]);
    return rows.length > 0 && rows[0].live === true;
  }

  protected async _deleteMany(keys: readonly string[]): Promise<number> {
    const { rows } = await this.#db.run(this.#sql.deleteMany, [keys.map(encodeText)]);
    return rows[0].count;
  }

  /** Concurrent `delete` calls, coalesced by the kit: one statement that tells which keys were live. */
  protected override async _deleteEach(keys: readonly string[]): Promise<(boolean | typeof RUN_ALONE)[]> {
    const stored = keys.map(encodeText);
    const { rows } = await this.#db.run(this.#sql.deleteEach, [stored]);
    const outcomes = new Map(rows.map((row: { key: string; skipped: boolean }) => [row.key, row.skipped ? RUN_ALONE : true] as const));
    return stored.map((key) => outcomes.get(key) ?? false);
  }

  protected override async _exists(key: string): Promise<boolean> {
    const { rows } = await this.#db.run(this.#sql.exists, [encodeText(key)]);
    return rows.length > 0;
  }

  /** Concurrent `exists` calls, coalesced by the kit: one read of all their keys. */
  protected override async _existsMany(keys: readonly string[]): Promise<boolean[]> {
    const stored = keys.map(encodeText);
    const { rows } = await this.#db.run(this.#sql.existsMany, [stored]);
    const live = new Set(rows.map((row: { key: string }) => row.key));
    return stored.map((key) => live.has(key));
  }

  protected async _getEntry(key: string): Promise<KeyValueEntry | null> {
    const { rows } = await this.#db.run(this.#sql.getEntry, [encodeText(key)]);
    return rows.length === 0 ? null : { ...toInfo(rows[0]), value: decodeText(rows[0].value) };
  }

  /** In key order from `ORDER BY key` (stored keys sort as the keys do). */
  protected override async _keys(glob: Glob): Promise<string[]> {
    const { match, range } = globSelection(glob);
    const { rows } = range ? await this.#db.run(this.#sql.keysInRange, [...match, ...range]) : await this.#db.run(this.#sql.keys, match);
    return rows.map((row: { key: string }) => decodeText(row.key));
  }

  protected async _entries(glob: Glob): Promise<KeyValueEntryInfo[]> {
    const { match, range } = globSelection(glob);
    const { rows } = range
      ? await this.#db.run(this.#sql.entriesInRange, [...match, ...range])
      : await this.#db.run(this.#sql.entries, match);
    return rows.map(toInfo);
  }

  /** One page of `scan()`: a range of the primary key after `after`, so no page costs more than its rows. */
  protected override async _recentEntries(
    prefix: string,
    after: { updatedAt: Date; key: string } | null,
    limit: number,
  ): Promise<KeyValueEntryInfo[]> {
    const { lo, hi } = keyRange(encodeText(prefix));
    const { rows } =
      after === null
        ? await this.#db.run(this.#sql.recent, [lo, hi, limit])
        : await this.#db.run(this.#sql.recentAfter, [lo, hi, limit, after.updatedAt.getTime(), encodeText(after.key)]);
    return rows.map(toInfo);
  }

  protected override async _entriesPage(glob: Glob, after: string | null, limit: number): Promise<KeyValueEntryInfo[]> {
    const { match, range } = globSelection(glob);
    // Keys are never empty, so '' starts before the first.
    const from = after === null ? '' : encodeText(after);
    const { rows } = range
      ? await this.#db.run(this.#sql.entriesPageInRange, [...match, ...range, from, limit])
      : await this.#db.run(this.#sql.entriesPage, [...match, from, limit]);
    return rows.map(toInfo);
  }

  protected async _compareAndSet(key: string, value: string, expectedVersion: number | null, ttl: number | undefined): Promise<number | null> {
    const values = [encodeText(key), encodeText(value), ttl ?? null];
    const { rows } =
      expectedVersion === null
        ? await this.#db.run(this.#sql.create, values)
        : await this.#db.run(this.#sql.update, [...values, expectedVersion]);
    return rows.length === 0 ? null : Number(rows[0].version);
  }

  /** In batches of `CLEAR_EXPIRED_BATCH` rows, each its own statement (see `clearExpiredBatchSql`). */
  protected async _clearExpired(): Promise<number> {
    return clearExpiredInBatches(() => this.#db.run(this.#sql.clearExpired), this.closeSignal);
  }
}

/**
 * Every statement of a store, built once: the same string on every call is found in the
 * prepared-statement cache without hashing a new one (see `PostgresConnection.query`).
 * Exported for the plan check (test/plans.server.test.ts), which explains every one of them.
 *
 * A write's version is `nextval` of the table's sequence, taken in the `DO UPDATE` (after the
 * row lock) when the key exists, so a key's versions grow in commit order and none is ever
 * used twice, also after delete or expiry. Keys sort in `COLLATE "C"` as the kit orders them.
 */
export function keyValueStatements(table: TableName) {
  const t = table.sql;
  const version = nextval(table.derived('version_seq'));
  const times = `${epochMs('updated_at')} AS updated_at, ${epochMs('expires_at')} AS expires_at`;
  const entry = `key, version, ${times}`;
  const upsert = (rows: string) => `INSERT INTO ${t} AS e (key, value, version, updated_at, expires_at) ${rows}
      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = ${version},
        updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at`;
  // Listings: $1 and $2 match the glob (see globSelection); the ranged forms add the key range
  // of the glob's literal start as $3, $4, which the primary key serves on every execution.
  const match = `${globMatchSql('key', '$1', '$2')} AND ${LIVE}`;
  const range = inKeyRange('key', '$3', '$4');
  // Locks the rows in key order first (as setMany), then tells each removed key's liveness.
  const removeLocked = `WITH locked AS (
        SELECT key FROM ${t} WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE
      ), removed AS (
        DELETE FROM ${t} AS e USING locked WHERE e.key = locked.key RETURNING e.key, ${LIVE} AS live
      )`;
  // The coalesced forms (setEach, deleteEach) lock the rows they can in key order and skip the
  // ones another transaction holds: the kit runs those calls alone, so no caller waits for a
  // key that is not its own. "Skipped" = a row of the statement's snapshot that was not locked.
  const lockFree = `locked AS MATERIALIZED (
        SELECT key FROM ${t} WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE SKIP LOCKED
      ), skipped AS MATERIALIZED (
        SELECT s.key FROM ${t} AS s WHERE s.key = ANY($1::text[]) AND NOT EXISTS (SELECT 1 FROM locked WHERE locked.key = s.key)
      )`;
  return {
    get: `SELECT value FROM ${t} WHERE key = $1 AND ${LIVE}`,
    // The live rows of the requested keys, in no order: the store puts them in request order.
    // An index probe per key, with no join and no sort in the server (a unnest … WITH ORDINALITY
    // LEFT JOIN … ORDER BY cost getMany(1,000) a fifth of its time against this statement).
    getMany: `SELECT key, value FROM ${t} WHERE key = ANY($1::text[]) AND ${LIVE}`,
    set: upsert(`VALUES ($1, $2, ${version}, ${NOW_MS}, statement_timestamp() + ${msInterval('$3')})`),
    // Rows are inserted (and existing ones locked) in key order: two batches over the same keys cannot deadlock.
    setMany: upsert(`SELECT w.key, w.value, ${version}, ${NOW_MS}, statement_timestamp() + ${msInterval('w.ttl')}
      FROM unnest($1::text[], $2::text[], $3::bigint[]) AS w(key, value, ttl)
      ORDER BY w.key COLLATE "C"`),
    // setMany, but the rows another transaction holds are skipped: returns their keys (see lockFree).
    setEach: `WITH ${lockFree}, written AS (
        ${upsert(`SELECT w.key, w.value, ${version}, ${NOW_MS}, statement_timestamp() + ${msInterval('w.ttl')}
          FROM unnest($1::text[], $2::text[], $3::bigint[]) AS w(key, value, ttl)
          WHERE NOT EXISTS (SELECT 1 FROM skipped WHERE skipped.key = w.key)
          ORDER BY w.key COLLATE "C"`)}
        RETURNING 1
      )
      SELECT key FROM skipped`,
    delete: `DELETE FROM ${t} WHERE key = $1 RETURNING ${LIVE} AS live`,
    deleteMany: `${removeLocked}
      SELECT count(*) FILTER (WHERE live)::int AS count FROM removed`,
    // The keys (of $1) that were live when removed, and those skipped (see lockFree).
    deleteEach: `WITH ${lockFree}, removed AS (
        DELETE FROM ${t} AS e USING locked WHERE e.key = locked.key RETURNING e.key, ${LIVE} AS live
      )
      SELECT key, false AS skipped FROM removed WHERE live
      UNION ALL SELECT key, true FROM skipped`,
    exists: `SELECT 1 FROM ${t} WHERE key = $1 AND ${LIVE}`,
    // The live keys among the requested ones (see getMany).
    existsMany: `SELECT key FROM ${t} WHERE key = ANY($1::text[]) AND ${LIVE}`,
    getEntry: `SELECT key, value, version, ${times} FROM ${t} WHERE key = $1 AND ${LIVE}`,
    keys: `SELECT key FROM ${t} WHERE ${match} ORDER BY key`,
    keysInRange: `SELECT key FROM ${t} WHERE ${range} AND ${match} ORDER BY key`,
    entries: `SELECT ${entry} FROM ${t} WHERE ${match} ORDER BY key`,
    entriesInRange: `SELECT ${entry} FROM ${t} WHERE ${range} AND ${match} ORDER BY key`,
    // scan() pages: after $3 (whole table) or $5 (within the range), $4 or $6 rows.
    entriesPage: `SELECT ${entry} FROM ${t} WHERE key > $3 AND ${match} ORDER BY key LIMIT $4`,
    entriesPageInRange: `SELECT ${entry} FROM ${t} WHERE ${range} AND key > $5 AND ${match} ORDER BY key LIMIT $6`,
    // compareAndSet(…, null): only if absent or expired (an expired row is replaced).
    create: `${upsert(`VALUES ($1, $2, ${version}, ${NOW_MS}, statement_timestamp() + ${msInterval('$3')})`)}
      WHERE e.expires_at IS NOT NULL AND e.expires_at <= statement_timestamp()
      RETURNING version`,
    // compareAndSet(…, version): only the incarnation that has this version.
    update: `UPDATE ${t} SET value = $2, version = ${version}, updated_at = ${NOW_MS}, expires_at = statement_timestamp() + ${msInterval('$3')}
      WHERE key = $1 AND version = $4 AND ${LIVE}
      RETURNING version`,
    clearExpired: clearExpiredBatchSql(t, 'expires_at <= statement_timestamp()'),
    // recentEntries (createStatePersistence's list): newest first within the key range of a
    // prefix; the next page starts after ($4, $5). The prefix is part of the key, so which plan
    // is best depends on the range: the (updated_at DESC, key) index when it holds most of the
    // table (a table of workflow state is nearly all one prefix), the primary key and a sort of
    // its few rows when it is narrow. A generic plan would pick one for every range (the primary
    // key: pages read the whole prefix once a listing's sixth page made it generic), so these
    // are planned for each call's range (with a generic plan, 300,000 rows under one prefix
    // took 3 ms a page until the server settled on it, then 90-570 ms).
    // ORDER BY names the table's column (e.updated_at): the output column of that name is epoch ms, which no index has.
    recent: plannedEachCall(`SELECT ${entry} FROM ${t} AS e WHERE key >= $1 AND key < $2 AND ${LIVE} ORDER BY e.updated_at DESC, e.key LIMIT $3`),
    recentAfter: plannedEachCall(`SELECT ${entry} FROM ${t} AS e WHERE key >= $1 AND key < $2 AND ${LIVE}
      AND e.updated_at <= ${timestampFromMs('$4')} AND (e.updated_at < ${timestampFromMs('$4')} OR e.key > $5)
      ORDER BY e.updated_at DESC, e.key LIMIT $3`),
  };
}

/** The statement parameters of a batch of writes: keys, values and ttls, in their stored forms. */
function writeColumns(writes: readonly KeyValueWriteOp[]): unknown[] {
  return [writes.map((write) => encodeText(write.key)), writes.map((write) => encodeText(write.value)), writes.map((write) => write.ttl ?? null)];
}

function toInfo(row: { key: string; version: string | number; updated_at: number; expires_at: number | null }): KeyValueEntryInfo {
  return { key: decodeText(row.key), version: Number(row.version), updatedAt: dateFromMs(row.updated_at)!, expiresAt: dateFromMs(row.expires_at) };
}
