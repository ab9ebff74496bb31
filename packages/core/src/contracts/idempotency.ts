import type { DatabaseTransaction, StowageResource } from './common.js';

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
  /**
   * Stores the result for the holder of `token`; `E_LOCK_NOT_OWNED` if the claim was lost. Safe
   * to retry after `E_UNAVAILABLE`/`E_TIMEOUT`: when the key already holds exactly this result
   * (the earlier attempt was applied, its answer lost), it resolves.
   */
  complete<T = unknown>(key: string, token: string, value: T, ttl?: number): Promise<void>;
  /** Drops the holder's claim so a retry can reserve at once. False when the token no longer holds it. */
  fail(key: string, token: string): Promise<boolean>;

  /**
   * Exactly once for database effects: runs `fn` and marks `key` completed with its result in
   * one database transaction, so the effects `fn` writes through the transaction it is given
   * and the completed record commit together or not at all.
   *
   * When `key` already completed, resolves with the stored result and does not call `fn`.
   * Otherwise begins a transaction on the store's own connection, claims `key` inside it
   * (concurrent runners of one key wait for each other, then find the result), calls `fn` with
   * the transaction (a `pg` client between `BEGIN` and `COMMIT`, a MongoDB `ClientSession`),
   * stores the result and commits. A crash or an error before the commit leaves nothing behind
   * (no claim, no effect), so the retry runs `fn` again. `fn` may also run again when the
   * database asks for the transaction to be retried (a write conflict): its effects through the
   * transaction are rolled back each time, anything else it does is not.
   *
   * Rejects with `E_LOCK_NOT_OWNED` while a `reserve()` claim of `key` is in flight, and with
   * `E_INVALID_OPTION` where the database has no transactions. Optional: stores on a database
   * with transactions have it.
   */
  runOnce?<T>(key: string, fn: (transaction: DatabaseTransaction) => Promise<T>, options?: RunOnceOptions): Promise<T>;

  /** This store inside a transaction the caller holds (see `KeyValueStore.withTransaction`); optional. */
  withTransaction?(transaction: DatabaseTransaction): this;
}

export interface RunOnceOptions {
  /** How long the completed result is kept, in ms (default: until deleted); afterwards the key runs again. */
  ttl?: number;
}
