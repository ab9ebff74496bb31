import { IdempotencyStoreBase, type IdempotencyStoreBaseOptions, type RunClaim, type StoredReservation, type StoredResult } from '@stowage/core/adapter';
import { resolveStore, type StoreDatabase } from '../database.js';
import { decodeText, encodeText } from '../key-encoding.js';
import type { PostgresStoreOptions } from '../options.js';
import { LIVE, clearExpiredBatchSql, clearExpiredInBatches, epochMs, msInterval } from '../sql.js';

export interface PostgresIdempotencyStoreOptions extends PostgresStoreOptions, IdempotencyStoreBaseOptions {}

/**
 * {@link IdempotencyStore} on one table (default `stowage_idempotency`). A row is either an
 * in-flight claim (`status = 'in-flight'`, with the claimant's token and a server-clock
 * expiry) or a completed result. `reserve` is one upsert that always returns the row as it
 * stands after the statement, so exactly one concurrent caller finds its own token in it.
 */
export class PostgresIdempotencyStore extends IdempotencyStoreBase {
  readonly #db: StoreDatabase;
  readonly #sql: ReturnType<typeof idempotencyStatements>;
  /** The advisory lock space of this table's `runOnce` claims (see `_claimRun`). */
  readonly #runLockSpace: string;

  constructor(options: PostgresIdempotencyStoreOptions | string) {
    const { given, table, identity, db } = resolveStore('PostgresIdempotencyStore', options, 'idempotency');
    super(identity, db, { codec: given.codec });
    this.#db = db;
    this.#sql = idempotencyStatements(table.sql);
    this.#runLockSpace = `stowage runOnce ${table.sql}`;
    db.sweep(table, { key: 'idempotency:expired', run: () => this.clearExpired() });
  }

  /** The DDL this store runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }

  protected override _bind(transaction: object): this {
    return new PostgresIdempotencyStore(this.#db.viewOptions(transaction)) as this;
  }

  /** Deletes expired results and abandoned claims, in batches (see `clearExpiredBatchSql`); returns how many. */
  clearExpired(): Promise<number> {
    return this.call('idempotency.clearExpired', () => clearExpiredInBatches(() => this.#db.run(this.#sql.clearExpired), this.closeSignal));
  }

  protected async _get(key: string): Promise<StoredResult | null> {
    const { rows } = await this.#db.run(this.#sql.get, [encodeText(key)]);
    return rows.length === 0 ? null : toResult(rows[0]);
  }

  protected async _set(key: string, text: string, ttl: number | undefined): Promise<void> {
    await this.#db.run(this.#sql.set, [encodeText(key), encodeText(text), ttl ?? null]);
  }

  protected async _delete(key: string): Promise<void> {
    await this.#db.run(this.#sql.delete, [encodeText(key)]);
  }

  protected async _reserve(key: string, token: string, ttl: number): Promise<StoredReservation> {
    const { rows } = await this.#db.run(this.#sql.reserve, [encodeText(key), token, ttl]);
    const row = rows[0];
    if (row.acquired === true) return { status: 'acquired' };
    if (row.status === 'in-flight') return { status: 'in-flight', expiresAt: Math.floor(row.expires_at) };
    return { status: 'completed', ...toResult(row) };
  }

  protected async _complete(key: string, token: string, text: string, ttl: number | undefined): Promise<boolean> {
    const { rowCount } = await this.#db.run(this.#sql.complete, [encodeText(key), token, encodeText(text), ttl ?? null]);
    return rowCount === 1;
  }

  /**
   * `runOnce`'s claim of `key`: a transaction-scoped advisory lock, tried without waiting. A
   * runner that found the key's row locked by another transaction would wait for it holding
   * its pooled connection; many of them take every connection of the pool, and the running
   * `fn`'s own calls on that pool then wait forever. The same statement reads a completed
   * result, so the runners that come after the commit need no claim of their own. Hash
   * collisions only make a runner pause.
   */
  protected override async _claimRun(key: string): Promise<RunClaim> {
    const { rows } = await this.#db.run(this.#sql.claimRun, [this.#runLockSpace, encodeText(key)]);
    const row = rows[0];
    if (row.value !== null) return { status: 'completed', ...toResult(row) };
    return { status: row.claimed === true ? 'claimed' : 'busy' };
  }

  protected async _fail(key: string, token: string): Promise<boolean> {
    const { rowCount } = await this.#db.run(this.#sql.fail, [encodeText(key), token]);
    return rowCount === 1;
  }
}

function toResult(row: { value: string; expires_at: number | null }): StoredResult {
  return { text: decodeText(row.value), expiresAt: row.expires_at === null ? null : Math.floor(row.expires_at) };
}

/** The statements of an idempotency table, built once (see `keyValueStatements` in kv.ts). */
export function idempotencyStatements(table: string) {
  const expired = `i.expires_at <= statement_timestamp()`;
  return {
    get: `SELECT value, ${epochMs('expires_at')} AS expires_at FROM ${table}
      WHERE key = $1 AND status = 'completed' AND ${LIVE}`,
    set: `INSERT INTO ${table} (key, status, token, value, updated_at, expires_at)
      VALUES ($1, 'completed', NULL, $2, statement_timestamp(), statement_timestamp() + ${msInterval('$3')})
      ON CONFLICT (key) DO UPDATE SET status = 'completed', token = NULL, value = EXCLUDED.value,
        updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at`,
    delete: `DELETE FROM ${table} WHERE key = $1`,
    // Inserts a claim, or replaces an expired row with one; otherwise leaves the row as it is
    // (an update to itself, which takes the row lock and so returns the latest committed
    // version even under contention).
    reserve: `INSERT INTO ${table} AS i (key, status, token, value, updated_at, expires_at)
      VALUES ($1, 'in-flight', $2, NULL, statement_timestamp(), statement_timestamp() + ${msInterval('$3')})
      ON CONFLICT (key) DO UPDATE SET
        status = CASE WHEN ${expired} THEN EXCLUDED.status ELSE i.status END,
        token = CASE WHEN ${expired} THEN EXCLUDED.token ELSE i.token END,
        value = CASE WHEN ${expired} THEN NULL ELSE i.value END,
        updated_at = CASE WHEN ${expired} THEN EXCLUDED.updated_at ELSE i.updated_at END,
        expires_at = CASE WHEN ${expired} THEN EXCLUDED.expires_at ELSE i.expires_at END
      RETURNING status, token IS NOT DISTINCT FROM $2 AS acquired, value, ${epochMs('expires_at')} AS expires_at`,
    complete: `UPDATE ${table} SET status = 'completed', token = NULL, value = $3, updated_at = statement_timestamp(),
        expires_at = statement_timestamp() + ${msInterval('$4')}
      WHERE key = $1 AND token = $2 AND status = 'in-flight'`,
    fail: `DELETE FROM ${table} WHERE key = $1 AND token = $2 AND status = 'in-flight'`,
    claimRun: `SELECT pg_try_advisory_xact_lock(hashtext($1), hashtext($2)) AS claimed, r.value, ${epochMs('r.expires_at')} AS expires_at
      FROM (SELECT 1) AS one LEFT JOIN ${table} AS r ON r.key = $2 AND r.status = 'completed' AND ${LIVE}`,
    clearExpired: clearExpiredBatchSql(table, 'expires_at <= statement_timestamp()'),
  };
}
