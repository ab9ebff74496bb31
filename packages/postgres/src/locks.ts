import {
  StowageError,
  StowageLockHandle,
  acquireWithWait,
  assertValidDuration,
  assertValidOwner,
  parseAcquireArgs,
  runWithLock,
  type AcquireOptions,
  type Capabilities,
  type LeaseOperations,
  type LockHandle,
  type LockProvider,
  type WithLockOptions,
} from '@stowage/core';
import { LeaseTable } from './leases.js';
import { DEFAULT_TABLE_NAMES } from './schema.js';
import { storedKey } from './key-encoding.js';
import { POSTGRES_CAPABILITIES, PostgresStoreBase, storeSetup, type PostgresStoreOptions } from './store.js';
import { ReleaseWakeups } from './wakeups.js';

export interface PostgresLockProviderOptions extends PostgresStoreOptions {
  /**
   * Wake waiting acquisitions with LISTEN/NOTIFY when a lock is released (default true).
   * Whether LISTEN works is detected; set false behind PgBouncer in transaction mode to skip
   * the detection and poll only.
   */
  wakeups?: boolean;
}

/**
 * {@link LockProvider} on a lease table: one row per held lock with its owner token, fence
 * and server-clock expiry. Fences come from a sequence, so they never go back.
 *
 * Re-acquiring with the owner that holds the lock renews the lease and keeps its fence;
 * after the lease expired (or was released), the same owner gets a new, higher fence.
 */
export class PostgresLockProvider extends PostgresStoreBase implements LockProvider {
  readonly #leases: LeaseTable;
  readonly #wakeups: ReleaseWakeups | undefined;
  readonly #operations: LeaseOperations;

  constructor(options: PostgresLockProviderOptions | string) {
    const setup = storeSetup('locks', options, DEFAULT_TABLE_NAMES.locks);
    super('PostgresLockProvider', setup);
    this.#leases = new LeaseTable((text, values) => this.run(text, values), setup.tables[0]![1]);
    const wakeups = typeof options === 'object' ? (options.wakeups ?? true) : true;
    if (typeof wakeups !== 'boolean') throw new StowageError('E_INVALID_OPTION', 'wakeups must be a boolean');
    this.#wakeups = wakeups ? new ReleaseWakeups(this.connection.pool, this.#leases.channel) : undefined;
    // What handles call; after close() each rejects with E_CLOSED (run() checks).
    this.#operations = {
      extendLease: (key, ttl, owner) => this.#leases.extend(key, owner, ttl),
      release: (key, owner) => this.#leases.release(key, owner),
      isHeld: (key, owner) => this.#leases.isHeld(key, owner),
    };
    if (typeof options === 'object') this.startCleanup(options.cleanupInterval, () => this.clearExpired());
  }

  /** `wakeups` (and `changeFeed`) are true once LISTEN was seen to work; see {@link ready}. */
  override get capabilities(): Capabilities {
    const listening = this.#wakeups?.supported ?? false;
    return { ...POSTGRES_CAPABILITIES, wakeups: listening, changeFeed: listening };
  }

  /** Creates the table on first use, then detects LISTEN support (opens the listening connection). */
  override async ready(): Promise<void> {
    await super.ready();
    await this.#wakeups?.start();
  }

  async acquire(key: string, ttl: number, ownerOrOptions?: string | AcquireOptions): Promise<LockHandle | null> {
    this.assertOpen();
    const options = parseAcquireArgs(key, ttl, ownerOrOptions);
    storedKey(key);
    const wakeups = this.#wakeups;
    const lease = await acquireWithWait(
      () => this.#leases.acquire(key, options.owner, ttl),
      options,
      wakeups && options.wait > 0 ? (signal) => wakeups.wait(storedKey(key), signal) : undefined,
    );
    return lease === null ? null : new StowageLockHandle(lease, this.#operations);
  }

  async extend(key: string, ttl: number, owner: string): Promise<boolean> {
    this.assertOpen();
    storedKey(key);
    assertValidDuration(ttl, 'ttl');
    assertValidOwner(owner);
    return (await this.#leases.extend(key, owner, ttl)) !== null;
  }

  async release(key: string, owner: string): Promise<boolean> {
    this.assertOpen();
    storedKey(key);
    assertValidOwner(owner);
    return this.#leases.release(key, owner);
  }

  async forceRelease(key: string): Promise<void> {
    this.assertOpen();
    storedKey(key);
    await this.#leases.forceRelease(key);
  }

  withLock<T>(key: string, fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>, options: WithLockOptions): Promise<T> {
    return runWithLock((k, ttl, acquireOptions) => this.acquire(k, ttl, acquireOptions), key, fn, options);
  }

  /** Deletes expired leases; returns how many. Fences are unaffected. */
  async clearExpired(): Promise<number> {
    this.assertOpen();
    return this.#leases.clearExpired();
  }

  protected override async releaseResources(): Promise<void> {
    await this.#wakeups?.close();
  }
}
