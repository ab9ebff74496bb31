import {
  StowageError,
  assertCodec,
  assertOptionalDuration,
  assertValidKey,
  compareKeys,
  describeType,
  encodeValue,
  jsonCodec,
  SingleFlight,
  type CacheOptions,
  type CacheProvider,
  type Codec,
} from '@stowage/core';
import { deleteValue, setValue, type KeyValueDocument } from './kv.js';
import { idFilterForGlob, idFilterForPrefix } from './patterns.js';
import { MongoResource, type MongoStoreOptions, type ReadyStore } from './resource.js';

export interface MongoCacheProviderOptions extends MongoStoreOptions, CacheOptions {}

/**
 * {@link CacheProvider} on one collection (default `stowage_cache`), in the key-value document
 * shape: `{ _id: prefix + key, value: <codec text>, version, updatedAt, expiresAt? }`. Values go
 * through the codec (strict JSON by default), so any JSON value round-trips exactly, whatever
 * its object keys. Caches with different prefixes can share a collection; `clear()` removes
 * only its own prefix.
 */
export class MongoCacheProvider extends MongoResource<KeyValueDocument> implements CacheProvider {
  readonly prefix: string;
  readonly #defaultTtl: number | undefined;
  readonly #codec: Codec;
  /** One loader run per key at a time in this process (getOrSet). */
  readonly #loading = new SingleFlight<unknown>();

  constructor(options: MongoCacheProviderOptions) {
    super('MongoCacheProvider', 'cache', options);
    const { prefix = '', defaultTtl, codec = jsonCodec } = options;
    if (typeof prefix !== 'string') {
      throw new StowageError('E_INVALID_OPTION', `prefix must be a string, got ${describeType(prefix)}`);
    }
    assertOptionalDuration(defaultTtl, 'defaultTtl');
    assertCodec(codec);
    this.prefix = prefix;
    this.#defaultTtl = defaultTtl;
    this.#codec = codec;
  }

  async get<T = unknown>(key: string): Promise<T | null> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    const found = await this.run((ready) => this.#read(ready, key));
    return found === null ? null : (found.value as T);
  }

  async set<T = unknown>(key: string, value: T, ttl?: number): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    const effectiveTtl = ttl ?? this.#defaultTtl;
    assertOptionalDuration(effectiveTtl);
    const text = encodeValue(this.#codec, value);
    return this.run(({ collection, time }) => setValue(collection, time, this.prefix + key, text, effectiveTtl));
  }

  async delete(key: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    await this.run(({ collection, time }) => deleteValue(collection, time, this.prefix + key));
  }

  async has(key: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    return this.run(async ({ collection, time }) => {
      return (await time.findLiveValue(collection, this.prefix + key, { _id: 1 })) !== null;
    });
  }

  async clear(): Promise<void> {
    this.lifecycle.assertOpen();
    await this.run(({ collection }) => collection.deleteMany(idFilterForPrefix(this.prefix)));
  }

  async keys(pattern = '*'): Promise<string[]> {
    this.lifecycle.assertOpen();
    const filter = idFilterForGlob(pattern, this.prefix);
    return this.run(async ({ collection, time }) => {
      const documents = await collection.find({ ...filter, ...time.liveValue() }, { projection: { _id: 1 } }).toArray();
      return documents.map((document) => document._id.slice(this.prefix.length)).sort(compareKeys);
    });
  }

  async getOrSet<T>(key: string, loader: () => Promise<T>, ttl?: number): Promise<T> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    if (typeof loader !== 'function') throw new StowageError('E_INVALID_OPTION', 'getOrSet needs a loader function');
    const effectiveTtl = ttl ?? this.#defaultTtl;
    assertOptionalDuration(effectiveTtl);
    return this.#loading.run(key, async () => {
      const found = await this.run((ready) => this.#read(ready, key));
      if (found !== null) return found.value;
      const value = await loader();
      await this.set(key, value, effectiveTtl);
      return value;
    }) as Promise<T>;
  }

  async clearExpired(): Promise<number> {
    this.lifecycle.assertOpen();
    return this.run(async ({ collection, time }) => {
      const filter = { ...idFilterForPrefix(this.prefix), ...time.expiredValue() };
      return (await collection.deleteMany(filter)).deletedCount;
    });
  }

  /** The decoded value, or `null` when missing or expired (a stored `null` comes back as `{ value: null }`). */
  async #read({ collection, time }: ReadyStore<KeyValueDocument>, key: string): Promise<{ value: unknown } | null> {
    const document = await time.findLiveValue(collection, this.prefix + key, { value: 1 });
    return document === null ? null : { value: this.#codec.decode(document.value) };
  }
}
