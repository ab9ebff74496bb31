import type { Clock } from '../clock.js';
import type { CacheOptions } from '../contracts/cache.js';
import { CacheProviderBase } from '../adapter/cache.js';
import type { Glob } from '../glob.js';
import { compareKeys } from '../keys.js';
import {
  MEMORY_HANDLE,
  isLive,
  resolveMemoryOptions,
  type CacheRecord,
  type MemoryOptions,
  type MemoryStorage,
} from './storage.js';

export interface MemoryCacheProviderOptions extends CacheOptions, MemoryOptions {}

/**
 * A cache of JSON values (or whatever the codec carries) in process memory. Values are
 * stored encoded, so a caller mutating an object it passed in or got back changes nothing.
 * Each prefix has its own table on the storage.
 */
export class MemoryCacheProvider extends CacheProviderBase {
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;
  readonly #entries: Map<string, CacheRecord>;

  constructor(options: MemoryCacheProviderOptions = {}) {
    const { storage, clock } = resolveMemoryOptions(options);
    super({ name: 'MemoryCacheProvider', system: 'memory' }, MEMORY_HANDLE, options);
    this.#storage = storage;
    this.#clock = clock;
    this.#entries = storage.namespace(storage.cache, this.prefix);
  }

  protected async _get(key: string): Promise<string | null> {
    const record = this.#entries.get(key);
    return record && isLive(record.expiresAt, this.#clock.now()) ? record.text : null;
  }

  protected async _set(key: string, text: string, ttl: number | undefined): Promise<void> {
    const now = this.#clock.now();
    this.#entries.set(key, { text, expiresAt: ttl === undefined ? null : now + ttl });
    this.#storage.noteWrite(this.#entries, now);
  }

  protected async _delete(key: string): Promise<void> {
    this.#entries.delete(key);
  }

  protected async _clear(): Promise<void> {
    this.#entries.clear();
  }

  protected async _keys(glob: Glob): Promise<string[]> {
    const now = this.#clock.now();
    const keys: string[] = [];
    for (const [key, record] of this.#entries) if (isLive(record.expiresAt, now) && glob.matches(key)) keys.push(key);
    return keys.sort(compareKeys);
  }

  protected async _clearExpired(): Promise<number> {
    const now = this.#clock.now();
    let removed = 0;
    for (const [key, record] of this.#entries) {
      if (!isLive(record.expiresAt, now)) {
        this.#entries.delete(key);
        removed++;
      }
    }
    return removed;
  }
}
