import { createHash } from 'node:crypto';
import type { Lease, LeaseDriver } from '@stowage/core/adapter';
import type { StoreDatabase } from '../database.js';
import { encodeText } from '../key-encoding.js';
import type { TableName } from '../schema/names.js';
import { clearExpiredBatchSql, clearExpiredInBatches, dateFromMs, epochMs, msInterval, nextval } from '../sql.js';
import type { ReleaseWakeups } from '../wakeups.js';

/**
 * The kit's {@link LeaseDriver} on one lease table, shared by {@link PostgresLockProvider} and
 * the `WorkflowLock` of a snapshot store. Each operation is one statement on the server clock.
 *
 * Fences come from the table's sequence (`<table>_fence_seq`), not from the row: a sequence
 * never goes back, so rows can be deleted by `clearExpired()` while every newly granted lease
 * still gets a higher fence than any before it. `nextval` runs only for a grant, so fences
 * count grants: a release ends the lease but keeps its row, and the next grant of the key
 * updates that row and takes its fence under the row lock, once. Only acquirers that find no
 * row for the key at the same instant (its first use, or after `clearExpired()`) can take a
 * fence that none of them is then granted.
 */
export class LeaseTable implements LeaseDriver {
  readonly #db: StoreDatabase;
  readonly #sql: ReturnType<typeof leaseStatements>;
  /** The NOTIFY channel on which releases of this table are announced (payload: the stored key). */
  readonly #channel: string;
  /** The LISTEN connection that wakes waiting acquisitions (lock providers created with wake-ups). */
  readonly wakeups: ReleaseWakeups | undefined;
  readonly waitForRelease?: (key: string, signal: AbortSignal, waitingSince: number) => Promise<void>;
  readonly announcesReleases?: () => boolean;

  constructor(db: StoreDatabase, table: TableName, options: { wakeups?: boolean } = {}) {
    this.#db = db;
    this.#sql = leaseStatements(table);
    this.#channel = `stowage_lock_${createHash('sha256').update(table.key).digest('hex').slice(0, 24)}`;
    if (options.wakeups) {
      const wakeups = db.listen(this.#channel);
      this.wakeups = wakeups;
      // One release wakes one waiter of this process, the one waiting longest (see ReleaseWakeups).
      this.waitForRelease = (key, signal, waitingSince) => wakeups.waitTurn(encodeText(key), signal, waitingSince);
      this.announcesReleases = () => wakeups.supported;
    }
  }

  async acquire(key: string, owner: string, ttl: number): Promise<Lease | null> {
    const { rows } = await this.#db.run(this.#sql.acquire, [encodeText(key), owner, ttl]);
    if (rows.length === 0) return null;
    return { key, owner, fence: Number(rows[0].fence), expiresAt: dateFromMs(rows[0].expires_at)!, renewed: rows[0].renewed };
  }

  async extend(key: string, owner: string, ttl: number): Promise<Date | null> {
    const { rows } = await this.#db.run(this.#sql.extend, [encodeText(key), owner, ttl]);
    return rows.length === 0 ? null : dateFromMs(rows[0].expires_at);
  }

  async isHeld(key: string, owner: string): Promise<boolean> {
    const { rows } = await this.#db.run(this.#sql.isHeld, [encodeText(key), owner]);
    return rows.length > 0;
  }

  /**
   * Ends `owner`'s live lease and wakes waiters in the same statement (NOTIFY), unless the
   * provider hands the key to a waiter of its own (`handedOn`): other processes' waiters would
   * only try and fail.
   */
  async release(key: string, owner: string, handedOn = false): Promise<boolean> {
    const { rows } = handedOn
      ? await this.#db.run(this.#sql.releaseQuietly, [encodeText(key), owner])
      : await this.#db.run(this.#sql.release, [encodeText(key), owner, this.#channel]);
    return rows.length > 0;
  }

  async forceRelease(key: string, handedOn = false): Promise<void> {
    if (handedOn) await this.#db.run(this.#sql.forceReleaseQuietly, [encodeText(key)]);
    else await this.#db.run(this.#sql.forceRelease, [encodeText(key), this.#channel]);
  }

  /** Deletes ended and expired leases in batches (see `clearExpiredBatchSql`); returns how many. */
  clearExpired(): Promise<number> {
    return clearExpiredInBatches(() => this.#db.run(this.#sql.clearExpired));
  }
}

/** The lease statements, built once per table (see `keyValueStatements` in kv.ts). */
function leaseStatements(table: TableName) {
  const t = table.sql;
  const fence = nextval(table.derived('fence_seq'));
  const expiresAt = `statement_timestamp() + ${msInterval('$3')}`;
  const returned = `fence, ${epochMs('expires_at')} AS expires_at`;
  // The owner's own live lease is renewed and keeps its fence.
  const renewal = (row: string) => `${row}.owner = $2 AND ${row}.expires_at > statement_timestamp()`;
  // An ended lease keeps its row, with expires_at -infinity, so that the next grant of the key
  // is an update of it (see LeaseTable).
  const end = `UPDATE ${t} SET expires_at = '-infinity'`;
  return {
    // The key's row is locked first (\`current\`), so it stays as read until the statement ends:
    // whether it exists decides where the fence comes from, and whether the grant renews the
    // owner's live lease is the statement's answer \`renewed\` (an acquisition aborted in flight
    // releases a new grant, never a renewal). A key that has a row is granted by the DO UPDATE,
    // only when the lease is free, expired or the owner's own: its nextval runs once per grant
    // (an UPDATE statement would compute its new row, nextval included, before waiting for the
    // lock). Only a key without a row takes its fence in the inserted values; for the others
    // the values carry 0, never stored: their insert becomes the DO UPDATE.
    acquire: `WITH current AS (SELECT ${renewal('c')} AS renewal FROM ${t} c WHERE key = $1 FOR UPDATE)
      INSERT INTO ${t} AS l (key, owner, fence, acquired_at, expires_at)
      VALUES ($1, $2, CASE WHEN EXISTS (SELECT 1 FROM current) THEN 0 ELSE ${fence} END, statement_timestamp(), ${expiresAt})
      ON CONFLICT (key) DO UPDATE SET
        fence = CASE WHEN ${renewal('l')} THEN l.fence ELSE ${fence} END,
        acquired_at = CASE WHEN ${renewal('l')} THEN l.acquired_at ELSE statement_timestamp() END,
        owner = EXCLUDED.owner,
        expires_at = EXCLUDED.expires_at
      WHERE l.owner = EXCLUDED.owner OR l.expires_at <= statement_timestamp()
      RETURNING ${returned}, COALESCE((SELECT renewal FROM current), false) AS renewed`,
    extend: `UPDATE ${t} SET expires_at = ${expiresAt}
      WHERE key = $1 AND owner = $2 AND expires_at > statement_timestamp()
      RETURNING ${epochMs('expires_at')} AS expires_at`,
    isHeld: `SELECT 1 FROM ${t} WHERE key = $1 AND owner = $2 AND expires_at > statement_timestamp()`,
    release: `WITH released AS (${end} WHERE key = $1 AND owner = $2 AND expires_at > statement_timestamp() RETURNING key)
      SELECT pg_notify($3, key) FROM released`,
    releaseQuietly: `${end} WHERE key = $1 AND owner = $2 AND expires_at > statement_timestamp() RETURNING key`,
    forceRelease: `WITH released AS (${end} WHERE key = $1 AND expires_at > statement_timestamp() RETURNING key)
      SELECT pg_notify($2, key) FROM released`,
    forceReleaseQuietly: `${end} WHERE key = $1 AND expires_at > statement_timestamp()`,
    clearExpired: clearExpiredBatchSql(t, 'expires_at <= statement_timestamp()'),
  };
}
