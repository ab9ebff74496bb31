import type { StowageResource } from './common.js';

export interface KeyValueSetOptions {
  /** Time to live in milliseconds, counted on the store's clock. Omit for no expiry. */
  ttl?: number;
}

export interface KeyValueEntry {
  key: string;
  value: string;
  /**
   * Starts at 1 when the key is created and grows by one on every write. An expired key
   * counts as absent; a key deleted and created again starts over at 1.
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
 * String keys to string values, with TTL and glob listing (seeds 000/002), plus batches,
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
}
