import type { StowageResource } from './common.js';

export interface IdempotencyRecord<T = unknown> {
  value: T;
  /** Epoch ms on the store's clock; absent for no expiry. */
  expiresAt?: number;
}

/**
 * The outcome of `reserve`: exactly one concurrent caller gets `acquired` and runs the
 * operation; the others learn whether it is still `in-flight` or already `completed`.
 */
export type Reservation<T = unknown> =
  | { status: 'acquired'; token: string }
  | { status: 'in-flight'; expiresAt: number }
  | { status: 'completed'; value: T; expiresAt?: number };

export interface IdempotencyStore extends StowageResource {
  /** The completed result, or `null` (also while a reservation is in flight). */
  get<T = unknown>(key: string): Promise<IdempotencyRecord<T> | null>;
  /** Stores a completed result (JSON value, or the store's codec). */
  set<T = unknown>(key: string, value: T, ttl?: number): Promise<void>;
  delete(key: string): Promise<void>;
  /**
   * Claims `key` for `ttl` ms. An in-flight claim that outlives its ttl (a crashed worker) can
   * be claimed again.
   */
  reserve<T = unknown>(key: string, ttl: number): Promise<Reservation<T>>;
  /** Stores the result for the holder of `token`; `E_LOCK_NOT_OWNED` if the claim was lost. */
  complete<T = unknown>(key: string, token: string, value: T, ttl?: number): Promise<void>;
  /** Drops the holder's claim so a retry can reserve at once. False when the token no longer holds it. */
  fail(key: string, token: string): Promise<boolean>;
}
