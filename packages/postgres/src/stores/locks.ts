import { LockProviderBase, booleanOption } from '@stowage/core/adapter';
import { listeningHandle, resolveStore, type StoreDatabase } from '../database.js';
import type { PostgresStoreOptions } from '../options.js';
import { LeaseTable } from './leases.js';

export interface PostgresLockProviderOptions extends PostgresStoreOptions {
  /**
   * Wake waiting acquisitions with LISTEN/NOTIFY when a lock is released (default true).
   * Whether LISTEN works is detected; set false behind PgBouncer in transaction mode to skip
   * the detection and poll only.
   */
  wakeups?: boolean;
}

/**
 * {@link LockProvider} on a lease table (default `stowage_locks`): one row per lock with its
 * owner token, fence and server-clock expiry (see {@link LeaseTable}). The kit does the rest:
 * argument checks, waiting (woken by LISTEN/NOTIFY here), handles and `withLock`.
 *
 * Re-acquiring with the owner that holds the lock renews the lease and keeps its fence;
 * after the lease expired (or was released), the same owner gets a new, higher fence.
 */
export class PostgresLockProvider extends LockProviderBase {
  readonly #db: StoreDatabase;

  constructor(options: PostgresLockProviderOptions | string) {
    const { given, table, identity, db } = resolveStore('PostgresLockProvider', options, 'locks');
    const leases = new LeaseTable(db, table, { wakeups: booleanOption(given.wakeups, 'wakeups', true) });
    // ready() also detects LISTEN support; `wakeups` (and `changeFeed`) are true once it was seen to work.
    super(identity, listeningHandle(db, leases.wakeups), leases);
    this.#db = db;
    db.sweep(table, { key: 'leases:expired', run: () => this.clearExpired() });
  }

  /** The DDL this provider runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }
}
