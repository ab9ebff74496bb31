import type { AcquireOptions, LockHandle, WithLockOptions } from '../contracts/locks.js';
import { StowageError } from '../errors.js';
import { assertValidDuration } from '../keys.js';
import type { Lease, LeaseDriver } from './lock-support.js';
import { callerError, type OperationSubject } from './store.js';

/**
 * What a caller holds once a lease is granted, written once for every backend: the
 * {@link StowageLockHandle} and `withLock` ({@link runWithLock}), over a {@link LeaseDriver}.
 */

/**
 * How a handle runs its calls: the provider's {@link StoreBase.call} (or `withinCall` inside
 * `withLock`), with the operation's name and key for telemetry.
 */
export type LockCallRunner = <T>(operation: string, run: () => Promise<T>, subject?: OperationSubject) => Promise<T>;

/**
 * The `LockHandle` every provider returns. Its calls go through `run`, the provider's
 * {@link StoreBase.call}, so a handle of a closed provider rejects with `E_CLOSED`.
 */
export class StowageLockHandle implements LockHandle {
  readonly key: string;
  readonly owner: string;
  readonly fence: number;
  #expiresAt: Date;
  readonly #driver: LeaseDriver;
  readonly #run: LockCallRunner;

  constructor(lease: Lease, driver: LeaseDriver, run: LockCallRunner) {
    this.key = lease.key;
    this.owner = lease.owner;
    this.fence = lease.fence;
    this.#expiresAt = lease.expiresAt;
    this.#driver = driver;
    this.#run = run;
  }

  get expiresAt(): Date {
    return this.#expiresAt;
  }

  async release(): Promise<void> {
    await this.#run('locks.release', () => this.#driver.release(this.key, this.owner), this.key);
  }

  extend(ttl: number): Promise<boolean> {
    return this.#run('locks.extend', async () => {
      assertValidDuration(ttl, 'ttl');
      const expiresAt = await this.#driver.extend(this.key, this.owner, ttl);
      if (expiresAt === null) return false;
      this.#expiresAt = expiresAt;
      return true;
    }, this.key);
  }

  isValid(): Promise<boolean> {
    return this.#run('locks.isValid', () => this.#driver.isHeld(this.key, this.owner), this.key);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.release();
    } catch (error) {
      // Disposal after close() must not mask the error that ended the `await using` block.
      if (!(error instanceof StowageError && error.code === 'E_CLOSED')) throw error;
    }
  }
}

/**
 * `withLock` for any provider: acquire (waiting up to `wait`), run `fn`, extend every
 * `extendEvery` ms, abort `fn`'s signal with `E_LOCK_LOST` when an extension fails, and
 * release at the end. `fn` never starts once the caller's signal has aborted.
 */
export async function runWithLock<T>(
  acquire: (key: string, ttl: number, options: AcquireOptions) => Promise<LockHandle | null>,
  key: string,
  fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>,
  options: WithLockOptions,
  closeSignal?: AbortSignal,
): Promise<T> {
  if (typeof fn !== 'function') throw new StowageError('E_INVALID_OPTION', 'withLock needs a function');
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', 'withLock needs options with a ttl');
  }
  const { ttl, wait = 0, owner, signal, pollInterval } = options;
  assertValidDuration(ttl, 'ttl');
  const extendEvery = options.extendEvery ?? Math.max(1, Math.floor(ttl / 3));
  assertValidDuration(extendEvery, 'extendEvery');

  const handle = await acquire(key, ttl, { owner, wait, signal, pollInterval });
  if (handle === null) {
    // Its own code: a held lock is an expected outcome, not a database timeout to retry blindly.
    throw new StowageError('E_LOCK_BUSY', `lock "${key}" is held by another owner (waited ${wait} ms)`);
  }
  if (signal?.aborted) {
    await handle.release().catch(() => undefined);
    throw callerError(signal.reason);
  }

  const lease = new AbortController();
  const outer = [signal, closeSignal].filter((candidate) => candidate !== undefined);
  const onOuterAbort = () => lease.abort(outer.find((candidate) => candidate.aborted)?.reason);
  for (const candidate of outer) candidate.addEventListener('abort', onOuterAbort, { once: true });
  if (closeSignal?.aborted) onOuterAbort();
  const lost = (cause?: unknown) =>
    new StowageError('E_LOCK_LOST', `lease on "${key}" was lost (fence ${handle.fence})`, cause === undefined ? undefined : { cause });

  let extending: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    extending = extending.then(async () => {
      if (lease.signal.aborted) return;
      try {
        if (!(await handle.extend(ttl))) lease.abort(lost());
      } catch (error) {
        lease.abort(lost(error));
      }
    });
  }, extendEvery);

  try {
    const result = await fn(lease.signal, handle);
    await extending;
    if (isLockLost(lease.signal)) throw lease.signal.reason;
    return result;
  } catch (error) {
    if (isLockLost(lease.signal)) throw lease.signal.reason;
    throw callerError(error);
  } finally {
    clearInterval(timer);
    for (const candidate of outer) candidate.removeEventListener('abort', onOuterAbort);
    await extending;
    await handle.release().catch(() => undefined);
  }
}

function isLockLost(signal: AbortSignal): boolean {
  return signal.aborted && signal.reason instanceof StowageError && signal.reason.code === 'E_LOCK_LOST';
}
