import type { AcquireOptions, LockHandle, LockProvider, WithLockOptions } from '../contracts/locks.js';
import { assertValidDuration, assertValidKey, assertValidOwner } from '../keys.js';
import { StowageLockHandle, runWithLock, type LockCallRunner } from './lock-handle.js';
import { acquireWithWait, parseAcquireArgs, WaitLines, type LeaseDriver } from './lock-support.js';
import { lockWaitChannel, type LockWaitMessage, type StoreIdentity } from '../diagnostics.js';
import { StoreBase, type StoreHandle } from './store.js';

/**
 * The whole {@link LockProvider} behaviour over a {@link LeaseDriver}: argument checks,
 * waiting (woken by the driver where it can), abort, handles and `withLock`. A backend passes
 * its driver and its capabilities; nothing else.
 */
export abstract class LockProviderBase extends StoreBase implements LockProvider {
  protected readonly leases: LeaseDriver;
  readonly #lines = new WaitLines();
  /** How a handle from `acquire` runs its calls; one function for every handle. */
  readonly #run: LockCallRunner = (operation, run, subject) => this.call(operation, run, subject);

  protected constructor(identity: string | StoreIdentity, handle: StoreHandle, leases: LeaseDriver) {
    super(identity, handle, 'locks');
    this.leases = this.#lines.announcing(leases);
  }

  acquire(key: string, ttl: number, ownerOrOptions?: string | AcquireOptions): Promise<LockHandle | null> {
    return this.call('locks.acquire', () => this.#acquire(key, ttl, ownerOrOptions, this.#run), key);
  }

  extend(key: string, ttl: number, owner: string): Promise<boolean> {
    return this.call('locks.extend', async () => {
      assertValidKey(key);
      assertValidDuration(ttl, 'ttl');
      assertValidOwner(owner);
      return (await this.leases.extend(key, owner, ttl)) !== null;
    }, key);
  }

  release(key: string, owner: string): Promise<boolean> {
    return this.call('locks.release', () => {
      assertValidKey(key);
      assertValidOwner(owner);
      return this.leases.release(key, owner);
    }, key);
  }

  forceRelease(key: string): Promise<void> {
    return this.call('locks.forceRelease', () => {
      assertValidKey(key);
      return this.leases.forceRelease(key);
    }, key);
  }

  /**
   * The whole `withLock` is one call in flight: `close()` aborts `fn`'s signal (with
   * `E_CLOSED`) and waits for it to return, so the lease is still released over the open
   * connection (the handle's calls are not refused while the store drains).
   */
  withLock<T>(key: string, fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>, options: WithLockOptions): Promise<T> {
    const within: LockCallRunner = (operation, run, subject) => this.withinCall(operation, run, subject);
    return this.call(
      'locks.withLock',
      () => runWithLock((k, ttl, acquireOptions) => this.#acquire(k, ttl, acquireOptions, within), key, fn, options, this.closeSignal),
      key,
    );
  }

  async #acquire(
    key: string,
    ttl: number,
    ownerOrOptions: string | AcquireOptions | undefined,
    run: LockCallRunner,
  ): Promise<LockHandle | null> {
    const options = parseAcquireArgs(key, ttl, ownerOrOptions);
    const signals = options.signal ? [options.signal, this.closeSignal] : [this.closeSignal];
    const observed = lockWaitChannel.hasSubscribers ? { started: performance.now(), wakeups: 0 } : undefined;
    const lease = await acquireWithWait(this.leases, this.#lines, key, ttl, options, signals, observed);
    if (observed) {
      const waited = performance.now() - observed.started;
      lockWaitChannel.publish({ store: this.identity, waited, acquired: lease !== null, wakeups: observed.wakeups } satisfies LockWaitMessage);
    }
    return lease === null ? null : new StowageLockHandle(lease, this.leases, run);
  }

  /** Deletes expired leases; returns how many. Fences are unaffected. */
  clearExpired(): Promise<number> {
    return this.call('locks.clearExpired', () => this.leases.clearExpired());
  }
}
