import type { Capabilities } from '@stowage/core';
import { LockProviderBase, booleanOption } from '@stowage/core/adapter';
import { POSTGRES_CAPABILITIES, PostgresDatabase } from '../database.js';
import { toStowageError } from '../errors.js';
import { postgresSettings, storeIdentity, type PostgresStoreOptions } from '../options.js';
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
  readonly #db: PostgresDatabase;
  readonly #leases: LeaseTable;

  constructor(options: PostgresLockProviderOptions | string) {
    const { options: given, settings } = postgresSettings(options);
    const table = settings.mainTable('locks');
    const wakeups = booleanOption(given.wakeups, 'wakeups', true);
    const db = new PostgresDatabase(settings, [['locks', table]]);
    const leases = new LeaseTable(db, table, { wakeups });
    super(storeIdentity('PostgresLockProvider', table, settings), leases);
    this.#db = db;
    this.#leases = leases;
    this.#db.sweep(table, { key: 'leases:expired', run: () => this.clearExpired() });
  }

  /** `wakeups` (and `changeFeed`) are true once LISTEN was seen to work; see {@link ready}. */
  get capabilities(): Capabilities {
    const listening = this.#leases.wakeups?.supported ?? false;
    return { ...POSTGRES_CAPABILITIES, wakeups: listening, changeFeed: listening };
  }

  /** Creates the table if needed, then detects LISTEN support (opens the listening connection). */
  ready(): Promise<void> {
    return this.call('locks.ready', async () => {
      await this.#db.ready();
      await this.#leases.wakeups?.start();
    });
  }

  /** The DDL this provider runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }

  protected override toStowageError(error: unknown): unknown {
    return toStowageError(error);
  }

  protected override _close(): Promise<void> {
    return this.#db.close();
  }
}
