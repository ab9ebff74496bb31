import type { Codec } from '../json.js';
import type { ScanOptions, StowageResource } from './common.js';

export interface CacheOptions {
  /** Namespace of this cache; `clear()` removes only keys under it. */
  prefix?: string;
  /** Default TTL in milliseconds for `set` without one. Omit for no expiry. */
  defaultTtl?: number;
  /** How values become text. Default: strict JSON ({@link jsonCodec}). */
  codec?: Codec;
}

/**
 * A cache of JSON values (go-go-scope's `CacheProvider`). Any JSON value round-trips identically on every adapter;
 * a `codec` carries richer types. Keys are listed and matched without the prefix.
 */
export interface CacheProvider extends StowageResource {
  get<T = unknown>(key: string): Promise<T | null>;
  set<T = unknown>(key: string, value: T, ttl?: number): Promise<void>;
  delete(key: string): Promise<void>;
  has(key: string): Promise<boolean>;
  /** Removes every entry under this cache's prefix, and nothing else. */
  clear(): Promise<void>;
  /** Live keys (without prefix) matching the glob (default `*`), or a `RegExp`, ascending. */
  keys(pattern?: string | RegExp): Promise<string[]>;
  /** The same keys, streamed in pages. */
  scan(pattern?: string, options?: ScanOptions): AsyncIterable<string>;
  /**
   * Returns the cached value, or runs `loader` once, stores and returns its result.
   * Concurrent calls for the same key in one process share a single loader run.
   * A loader that rejects stores nothing.
   */
  getOrSet<T>(key: string, loader: () => Promise<T>, ttl?: number): Promise<T>;
  /** Physically removes expired entries now; returns how many. */
  clearExpired(): Promise<number>;
}
