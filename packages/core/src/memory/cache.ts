import type { Capabilities } from '../capabilities.js';
import type { Clock } from '../clock.js';
import type { CacheOptions, CacheProvider } from '../contracts/cache.js';
import { StowageError } from '../errors.js';
import { globMatcher } from '../glob.js';
import { assertCodec, encodeValue, jsonCodec, type Codec } from '../json.js';
import { assertOptionalDuration, assertValidKey, compareKeys, describeType } from '../keys.js';
import { SingleFlight } from '../kv-support.js';
import { Lifecycle } from '../lifecycle.js';
import {
  MEMORY_CAPABILITIES,
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
 */
export class MemoryCacheProvider implements CacheProvider {
  readonly capabilities: Capabilities = MEMORY_CAPABILITIES;
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;
  readonly #lifecycle = new Lifecycle('MemoryCacheProvider');
  readonly #prefix: string;
  readonly #defaultTtl: number | undefined;
  readonly #codec: Codec;
  /** Loader runs in progress in this process, by key, shared by concurrent `getOrSet` calls. */
  readonly #loading = new SingleFlight<string>();

  constructor(options: MemoryCacheProviderOptions = {}) {
    const { storage, clock } = resolveMemoryOptions(options);
    this.#storage = storage;
    this.#clock = clock;
    const { prefix = '', defaultTtl, codec = jsonCodec } = options;
    if (typeof prefix !== 'string') {
      throw new StowageError('E_INVALID_OPTION', `prefix must be a string, got ${describeType(prefix)}`);
    }
    assertOptionalDuration(defaultTtl, 'defaultTtl');
    assertCodec(codec);
    this.#prefix = prefix;
    this.#defaultTtl = defaultTtl;
    this.#codec = codec;
  }

  async get<T = unknown>(key: string): Promise<T | null> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    const record = this.#live(key);
    return record === null ? null : (this.#codec.decode(record.text) as T);
  }

  async set<T = unknown>(key: string, value: T, ttl?: number): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    this.#write(key, this.#encode(value), this.#ttl(ttl));
  }

  async delete(key: string): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    this.#storage.cache.delete(this.#prefix + key);
  }

  async has(key: string): Promise<boolean> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    return this.#live(key) !== null;
  }

  async clear(): Promise<void> {
    this.#lifecycle.assertOpen();
    for (const fullKey of [...this.#storage.cache.keys()]) {
      if (fullKey.startsWith(this.#prefix)) this.#storage.cache.delete(fullKey);
    }
  }

  async keys(pattern = '*'): Promise<string[]> {
    this.#lifecycle.assertOpen();
    const matches = globMatcher(pattern, this.#prefix);
    const now = this.#clock.now();
    const keys: string[] = [];
    for (const [fullKey, record] of this.#storage.cache) {
      if (isLive(record.expiresAt, now) && matches(fullKey)) keys.push(fullKey.slice(this.#prefix.length));
    }
    return keys.sort(compareKeys);
  }

  async getOrSet<T>(key: string, loader: () => Promise<T>, ttl?: number): Promise<T> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    if (typeof loader !== 'function') throw new StowageError('E_INVALID_OPTION', 'getOrSet needs a loader function');
    const expiresIn = this.#ttl(ttl);
    const cached = this.#live(key); // a cached JSON null is a hit too
    if (cached !== null) return this.#codec.decode(cached.text) as T;

    const text = await this.#loading.run(key, async () => {
      const text = this.#encode(await loader());
      this.#lifecycle.assertOpen();
      this.#write(key, text, expiresIn);
      return text;
    });
    // Every caller gets its own copy of the value.
    return this.#codec.decode(text) as T;
  }

  async clearExpired(): Promise<number> {
    this.#lifecycle.assertOpen();
    const now = this.#clock.now();
    let removed = 0;
    for (const [fullKey, record] of [...this.#storage.cache]) {
      if (fullKey.startsWith(this.#prefix) && !isLive(record.expiresAt, now)) {
        this.#storage.cache.delete(fullKey);
        removed++;
      }
    }
    return removed;
  }

  close(): Promise<void> {
    return this.#lifecycle.close();
  }

  #live(key: string): CacheRecord | null {
    const record = this.#storage.cache.get(this.#prefix + key);
    return record && isLive(record.expiresAt, this.#clock.now()) ? record : null;
  }

  #write(key: string, text: string, ttl: number | undefined): void {
    const now = this.#clock.now();
    this.#storage.cache.set(this.#prefix + key, { text, expiresAt: ttl === undefined ? null : now + ttl });
    this.#storage.noteWrite(this.#storage.cache, now);
  }

  #ttl(ttl: number | undefined): number | undefined {
    assertOptionalDuration(ttl);
    return ttl ?? this.#defaultTtl;
  }

  #encode(value: unknown): string {
    return encodeValue(this.#codec, value);
  }
}
