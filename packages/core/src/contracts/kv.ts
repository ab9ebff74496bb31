import type { DatabaseTransaction, ScanOptions, StowageResource } from './common.js';

export interface KeyValueSetOptions {
  /** Time to live in milliseconds, counted on the store's clock. Omit for no expiry. */
  ttl?: number;
}

export interface KeyValueEntry {
  key: string;
  value: string;
  /**
   * Grows on every write of the key and is never reused for it, also after the key was
   * deleted or expired and created again: a compare-and-set with a version succeeds only
   * against the very value that version was read with. Compare versions for equality; the
   * steps between two versions are not promised.
   */
  version: number;
  /** When the value was last written, on the store's clock. */
  updatedAt: Date;
  /** When the value expires, on the store's clock; `null` for never. */
  expiresAt: Date | null;
}

export type KeyValueEntryInfo = Omit<KeyValueEntry, 'value'>;

export interface KeyValueWrite {
  key: string;
  value: string;
  ttl?: number;
}

/**
 * String keys to string values, with TTL and glob listing (awaitly's `KeyValueStore`), plus batches,
 * versioned compare-and-set and explicit cleanup.
 *
 * Keys: non-empty, well-formed strings of at most 1024 UTF-8 bytes (`E_INVALID_KEY`).
 * Values: any well-formed string, including `"\u0000"` and the empty string (`E_INVALID_VALUE`).
 * Patterns: globs (`*`, `?`, `\` escapes; every other character literal).
 * Expired keys are invisible to every read at once.
 */
export interface KeyValueStore extends StowageResource {
  get(key: string): Promise<string | null>;
  set(key: string, value: string, options?: KeyValueSetOptions): Promise<void>;
  /** True when a live key was removed. */
  delete(key: string): Promise<boolean>;
  exists(key: string): Promise<boolean>;
  /** Live keys matching the glob (default `*`), in ascending order. */
  keys(pattern?: string): Promise<string[]>;
  /** The same keys, streamed in pages: `for await (const key of kv.scan('user:*'))`. */
  scan(pattern?: string, options?: ScanOptions): AsyncIterable<string>;

  /** One round trip. The result is aligned with `keys`: `null` where a key is missing or expired. */
  getMany(keys: readonly string[]): Promise<(string | null)[]>;
  /** One round trip, all or nothing. A key that appears twice keeps its last value. */
  setMany(entries: readonly KeyValueWrite[]): Promise<void>;
  /** One round trip. Returns how many live keys were removed. */
  deleteMany(keys: readonly string[]): Promise<number>;

  /** The value with its version and timestamps, or `null`. */
  getEntry(key: string): Promise<KeyValueEntry | null>;
  /** Metadata of live keys matching the glob, in ascending key order. */
  entries(pattern?: string): Promise<KeyValueEntryInfo[]>;
  /** The same metadata, streamed in pages. */
  scanEntries(pattern?: string, options?: ScanOptions): AsyncIterable<KeyValueEntryInfo>;
  /**
   * Writes only if the key's current version is `expectedVersion` (`null`: only if the key is
   * absent or expired). Resolves to the new version; rejects with `E_VERSION_CONFLICT`
   * otherwise, leaving the stored value untouched. Use it for read-modify-write loops that
   * never lose an update.
   */
  compareAndSet(
    key: string,
    value: string,
    expectedVersion: number | null,
    options?: KeyValueSetOptions,
  ): Promise<number>;

  /** Physically removes expired keys now; returns how many. */
  clearExpired(): Promise<number>;

  /**
   * Live entries whose key starts with `prefix` (literal), most recently written first (ties by
   * key ascending), after `after` when given: the listing awaitly-style state persistence
   * needs (`createStatePersistence`). Stores with an index on the write time answer a page in
   * proportion to the page. Optional: `createStatePersistence` falls back to `entries`.
   */
  recentEntries?(options: RecentEntriesOptions): Promise<KeyValueEntryInfo[]>;

  /**
   * This store with every call inside `transaction`, a transaction the caller holds (see
   * {@link DatabaseTransaction}): its writes commit or roll back with the caller's, and its
   * reads see the transaction's own writes. Throws `E_INVALID_OPTION` where the store cannot
   * join one. Optional: stores on a database with transactions have it.
   */
  withTransaction?(transaction: DatabaseTransaction): this;
}

export interface RecentEntriesOptions {
  /** Only keys that start with this literal text (`''`: all). */
  prefix?: string;
  /** At most this many (1 to 10,000). */
  limit: number;
  /** Start after this entry (the last of the previous page). */
  after?: { updatedAt: Date; key: string };
}
