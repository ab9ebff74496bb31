import type { Capabilities } from '../capabilities.js';
import type { Clock } from '../clock.js';
import type { AcquireOptions, LockHandle, LockProvider, WithLockOptions } from '../contracts/locks.js';
import { assertValidDuration, assertValidKey } from '../keys.js';
import { Lifecycle } from '../lifecycle.js';
import {
  StowageLockHandle,
  acquireWithWait,
  assertValidOwner,
  parseAcquireArgs,
  runWithLock,
  type LeaseOperations,
} from '../lock-support.js';
import { MEMORY_CAPABILITIES, resolveMemoryOptions, type MemoryOptions, type MemoryStorage } from './storage.js';

export type MemoryLockProviderOptions = MemoryOptions;

/**
 * Leases with fencing tokens in process memory. Waiting acquisitions are woken at once by a
 * release on the same storage, and otherwise poll (for expiry).
 */
export class MemoryLockProvider implements LockProvider {
  readonly capabilities: Capabilities = MEMORY_CAPABILITIES;
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;
  readonly #lifecycle = new Lifecycle('MemoryLockProvider');
  /** What handles call back into; every operation checks that this provider is still open. */
  readonly #leaseOperations: LeaseOperations = {
    extendLease: async (key, ttl, owner) => {
      this.#lifecycle.assertOpen();
      return this.#storage.locks.extend(key, owner, ttl, this.#clock.now());
    },
    release: async (key, owner) => {
      this.#lifecycle.assertOpen();
      return this.#storage.locks.release(key, owner, this.#clock.now());
    },
    isHeld: async (key, owner) => {
      this.#lifecycle.assertOpen();
      return this.#storage.locks.isHeld(key, owner, this.#clock.now());
    },
  };

  constructor(options?: MemoryLockProviderOptions) {
    const { storage, clock } = resolveMemoryOptions(options);
    this.#storage = storage;
    this.#clock = clock;
  }

  async acquire(key: string, ttl: number, ownerOrOptions?: string | AcquireOptions): Promise<LockHandle | null> {
    this.#lifecycle.assertOpen();
    const options = parseAcquireArgs(key, ttl, ownerOrOptions);
    const lease = await acquireWithWait(
      async () => {
        this.#lifecycle.assertOpen();
        return this.#storage.locks.acquire(key, options.owner, ttl, this.#clock.now());
      },
      options,
      (signal) => this.#storage.locks.waitForRelease(key, signal),
    );
    return lease === null ? null : new StowageLockHandle(lease, this.#leaseOperations);
  }

  async extend(key: string, ttl: number, owner: string): Promise<boolean> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertValidDuration(ttl, 'ttl');
    assertValidOwner(owner);
    return (await this.#leaseOperations.extendLease(key, ttl, owner)) !== null;
  }

  async release(key: string, owner: string): Promise<boolean> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertValidOwner(owner);
    return this.#leaseOperations.release(key, owner);
  }

  async forceRelease(key: string): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    this.#storage.locks.forceRelease(key);
  }

  async withLock<T>(
    key: string,
    fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>,
    options: WithLockOptions,
  ): Promise<T> {
    this.#lifecycle.assertOpen();
    return runWithLock((k, t, o) => this.acquire(k, t, o), key, fn, options);
  }

  close(): Promise<void> {
    return this.#lifecycle.close();
  }
}
