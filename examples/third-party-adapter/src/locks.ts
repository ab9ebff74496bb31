import type { DatabaseSync } from 'node:sqlite';
import {
  Lifecycle,
  StowageLockHandle,
  acquireWithWait,
  assertValidDuration,
  assertValidKey,
  assertValidOwner,
  parseAcquireArgs,
  runWithLock,
  type AcquireOptions,
  type Capabilities,
  type Lease,
  type LeaseOperations,
  type LockHandle,
  type LockProvider,
  type WithLockOptions,
} from '@stowage/core';
import { SQLITE_CAPABILITIES } from './capabilities.ts';
import { NOW_MS, connect, type SqliteStoreOptions } from './database.ts';

/**
 * Take the lock when it is free, expired, or already ours. The row is kept after release, so
 * the fence only ever grows; re-acquiring a live lease with the same owner keeps its fence.
 */
const ACQUIRE = `
  INSERT INTO locks (key, owner, fence, expires_at) VALUES (?, ?, 1, ${NOW_MS} + ?)
  ON CONFLICT (key) DO UPDATE SET
    fence = CASE WHEN locks.owner = excluded.owner AND locks.expires_at > ${NOW_MS}
                 THEN locks.fence ELSE locks.fence + 1 END,
    owner = excluded.owner,
    expires_at = excluded.expires_at
  WHERE locks.owner IS NULL OR locks.expires_at <= ${NOW_MS} OR locks.owner = excluded.owner
  RETURNING fence, expires_at`;

export class SqliteLockProvider implements LockProvider {
  readonly capabilities: Capabilities = SQLITE_CAPABILITIES;
  readonly #db: DatabaseSync;
  readonly #ownsDatabase: boolean;
  readonly #lifecycle = new Lifecycle('sqlite lock provider');
  /** The one-statement operations core's StowageLockHandle and runWithLock build on. */
  readonly #leases: LeaseOperations = {
    extendLease: async (key, ttl, owner) => {
      this.#lifecycle.assertOpen();
      const row = this.#db
        .prepare(
          `UPDATE locks SET expires_at = ${NOW_MS} + ? WHERE key = ? AND owner = ? AND expires_at > ${NOW_MS}
           RETURNING expires_at`,
        )
        .get(ttl, key, owner) as { expires_at: number } | undefined;
      return row === undefined ? null : new Date(row.expires_at);
    },
    release: async (key, owner) => {
      this.#lifecycle.assertOpen();
      const result = this.#db
        .prepare(`UPDATE locks SET owner = NULL, expires_at = 0 WHERE key = ? AND owner = ? AND expires_at > ${NOW_MS}`)
        .run(key, owner);
      return result.changes > 0;
    },
    isHeld: async (key, owner) => {
      this.#lifecycle.assertOpen();
      return (
        this.#db.prepare(`SELECT 1 FROM locks WHERE key = ? AND owner = ? AND expires_at > ${NOW_MS}`).get(key, owner) !==
        undefined
      );
    },
  };

  constructor(options: SqliteStoreOptions) {
    const { db, owned } = connect(options);
    this.#db = db;
    this.#ownsDatabase = owned;
  }

  async acquire(key: string, ttl: number, ownerOrOptions?: string | AcquireOptions): Promise<LockHandle | null> {
    this.#lifecycle.assertOpen();
    const { owner, ...waiting } = parseAcquireArgs(key, ttl, ownerOrOptions);
    const tryOnce = async (): Promise<Lease | null> => {
      this.#lifecycle.assertOpen();
      const row = this.#db.prepare(ACQUIRE).get(key, owner, ttl) as { fence: number; expires_at: number } | undefined;
      return row === undefined ? null : { key, owner, fence: row.fence, expiresAt: new Date(row.expires_at) };
    };
    // No wake-ups from SQLite: waiting acquisitions poll (capabilities.wakeups is false).
    const lease = await acquireWithWait(tryOnce, waiting);
    return lease === null ? null : new StowageLockHandle(lease, this.#leases);
  }

  async extend(key: string, ttl: number, owner: string): Promise<boolean> {
    assertValidKey(key);
    assertValidDuration(ttl);
    assertValidOwner(owner);
    return (await this.#leases.extendLease(key, ttl, owner)) !== null;
  }

  async release(key: string, owner: string): Promise<boolean> {
    assertValidKey(key);
    assertValidOwner(owner);
    return this.#leases.release(key, owner);
  }

  async forceRelease(key: string): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    this.#db.prepare('UPDATE locks SET owner = NULL, expires_at = 0 WHERE key = ?').run(key);
  }

  withLock<T>(key: string, fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>, options: WithLockOptions): Promise<T> {
    return runWithLock((k, ttl, acquireOptions) => this.acquire(k, ttl, acquireOptions), key, fn, options);
  }

  /** Idempotent. Closes the database only if this provider opened it. */
  close(): Promise<void> {
    return this.#lifecycle.close(async () => {
      if (this.#ownsDatabase) this.#db.close();
    });
  }
}
