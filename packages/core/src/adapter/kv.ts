import type { ScanOptions } from '../contracts/common.js';
import type {
  KeyValueEntry,
  KeyValueEntryInfo,
  KeyValueSetOptions,
  KeyValueStore,
  KeyValueWrite,
  RecentEntriesOptions,
} from '../contracts/kv.js';
import { StowageError } from '../errors.js';
import { compileGlob, escapeGlob, type Glob } from '../glob.js';
import { assertValidKey, assertValidKeys, assertValidStringValue, compareKeys } from '../keys.js';
import { assertExpectedVersion, parseKeyValueWrites, ttlOfSetOptions } from './options.js';
import { Coalescer, RUN_ALONE } from './coalesce.js';
import { MAX_SCAN_PAGE, assertOptionsObject, booleanOption, isStorableTime, pageAfter, pageSizeOf } from './options.js';
import type { StoreIdentity } from '../diagnostics.js';
import { StoreBase, type StoreHandle } from './store.js';

/** One write of a `setMany` batch, as the kit hands it to the backend. */
export interface KeyValueWriteOp {
  key: string;
  value: string;
  /** Milliseconds; `undefined` for no expiry. */
  ttl: number | undefined;
}

export interface KeyValueStoreBaseOptions {
  /**
   * Send concurrent `get`, `exists`, `set` and `delete` calls that arrive in the same tick as
   * one statement (default true). Each caller still gets its own outcome; a lone call goes out
   * alone. Turn it off to send every call as its own statement.
   */
  coalesce?: boolean;
}

/** What a batch of writes without `_setEach` skipped: nothing (`_setMany` waits for every row). */
const NONE_SKIPPED: ReadonlySet<string> = new Set();

/**
 * The whole {@link KeyValueStore} behaviour over a few backend operations. The public methods
 * check state, validate every argument with the stable error codes, and put batches in a
 * fixed order; the backend implements the `_` methods, one statement each, on arguments that
 * are already valid.
 *
 * Required: `_getMany`, `_setMany`, `_deleteMany`, `_getEntry`, `_entries`, `_compareAndSet`,
 * `_clearExpired`. The single-key operations default to the batch ones; a backend overrides
 * them where one key has a cheaper statement.
 */
export abstract class KeyValueStoreBase extends StoreBase implements KeyValueStore {
  /** Concurrent point calls of one tick, coalesced (see {@link KeyValueStoreBaseOptions.coalesce}). */
  readonly #batched:
    | {
        get: (key: string) => Promise<string | null>;
        exists: (key: string) => Promise<boolean>;
        set: (write: KeyValueWriteOp) => Promise<void>;
        delete: (key: string) => Promise<boolean>;
      }
    | undefined;

  protected constructor(identity: string | StoreIdentity, handle: StoreHandle, options: KeyValueStoreBaseOptions = {}) {
    super(identity, handle, 'kv');
    if (!booleanOption(options.coalesce, 'coalesce', true)) return;
    const coalescer = new Coalescer((error) => this.toStowageError(error), this.identity);
    const byKey = (key: string) => key;
    this.#batched = {
      get: coalescer.operation({ name: 'kv.get', key: byKey, reads: true, runOne: (key) => this._get(key), runBatch: (keys) => this._getMany(keys) }),
      exists: coalescer.operation({ name: 'kv.exists', key: byKey, reads: true, runOne: (key) => this._exists(key), runBatch: (keys) => this._existsMany(keys) }),
      set: coalescer.operation<KeyValueWriteOp, void>({
        name: 'kv.set',
        key: (write) => write.key,
        runOne: (write) => this._set(write.key, write.value, write.ttl),
        runBatch: async (writes) => {
          // The last write of a key wins, as it would have, run one after the other.
          const latest = new Map(writes.map((write) => [write.key, write]));
          const ordered = [...latest.values()].sort((a, b) => compareKeys(a.key, b.key));
          const skipped = this._setEach ? await this._setEach(ordered) : (await this._setMany(ordered), NONE_SKIPPED);
          // A key another transaction holds is written alone (its calls in order): only they wait for it.
          return writes.map((write) => (skipped.has(write.key) ? RUN_ALONE : undefined));
        },
      }),
      delete: coalescer.operation<string, boolean>({
        name: 'kv.delete',
        key: byKey,
        runOne: (key) => this._delete(key),
        ...(this._deleteEach && {
          runBatch: async (keys: string[]) => {
            const unique = [...new Set(keys)].sort(compareKeys);
            const removed = new Map<string, boolean | typeof RUN_ALONE>((await this._deleteEach!(unique)).map((live, index) => [unique[index]!, live]));
            // Of two deletes of one key only the first removed it; a skipped key's deletes run alone.
            return keys.map((key) => {
              const live = removed.get(key) ?? false;
              if (live !== RUN_ALONE) removed.set(key, false);
              return live;
            });
          },
        }),
      }),
    };
  }

  get(key: string): Promise<string | null> {
    return this.call('kv.get', () => {
      assertValidKey(key);
      return this.#batched ? this.#batched.get(key) : this._get(key);
    }, key);
  }

  set(key: string, value: string, options?: KeyValueSetOptions): Promise<void> {
    return this.call('kv.set', () => {
      assertValidKey(key);
      assertValidStringValue(value);
      const ttl = ttlOfSetOptions(options);
      return this.#batched ? this.#batched.set({ key, value, ttl }) : this._set(key, value, ttl);
    }, key);
  }

  delete(key: string): Promise<boolean> {
    return this.call('kv.delete', () => {
      assertValidKey(key);
      return this.#batched ? this.#batched.delete(key) : this._delete(key);
    }, key);
  }

  exists(key: string): Promise<boolean> {
    return this.call('kv.exists', () => {
      assertValidKey(key);
      return this.#batched ? this.#batched.exists(key) : this._exists(key);
    }, key);
  }

  keys(pattern = '*'): Promise<string[]> {
    return this.call('kv.keys', () => this._keys(compileGlob(pattern)));
  }

  async *scan(pattern = '*', options?: ScanOptions): AsyncIterable<string> {
    for await (const entry of this.scanEntries(pattern, options)) yield entry.key;
  }

  /** Pages of `pageSize` entries, each one round trip after the last key of the page before. */
  async *scanEntries(pattern = '*', options?: ScanOptions): AsyncIterable<KeyValueEntryInfo> {
    const { glob, pageSize } = await this.call('kv.scan', () => ({ glob: compileGlob(pattern), pageSize: pageSizeOf(options) }));
    for (let after: string | null = null; ; ) {
      const page: KeyValueEntryInfo[] = await this.call('kv.scan', () => this._entriesPage(glob, after, pageSize));
      yield* page;
      if (page.length < pageSize) return;
      after = page.at(-1)!.key;
    }
  }

  getMany(keys: readonly string[]): Promise<(string | null)[]> {
    return this.call('kv.getMany', async () => {
      assertValidKeys(keys);
      return keys.length === 0 ? [] : this._getMany(keys);
    }, keys);
  }

  setMany(entries: readonly KeyValueWrite[]): Promise<void> {
    return this.call('kv.setMany', async () => {
      const writes = parseKeyValueWrites(entries);
      if (writes.size === 0) return;
      // Row locks are taken in key order, so two batches over the same keys cannot deadlock.
      const ordered = [...writes].sort(([a], [b]) => compareKeys(a, b));
      await this._setMany(ordered.map(([key, { value, ttl }]) => ({ key, value, ttl })));
    }, entries);
  }

  deleteMany(keys: readonly string[]): Promise<number> {
    return this.call('kv.deleteMany', async () => {
      assertValidKeys(keys);
      if (keys.length === 0) return 0;
      return this._deleteMany([...new Set(keys)].sort(compareKeys));
    }, keys);
  }

  getEntry(key: string): Promise<KeyValueEntry | null> {
    return this.call('kv.getEntry', () => {
      assertValidKey(key);
      return this._getEntry(key);
    }, key);
  }

  entries(pattern = '*'): Promise<KeyValueEntryInfo[]> {
    return this.call('kv.entries', () => this._entries(compileGlob(pattern)));
  }

  compareAndSet(key: string, value: string, expectedVersion: number | null, options?: KeyValueSetOptions): Promise<number> {
    return this.call('kv.compareAndSet', async () => {
      assertValidKey(key);
      assertValidStringValue(value);
      if (expectedVersion === undefined) throw new StowageError('E_INVALID_OPTION', 'expectedVersion must be a version or null');
      assertExpectedVersion(expectedVersion);
      const version = await this._compareAndSet(key, value, expectedVersion, ttlOfSetOptions(options));
      if (version === null) {
        throw new StowageError('E_VERSION_CONFLICT', `key "${key}" is not at version ${expectedVersion ?? '(absent)'}`);
      }
      return version;
    }, key);
  }

  clearExpired(): Promise<number> {
    return this.call('kv.clearExpired', () => this._clearExpired());
  }

  recentEntries(options: RecentEntriesOptions): Promise<KeyValueEntryInfo[]> {
    return this.call('kv.recentEntries', () => {
      assertOptionsObject(options);
      const prefix = options.prefix ?? '';
      if (typeof prefix !== 'string' || !prefix.isWellFormed()) throw new StowageError('E_INVALID_OPTION', 'prefix must be a well-formed string');
      const limit = options.limit;
      if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_SCAN_PAGE) {
        throw new StowageError('E_INVALID_OPTION', `limit must be an integer from 1 to ${MAX_SCAN_PAGE}`);
      }
      const after = options.after;
      if (after !== undefined && (!isStorableTime(after.updatedAt) || typeof after.key !== 'string')) {
        throw new StowageError('E_INVALID_OPTION', 'after must be { updatedAt: Date, key: string } of an entry recentEntries returned');
      }
      return this._recentEntries(prefix, after ?? null, limit);
    });
  }

  // --- backend operations -------------------------------------------------------------

  protected async _get(key: string): Promise<string | null> {
    return (await this._getMany([key]))[0] ?? null;
  }

  /** One value per key, in the order given (`null` for a missing or expired key); keys may repeat. */
  protected abstract _getMany(keys: readonly string[]): Promise<(string | null)[]>;

  protected _set(key: string, value: string, ttl: number | undefined): Promise<void> {
    return this._setMany([{ key, value, ttl }]);
  }

  /** All or nothing; keys are unique and in ascending order. */
  protected abstract _setMany(writes: readonly KeyValueWriteOp[]): Promise<void>;

  /**
   * Concurrent `set` calls, coalesced (keys unique, ascending): writes every key it can at once
   * and returns the keys it skipped because another transaction holds their rows; the kit
   * writes each of those alone, so only their callers wait. Optional: without it, `_setMany`.
   */
  protected _setEach?(writes: readonly KeyValueWriteOp[]): Promise<ReadonlySet<string>>;

  protected async _delete(key: string): Promise<boolean> {
    return (await this._deleteMany([key])) === 1;
  }

  /** Removes the keys (unique, ascending); returns how many of them were live. */
  protected abstract _deleteMany(keys: readonly string[]): Promise<number>;

  protected async _exists(key: string): Promise<boolean> {
    return (await this._getEntry(key)) !== null;
  }

  /** Whether each key (in the order given; keys may repeat) is live: coalesced `exists` calls. */
  protected async _existsMany(keys: readonly string[]): Promise<boolean[]> {
    return (await this._getMany(keys)).map((value) => value !== null);
  }

  /**
   * Removes the keys (unique, ascending) and tells for each whether it was live, or
   * {@link RUN_ALONE} for a key it skipped because another transaction holds its row (the kit
   * deletes it alone). Optional: a backend that has it gets concurrent `delete` calls coalesced
   * into one statement.
   */
  protected _deleteEach?(keys: readonly string[]): Promise<(boolean | typeof RUN_ALONE)[]>;

  protected abstract _getEntry(key: string): Promise<KeyValueEntry | null>;

  protected async _keys(glob: Glob): Promise<string[]> {
    return (await this._entries(glob)).map((entry) => entry.key);
  }

  /** Live keys matching the glob, in ascending {@link compareKeys} order. */
  protected abstract _entries(glob: Glob): Promise<KeyValueEntryInfo[]>;

  /**
   * Up to `limit` of those entries, after the key `after` (`null`: from the start). The default
   * lists everything and cuts the page out; a backend with an ordered key index overrides it
   * with a range query, so a scan's memory and each page's cost stay bounded.
   */
  protected async _entriesPage(glob: Glob, after: string | null, limit: number): Promise<KeyValueEntryInfo[]> {
    return pageAfter(await this._entries(glob), (entry) => entry.key, after, limit);
  }

  /**
   * Writes only if the key's version is `expectedVersion` (`null`: only if absent or expired).
   * The new version, or `null` for a conflict (nothing written). A version is never reused for
   * a key, also after delete or expiry: a compare-and-set holds only against the value it read.
   */
  protected abstract _compareAndSet(
    key: string,
    value: string,
    expectedVersion: number | null,
    ttl: number | undefined,
  ): Promise<number | null>;

  /** Removes expired keys; returns how many. */
  protected abstract _clearExpired(): Promise<number>;

  /**
   * Up to `limit` live entries under the literal `prefix`, newest `updatedAt` first, ties by key
   * ascending, after `after`. The default lists and sorts every entry under the prefix; a
   * backend with an `(updated_at, key)` index overrides it so a page costs in proportion to it.
   */
  protected async _recentEntries(
    prefix: string,
    after: { updatedAt: Date; key: string } | null,
    limit: number,
  ): Promise<KeyValueEntryInfo[]> {
    const newestFirst = (a: KeyValueEntryInfo, b: KeyValueEntryInfo) =>
      b.updatedAt.getTime() - a.updatedAt.getTime() || compareKeys(a.key, b.key);
    const entries = (await this._entries(compileGlob(`${escapeGlob(prefix)}*`))).sort(newestFirst);
    const start = after === null ? 0 : entries.findIndex((entry) => newestFirst(entry, { ...entry, ...after }) > 0);
    return start === -1 ? [] : entries.slice(start, start + limit);
  }
}
