import type { CacheOptions, CacheProvider } from '../contracts/cache.js';
import { StowageError } from '../errors.js';
import { compileGlob, type Glob } from '../glob.js';
import { assertCodec, decodeValue, encodeValue, jsonCodec, type Codec } from '../json.js';
import { assertOptionalDuration, assertValidKey } from '../keys.js';
import { assertOptionsObject, assertValidPrefix } from './options.js';
import { compareKeys } from '../keys.js';
import { Coalescer, RUN_ALONE } from './coalesce.js';
import { booleanOption, pageAfter, pageSizeOf } from './options.js';
import type { ScanOptions } from '../contracts/common.js';
import { cacheLookupChannel, type CacheLookupMessage, type StoreIdentity } from '../diagnostics.js';
import { StoreBase, callerCode, type StoreHandle } from './store.js';

/**
 * The whole {@link CacheProvider} behaviour over a few backend operations: argument checks,
 * the codec (values reach the backend as text and come back as text), default TTLs and the
 * `getOrSet` single flight. Keys reach the backend without the prefix; the backend keeps each
 * prefix's entries apart from every other's (no cache sees, lists or clears another's).
 */
export abstract class CacheProviderBase extends StoreBase implements CacheProvider {
  /** This cache's namespace ('' for none). */
  protected readonly prefix: string;
  readonly #defaultTtl: number | undefined;
  readonly #codec: Codec;
  /** Loader runs in progress in this process, by key, shared by concurrent `getOrSet` calls. */
  readonly #loading = new SingleFlight<string>();
  /** Concurrent point calls of one tick, coalesced (as one statement each where the backend batches); `coalesce: false` leaves it out. */
  readonly #batched:
    | {
        get: (key: string) => Promise<string | null>;
        set: (write: CacheWrite) => Promise<void>;
        delete: (key: string) => Promise<void>;
        has: (key: string) => Promise<boolean>;
      }
    | undefined;

  protected constructor(identity: string | StoreIdentity, handle: StoreHandle, options: CacheOptions & { coalesce?: boolean } = {}) {
    super(identity, handle, 'cache');
    assertOptionsObject(options);
    const { prefix = '', defaultTtl, codec = jsonCodec } = options;
    assertValidPrefix(prefix);
    assertOptionalDuration(defaultTtl, 'defaultTtl');
    assertCodec(codec);
    this.prefix = prefix;
    this.#defaultTtl = defaultTtl;
    this.#codec = codec;
    if (!booleanOption(options.coalesce, 'coalesce', true)) return;
    const coalescer = new Coalescer((error) => this.toStowageError(error), this.identity);
    const byKey = (key: string) => key;
    this.#batched = {
      get: coalescer.operation({
        name: 'cache.get',
        key: byKey,
        reads: true,
        runOne: (key) => this._get(key),
        ...(this._getMany && { runBatch: (keys: string[]) => this._getMany!(keys) }),
      }),
      has: coalescer.operation({ name: 'cache.has', key: byKey, reads: true, runOne: (key) => this._has(key) }),
      set: coalescer.operation<CacheWrite, void>({
        name: 'cache.set',
        key: (write) => write.key,
        runOne: (write) => this._set(write.key, write.text, write.ttl),
        ...(this._setMany && {
          runBatch: async (writes: CacheWrite[]) => {
            // The last write of a key wins, as it would have, run one after the other.
            const latest = new Map(writes.map((write) => [write.key, write]));
            const skipped = await this._setMany!([...latest.values()].sort((a, b) => compareKeys(a.key, b.key)));
            // A key another transaction holds is written alone (its calls in order): only they wait for it.
            return writes.map((write) => (skipped?.has(write.key) ? RUN_ALONE : undefined));
          },
        }),
      }),
      delete: coalescer.operation({ name: 'cache.delete', key: byKey, runOne: (key) => this._delete(key) }),
    };
  }

  get<T = unknown>(key: string): Promise<T | null> {
    return this.call('cache.get', async () => {
      assertValidKey(key);
      const text = await (this.#batched ? this.#batched.get(key) : this._get(key));
      this.#lookedUp(text);
      return text === null ? null : (decodeValue(this.#codec, text, `the cached value of "${key}"`) as T);
    }, key);
  }

  set<T = unknown>(key: string, value: T, ttl?: number): Promise<void> {
    return this.call('cache.set', () => {
      assertValidKey(key);
      const write = { key, text: encodeValue(this.#codec, value), ttl: this.#ttl(ttl) };
      return this.#batched ? this.#batched.set(write) : this._set(write.key, write.text, write.ttl);
    }, key);
  }

  delete(key: string): Promise<void> {
    return this.call('cache.delete', () => {
      assertValidKey(key);
      return this.#batched ? this.#batched.delete(key) : this._delete(key);
    }, key);
  }

  has(key: string): Promise<boolean> {
    return this.call('cache.has', () => {
      assertValidKey(key);
      return this.#batched ? this.#batched.has(key) : this._has(key);
    }, key);
  }

  clear(): Promise<void> {
    return this.call('cache.clear', () => this._clear());
  }

  /**
   * Live keys (without prefix) matching `pattern`, ascending: a string is a glob (the one
   * pattern language of stowage); a `RegExp` (as go-go-scope's cache adapters take) is tested
   * against each key of this cache as given, so it costs a scan of the cache's keys.
   */
  keys(pattern: string | RegExp = '*'): Promise<string[]> {
    return this.call('cache.keys', async () => {
      if (!(pattern instanceof RegExp)) return this._keys(compileGlob(pattern));
      const regex = new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, '')); // no lastIndex state between keys
      return (await this._keys(compileGlob('*'))).filter((key) => regex.test(key));
    });
  }

  /** Pages of `pageSize` keys, each one round trip after the last key of the page before. */
  async *scan(pattern = '*', options?: ScanOptions): AsyncIterable<string> {
    const { glob, pageSize } = await this.call('cache.scan', () => ({ glob: compileGlob(pattern), pageSize: pageSizeOf(options) }));
    for (let after: string | null = null; ; ) {
      const page: string[] = await this.call('cache.scan', () => this._keysPage(glob, after, pageSize));
      yield* page;
      if (page.length < pageSize) return;
      after = page.at(-1)!;
    }
  }

  /**
   * The cached value, or `loader()`'s result stored with `ttl`. One loader run per key at a
   * time in this object: concurrent callers share it (and its failure, which stores nothing),
   * and each gets its own decoded copy of the value.
   */
  getOrSet<T>(key: string, loader: () => Promise<T>, ttl?: number): Promise<T> {
    return this.call('cache.getOrSet', async () => {
      assertValidKey(key);
      if (typeof loader !== 'function') throw new StowageError('E_INVALID_OPTION', 'getOrSet needs a loader function');
      const expiresIn = this.#ttl(ttl);
      const text = await this.#loading.run(key, async () => {
        const cached = await this._get(key); // a cached JSON null is a hit too
        this.#lookedUp(cached);
        if (cached !== null) return cached;
        const loaded = encodeValue(this.#codec, await callerCode(loader));
        await this._set(key, loaded, expiresIn);
        return loaded;
      });
      return decodeValue(this.#codec, text, `the cached value of "${key}"`) as T;
    }, key);
  }

  clearExpired(): Promise<number> {
    return this.call('cache.clearExpired', () => this._clearExpired());
  }

  /** Tells telemetry whether a read found a live entry (the `stowage:cache.lookup` channel). */
  #lookedUp(text: string | null): void {
    if (cacheLookupChannel.hasSubscribers) cacheLookupChannel.publish({ store: this.identity, hit: text !== null } satisfies CacheLookupMessage);
  }

  #ttl(ttl: number | undefined): number | undefined {
    assertOptionalDuration(ttl);
    return ttl ?? this.#defaultTtl;
  }

  // --- backend operations (keys without the prefix, values as the codec's text) ----------

  protected abstract _get(key: string): Promise<string | null>;
  /** Optional: one text per key (keys may repeat); with it, concurrent `get` calls go out as one statement. */
  protected _getMany?(keys: readonly string[]): Promise<(string | null)[]>;
  /** `ttl` in ms; `undefined` for no expiry. */
  protected abstract _set(key: string, text: string, ttl: number | undefined): Promise<void>;
  /**
   * Optional: with it, concurrent `set` calls go out as one statement (keys unique and
   * ascending). It may skip the keys another transaction holds and return them: the kit writes
   * each of those alone, so only their callers wait.
   */
  protected _setMany?(writes: readonly CacheWrite[]): Promise<ReadonlySet<string> | void>;
  protected abstract _delete(key: string): Promise<void>;
  protected async _has(key: string): Promise<boolean> {
    return (await this._get(key)) !== null;
  }
  /** Removes every entry of this cache's prefix, and nothing of any other prefix. */
  protected abstract _clear(): Promise<void>;
  /** Live keys (without prefix) of this cache matching the glob, in ascending {@link compareKeys} order. */
  protected abstract _keys(glob: Glob): Promise<string[]>;
  /** Up to `limit` of those keys after `after`; override with a range query where the backend has one. */
  protected async _keysPage(glob: Glob, after: string | null, limit: number): Promise<string[]> {
    return pageAfter(await this._keys(glob), (key) => key, after, limit);
  }
  /** Removes this cache's expired entries (not other prefixes'); how many. */
  protected abstract _clearExpired(): Promise<number>;
}

/** One cache write as the backend gets it: the codec's text, ttl in ms (`undefined`: no expiry). */
export interface CacheWrite {
  key: string;
  text: string;
  ttl: number | undefined;
}

/**
 * Runs at most one `load` per key at a time; concurrent callers for the same key share its
 * promise.
 */
export class SingleFlight<T> {
  readonly #running = new Map<string, Promise<T>>();

  run(key: string, load: () => Promise<T>): Promise<T> {
    const running = this.#running.get(key);
    if (running) return running;
    const started = load().finally(() => this.#running.delete(key));
    this.#running.set(key, started);
    return started;
  }
}
