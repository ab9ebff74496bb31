import { randomUUID } from 'node:crypto';
import { sleep } from './clock.js';
import { StowageError } from './errors.js';
import { assertValidDuration, assertValidKey, describeType } from './keys.js';
import type { AcquireOptions, LockHandle, WithLockOptions } from './contracts/locks.js';

/**
 * Building blocks every lock adapter shares: option parsing, the waiting loop, the handle
 * object and `withLock`. An adapter supplies only the one-statement operations.
 */
export interface LeaseOperations {
  /** Sets the lease of a still-held lock to `ttl` ms from now; the new expiry, or `null` when not held. */
  extendLease(key: string, ttl: number, owner: string): Promise<Date | null>;
  release(key: string, owner: string): Promise<boolean>;
  isHeld(key: string, owner: string): Promise<boolean>;
}

export interface Lease {
  key: string;
  owner: string;
  fence: number;
  expiresAt: Date;
}

export const DEFAULT_POLL_INTERVAL = 50;

export function newOwnerToken(): string {
  return randomUUID();
}

export interface ParsedAcquireOptions {
  owner: string;
  wait: number;
  signal: AbortSignal | undefined;
  pollInterval: number;
}

/** Validates `acquire(key, ttl, ownerOrOptions)` arguments; throws typed errors. */
export function parseAcquireArgs(key: unknown, ttl: unknown, ownerOrOptions: unknown): ParsedAcquireOptions {
  assertValidKey(key);
  assertValidDuration(ttl, 'ttl');
  const options: AcquireOptions =
    typeof ownerOrOptions === 'string' ? { owner: ownerOrOptions } : ((ownerOrOptions ?? {}) as AcquireOptions);
  if (typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `acquire options must be a string or an object, got ${describeType(options)}`);
  }
  const owner = options.owner ?? newOwnerToken();
  assertValidOwner(owner);
  const wait = options.wait ?? 0;
  if (typeof wait !== 'number' || !Number.isFinite(wait) || wait < 0) {
    throw new StowageError('E_INVALID_OPTION', 'wait must be a non-negative number of milliseconds');
  }
  const pollInterval = options.pollInterval ?? DEFAULT_POLL_INTERVAL;
  assertValidDuration(pollInterval, 'pollInterval');
  return { owner, wait, signal: options.signal, pollInterval };
}

export function assertValidOwner(owner: unknown): asserts owner is string {
  if (typeof owner !== 'string' || owner.length === 0 || owner.length > 256 || !owner.isWellFormed()) {
    throw new StowageError('E_INVALID_OPTION', 'owner must be a non-empty string of at most 256 characters');
  }
}

/**
 * Calls `tryOnce` until it returns a lease, `wait` ms have passed, or `signal` aborts.
 * Between attempts it sleeps `pollInterval` ms, or less when `wakeup` (a database
 * notification that the key was released) resolves first.
 */
export async function acquireWithWait<T>(
  tryOnce: () => Promise<T | null>,
  options: Pick<ParsedAcquireOptions, 'wait' | 'signal' | 'pollInterval'>,
  wakeup?: (signal: AbortSignal) => Promise<void>,
): Promise<T | null> {
  const { wait, signal, pollInterval } = options;
  signal?.throwIfAborted();
  const deadline = performance.now() + wait;
  for (;;) {
    const lease = await tryOnce();
    if (lease !== null) return lease;
    const remaining = deadline - performance.now();
    if (remaining <= 0) return null;
    const pause = new AbortController();
    const onAbort = () => pause.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const timers = [sleep(Math.min(pollInterval, remaining), pause.signal)];
      if (wakeup) timers.push(wakeup(pause.signal));
      await Promise.race(timers);
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      throw error;
    } finally {
      pause.abort();
      signal?.removeEventListener('abort', onAbort);
    }
    signal?.throwIfAborted();
  }
}

/** The `LockHandle` every adapter returns. */
export class StowageLockHandle implements LockHandle {
  readonly key: string;
  readonly owner: string;
  readonly fence: number;
  #expiresAt: Date;
  readonly #operations: LeaseOperations;

  constructor(lease: Lease, operations: LeaseOperations) {
    this.key = lease.key;
    this.owner = lease.owner;
    this.fence = lease.fence;
    this.#expiresAt = lease.expiresAt;
    this.#operations = operations;
  }

  get expiresAt(): Date {
    return this.#expiresAt;
  }

  async release(): Promise<void> {
    await this.#operations.release(this.key, this.owner);
  }

  async extend(ttl: number): Promise<boolean> {
    assertValidDuration(ttl, 'ttl');
    const expiresAt = await this.#operations.extendLease(this.key, ttl, this.owner);
    if (expiresAt === null) return false;
    this.#expiresAt = expiresAt;
    return true;
  }

  isValid(): Promise<boolean> {
    return this.#operations.isHeld(this.key, this.owner);
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
 * release at the end.
 */
export async function runWithLock<T>(
  acquire: (key: string, ttl: number, options: AcquireOptions) => Promise<LockHandle | null>,
  key: string,
  fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>,
  options: WithLockOptions,
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
    throw new StowageError('E_TIMEOUT', `lock "${key}" was not acquired within ${wait} ms`);
  }

  const lease = new AbortController();
  const onOuterAbort = () => lease.abort(signal?.reason);
  signal?.addEventListener('abort', onOuterAbort, { once: true });
  const lost = () =>
    new StowageError('E_LOCK_LOST', `lease on "${key}" was lost (fence ${handle.fence})`);

  let extending: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    extending = extending.then(async () => {
      if (lease.signal.aborted) return;
      try {
        if (!(await handle.extend(ttl))) lease.abort(lost());
      } catch (error) {
        lease.abort(new StowageError('E_LOCK_LOST', `lease on "${key}" could not be extended`, { cause: error }));
      }
    });
  }, extendEvery);

  try {
    const result = await fn(lease.signal, handle);
    await extending;
    if (lease.signal.aborted && isStowageLockLost(lease.signal.reason)) throw lease.signal.reason;
    return result;
  } catch (error) {
    if (lease.signal.aborted && isStowageLockLost(lease.signal.reason)) throw lease.signal.reason;
    throw error;
  } finally {
    clearInterval(timer);
    signal?.removeEventListener('abort', onOuterAbort);
    await extending;
    await handle.release().catch(() => undefined);
  }
}

function isStowageLockLost(reason: unknown): reason is StowageError {
  return reason instanceof StowageError && reason.code === 'E_LOCK_LOST';
}
