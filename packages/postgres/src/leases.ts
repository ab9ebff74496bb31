import { createHash } from 'node:crypto';
import type { Lease } from '@stowage/core';
import type { PostgresQueryResult } from './connection.js';
import { encodeText } from './key-encoding.js';
import type { TableName } from './schema.js';
import { epochMs, dateFromMs, msInterval } from './store.js';

/**
 * The lease statements on one lock table (keys are validated by the caller and stored encoded), shared by {@link PostgresLockProvider} and the
 * `WorkflowLock` of a snapshot store. Each is one statement on the server clock.
 *
 * Fences come from a sequence (`<table>_fence_seq`), not from the row: a sequence never goes
 * back, so rows can be deleted on release, expiry and `clearExpired()` while every newly
 * granted lease still gets a higher fence than any before it, for every key.
 */
export class LeaseTable {
  readonly #query: (text: string, values?: unknown[]) => Promise<PostgresQueryResult>;
  readonly #sql: ReturnType<typeof leaseStatements>;
  /** The NOTIFY channel on which releases of this table are announced (payload: the key). */
  readonly channel: string;

  constructor(query: (text: string, values?: unknown[]) => Promise<PostgresQueryResult>, name: TableName) {
    this.#query = query;
    this.#sql = leaseStatements(name.sql, name.derived('fence_seq').replace(/'/g, "''"));
    this.channel = `stowage_lock_${createHash('sha256').update(name.key).digest('hex').slice(0, 24)}`;
  }

  /**
   * Grants the lease if the key is free, expired, or held by the same owner (a renewal that
   * keeps its fence). Under contention the loser gets `null`: ON CONFLICT never raises a
   * unique violation.
   */
  async acquire(key: string, owner: string, ttl: number): Promise<Lease | null> {
    const { rows } = await this.#query(this.#sql.acquire, [encodeText(key), owner, ttl]);
    if (rows.length === 0) return null;
    return { key, owner, fence: Number(rows[0].fence), expiresAt: dateFromMs(rows[0].expires_at)! };
  }

  /** New expiry, or `null` when `owner` no longer holds a live lease. */
  async extend(key: string, owner: string, ttl: number): Promise<Date | null> {
    const { rows } = await this.#query(this.#sql.extend, [encodeText(key), owner, ttl]);
    return rows.length === 0 ? null : dateFromMs(rows[0].expires_at);
  }

  async isHeld(key: string, owner: string): Promise<boolean> {
    const { rows } = await this.#query(this.#sql.isHeld, [encodeText(key), owner]);
    return rows.length > 0;
  }

  /** Releases `owner`'s lease and wakes waiters in the same statement. True when it was live. */
  async release(key: string, owner: string): Promise<boolean> {
    const { rows } = await this.#query(this.#sql.release, [encodeText(key), owner, this.channel]);
    return rows.length > 0 && rows[0].live === true;
  }

  /** Releases whoever holds the key and wakes waiters. */
  async forceRelease(key: string): Promise<void> {
    await this.#query(this.#sql.forceRelease, [encodeText(key), this.channel]);
  }

  /** Deletes expired leases (fences live in the sequence, so none goes back). */
  async clearExpired(): Promise<number> {
    const { rowCount } = await this.#query(this.#sql.clearExpired);
    return rowCount ?? 0;
  }
}

/** The lease statements, built once per table (see `keyValueStatements` in kv.ts). */
function leaseStatements(table: string, sequence: string) {
  return {
    // A free or expired key is granted with a new fence; the owner's own live lease keeps its fence.
    acquire: `INSERT INTO ${table} AS l (key, owner, fence, acquired_at, expires_at)
      VALUES ($1, $2, nextval('${sequence}'), now(), now() + ${msInterval('$3')})
      ON CONFLICT (key) DO UPDATE SET
        fence = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > now() THEN l.fence ELSE EXCLUDED.fence END,
        acquired_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > now() THEN l.acquired_at ELSE now() END,
        owner = EXCLUDED.owner,
        expires_at = EXCLUDED.expires_at
      WHERE l.owner = EXCLUDED.owner OR l.expires_at <= now()
      RETURNING fence, ${epochMs('expires_at')} AS expires_at`,
    extend: `UPDATE ${table} SET expires_at = now() + ${msInterval('$3')}
      WHERE key = $1 AND owner = $2 AND expires_at > now()
      RETURNING ${epochMs('expires_at')} AS expires_at`,
    isHeld: `SELECT 1 FROM ${table} WHERE key = $1 AND owner = $2 AND expires_at > now()`,
    release: `WITH released AS (
        DELETE FROM ${table} WHERE key = $1 AND owner = $2 RETURNING key, expires_at > now() AS live
      )
      SELECT live, pg_notify($3, key) FROM released`,
    forceRelease: `WITH released AS (DELETE FROM ${table} WHERE key = $1 RETURNING key)
      SELECT pg_notify($2, key) FROM released`,
    clearExpired: `DELETE FROM ${table} WHERE expires_at <= now()`,
  };
}
