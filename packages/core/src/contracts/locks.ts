import type { StowageResource } from './common.js';

export interface AcquireOptions {
  /** Owner token; a random one is generated when omitted. Re-acquiring with the same owner renews the lease and keeps the fence. */
  owner?: string;
  /** Keep trying for up to this many milliseconds (default 0: one attempt). Resolves `null` when the time is up. */
  wait?: number;
  /** Stops waiting; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Polling interval while waiting, in milliseconds (default 50; backends with wake-ups poll only as a fallback). */
  pollInterval?: number;
}

/**
 * A held lease. `fence` is a fencing token: it strictly increases for the key across every
 * acquisition ever granted (after release, expiry, forceRelease and restarts alike), so a
 * resource guarded by "reject writes with a fence lower than the highest seen" never accepts
 * a write from a holder whose lease was lost.
 */
export interface LockHandle extends AsyncDisposable {
  readonly key: string;
  readonly owner: string;
  readonly fence: number;
  /** When the lease ends, on the store's clock; updated by `extend`. */
  readonly expiresAt: Date;
  /** Releases if still owned; resolves quietly when the lease was already lost. */
  release(): Promise<void>;
  /** Sets the lease to end `ttl` ms from now (store clock). False when the lease was lost. */
  extend(ttl: number): Promise<boolean>;
  /** Asks the store whether this owner still holds a live lease. */
  isValid(): Promise<boolean>;
}

export interface WithLockOptions {
  /** Lease length in milliseconds. */
  ttl: number;
  /** Wait this long for the lock before rejecting with `E_LOCK_BUSY` (default 0: one attempt, no waiting). */
  wait?: number;
  owner?: string;
  signal?: AbortSignal;
  pollInterval?: number;
  /** Extend the lease this often (default `ttl / 3`). */
  extendEvery?: number;
}

/**
 * Distributed locks with leases, owner tokens and fencing tokens (go-go-scope's `LockProvider`, plus fencing,
 * waiting acquisition and `withLock`).
 */
export interface LockProvider extends StowageResource {
  /**
   * Takes the lock for `ttl` ms if it is free, expired, or already held by the same owner.
   * Resolves `null` when another owner holds it (after `wait` ms, if given).
   * The third argument is the owner token (as go-go-scope passes it) or an options object.
   */
  acquire(key: string, ttl: number, ownerOrOptions?: string | AcquireOptions): Promise<LockHandle | null>;
  /** Extends a lease still held by `owner`. False when it is not (expired, released, taken). */
  extend(key: string, ttl: number, owner: string): Promise<boolean>;
  /** Releases if held by `owner`. False when it was not. */
  release(key: string, owner: string): Promise<boolean>;
  /** Releases whoever holds it. The fence still never goes back. */
  forceRelease(key: string): Promise<void>;
  /**
   * Runs `fn` while holding the lock, extending the lease in the background. If the lease is
   * lost, `signal` aborts with an `E_LOCK_LOST` error and `withLock` rejects with it.
   * Rejects with `E_LOCK_BUSY` when another owner still holds the lock after `wait` ms (default 0).
   */
  withLock<T>(key: string, fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>, options: WithLockOptions): Promise<T>;
}
