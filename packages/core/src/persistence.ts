import type { KeyValueStore } from './contracts/kv.js';
import type { SnapshotStore, WorkflowSnapshot } from './contracts/snapshots.js';
import { StowageError, isStowageError } from './errors.js';
import { escapeGlob } from './glob.js';
import { fitKey } from './keys.js';
import { SnapshotStoreBase, compareSnapshotItems, isAfterCursor, type SnapshotCursor, type StoredSnapshot, type StoredSnapshotItem } from './adapter/snapshots.js';
import type { StoreHandle } from './adapter/store.js';

/** The key prefix awaitly's own key-value persistence (`awaitly-postgres`, `awaitly-mongo`) uses. */
export const DEFAULT_STATE_PREFIX = 'workflow:state:';

/**
 * The one entry of the key-value store that records the prefixes persistences use on it, as
 * JSON `{ "prefixes": [...] }`. U+007F (DEL) first, so that no prefix a person writes lists it; only
 * the empty prefix could, and its persistence skips it.
 */
const STATE_PREFIXES_KEY = '\u007fstowage:state-prefixes';

/**
 * A stowage {@link KeyValueStore} with the `set` of awaitly's own key-value stores
 * (`PostgresKeyValueStore` of awaitly-postgres, `MongoKeyValueStore` of awaitly-mongo): there
 * `set(key, value, { ttl })` takes SECONDS (their source writes `ttl * 1000`), where every
 * stowage contract takes milliseconds. Code written against those adapters keeps its
 * `{ ttl: 60 }` (a minute) by going through this wrapper; the store itself stays reachable as
 * {@link AwaitlyKeyValueStore.store}, in milliseconds. `createStatePersistence` takes either.
 *
 * ```ts
 * const kv = new AwaitlyKeyValueStore(new PostgresKeyValueStore({ connectionString }));
 * await kv.set('session:1', value, { ttl: 60 }); // expires in 60 seconds, as in awaitly-postgres
 * await kv.store.set('session:1', value, { ttl: 60_000 }); // the same, in stowage's milliseconds
 * ```
 */
export class AwaitlyKeyValueStore {
  /** The stowage store underneath, with its whole contract (durations in milliseconds). */
  readonly store: KeyValueStore;

  constructor(store: KeyValueStore) {
    this.store = store;
  }

  get(key: string): Promise<string | null> {
    return this.store.get(key);
  }

  /**
   * `ttl` in seconds, fractions allowed (rounded up to whole milliseconds); no ttl, or 0, is
   * no expiry (as awaitly's adapters treat a falsy ttl). A negative or non-finite ttl rejects
   * with `E_INVALID_OPTION` (awaitly's adapters would store an entry that is already expired,
   * or fail in the driver).
   */
  async set(key: string, value: string, options?: { ttl?: number }): Promise<void> {
    const seconds = options?.ttl;
    if (seconds !== undefined && (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0)) {
      throw new StowageError('E_INVALID_OPTION', `ttl must be a number of seconds >= 0 (awaitly's unit), got ${String(seconds)}`);
    }
    await this.store.set(key, value, seconds ? { ttl: Math.ceil(seconds * 1000) } : undefined);
  }

  delete(key: string): Promise<boolean> {
    return this.store.delete(key);
  }

  exists(key: string): Promise<boolean> {
    return this.store.exists(key);
  }

  keys(pattern?: string): Promise<string[]> {
    return this.store.keys(pattern);
  }

  close(): Promise<void> {
    return this.store.close();
  }
}

export interface StatePersistenceOptions {
  /** Close the key-value store when the persistence is closed (the adapters' factories set this). */
  ownsStore?: boolean;
}

/**
 * Turns any {@link KeyValueStore} (or an {@link AwaitlyKeyValueStore} around one) into a
 * snapshot store that awaitly's `durable.run` accepts,
 * the way `createStatePersistence` of `awaitly/persistence` does: each snapshot is one JSON
 * value under `prefix + id`, so tables written by awaitly's own adapters read as they are.
 * Versions are the key-value store's; listing orders by its `updatedAt`, so it never depends
 * on a client clock.
 *
 * In that layout a prefix is a namespace only while no other prefix on the store starts like
 * it (`t1` + `1:invoice` is `t11` + `:invoice`). So the first call records the prefix in the
 * store ({@link STATE_PREFIXES_KEY}), and every call rejects with `E_INVALID_OPTION` while
 * another persistence, in any process, has recorded a prefix that starts like this one.
 */
export function createStatePersistence<TSnapshot extends object = WorkflowSnapshot>(
  kv: KeyValueStore | AwaitlyKeyValueStore,
  prefix: string = DEFAULT_STATE_PREFIX,
  options: StatePersistenceOptions = {},
): SnapshotStore<TSnapshot> {
  return new StatePersistence<TSnapshot>(kv instanceof AwaitlyKeyValueStore ? kv.store : kv, prefix, options.ownsStore ?? false);
}

/**
 * {@link createStatePersistence} for the adapters' async factories (`createPostgresPersistence`,
 * `createMongoPersistence`): resolves once the prefix is recorded, so a prefix that overlaps
 * another is refused when the store is created.
 */
export async function openStatePersistence<TSnapshot extends object = WorkflowSnapshot>(
  kv: KeyValueStore,
  prefix: string = DEFAULT_STATE_PREFIX,
  options: StatePersistenceOptions = {},
): Promise<SnapshotStore<TSnapshot>> {
  const persistence = new StatePersistence<TSnapshot>(kv, prefix, options.ownsStore ?? false);
  await persistence.claimPrefix();
  return persistence;
}

function parsePrefixes(value: string): string[] {
  try {
    const parsed: unknown = JSON.parse(value);
    const prefixes = (parsed as { prefixes?: unknown } | null)?.prefixes;
    if (Array.isArray(prefixes) && prefixes.every((prefix) => typeof prefix === 'string')) return prefixes;
  } catch {
    // reported below
  }
  throw new StowageError('E_INVALID_VALUE', `the store's entry ${JSON.stringify(STATE_PREFIXES_KEY)} is not stowage's record of state prefixes`);
}

class StatePersistence<TSnapshot extends object> extends SnapshotStoreBase<TSnapshot> {
  readonly #kv: KeyValueStore;
  #claimed: Promise<void> | undefined;

  constructor(kv: KeyValueStore, prefix: string, ownsStore: boolean) {
    // Closing the persistence closes the store only where it opened it.
    const handle: StoreHandle = {
      get capabilities() {
        return kv.capabilities;
      },
      ready: () => kv.ready(),
      toStowageError: (error) => error,
      close: async () => {
        if (ownsStore) await kv.close();
      },
    };
    super('state persistence', handle, { prefix });
    this.#kv = kv;
  }

  /** Records the prefix on the store once (retried on the next call if it failed); see {@link createStatePersistence}. */
  claimPrefix(): Promise<void> {
    this.#claimed ??= this.#claim().catch((error: unknown) => {
      this.#claimed = undefined;
      throw error;
    });
    return this.#claimed;
  }

  async #claim(): Promise<void> {
    // A compare-and-set on the one record: of two processes claiming at once, the second
    // reads the first's prefix and checks against it.
    for (;;) {
      const entry = await this.#kv.getEntry(STATE_PREFIXES_KEY);
      const prefixes = entry === null ? [] : parsePrefixes(entry.value);
      if (prefixes.includes(this.prefix)) return;
      const other = prefixes.find((used) => used.startsWith(this.prefix) || this.prefix.startsWith(used));
      if (other !== undefined) {
        throw new StowageError(
          'E_INVALID_OPTION',
          `state prefix ${JSON.stringify(this.prefix)} starts like ${JSON.stringify(other)}, already in use on this store: ` +
            'their keys could not be told apart. Give each persistence a prefix that is not the start of another ' +
            `(e.g. "tenant:1:" and "tenant:11:"), or another table or collection`,
        );
      }
      const record = JSON.stringify({ prefixes: [...prefixes, this.prefix].sort() });
      try {
        await this.#kv.compareAndSet(STATE_PREFIXES_KEY, record, entry?.version ?? null);
        return;
      } catch (error) {
        if (!isStowageError(error, 'E_VERSION_CONFLICT')) throw error;
      }
    }
  }

  /** The key of a snapshot; the record of prefixes is none (only the empty prefix could name it). */
  #key(id: string): string {
    // The prefix and the id together may pass 1024 bytes where the id alone did not.
    const key = fitKey(this.prefix + id);
    if (key === STATE_PREFIXES_KEY) throw new StowageError('E_INVALID_KEY', `snapshot id ${JSON.stringify(id)} is reserved`);
    return key;
  }

  protected async _save(id: string, document: string, expectedVersion: number | null | undefined): Promise<boolean> {
    const key = this.#key(id);
    await this.claimPrefix();
    try {
      if (expectedVersion === undefined) await this.#kv.set(key, document);
      else await this.#kv.compareAndSet(key, document, expectedVersion);
      return true;
    } catch (error) {
      if (isStowageError(error, 'E_VERSION_CONFLICT')) return false;
      throw error;
    }
  }

  protected async _load(id: string): Promise<StoredSnapshot | null> {
    const key = this.#key(id);
    await this.claimPrefix();
    const entry = await this.#kv.getEntry(key);
    return entry === null ? null : { document: entry.value, version: entry.version, updatedAt: entry.updatedAt };
  }

  protected async _delete(id: string): Promise<void> {
    const key = this.#key(id);
    await this.claimPrefix();
    await this.#kv.delete(key);
  }

  protected async _list(idPrefix: string, after: SnapshotCursor | null, limit: number): Promise<StoredSnapshotItem[]> {
    await this.claimPrefix();
    const prefix = this.prefix + idPrefix;
    // Under the empty prefix the record of prefixes may be among the entries: ask for one more.
    const extra = STATE_PREFIXES_KEY.startsWith(prefix) ? 1 : 0;
    let entries;
    if (this.#kv.recentEntries) {
      // A page at a time, newest first, on the store's index where it has one.
      entries = await this.#kv.recentEntries({
        prefix,
        limit: limit + extra,
        ...(after && { after: { updatedAt: after.updatedAt, key: this.prefix + after.id } }),
      });
    } else {
      entries = (await this.#kv.entries(`${escapeGlob(prefix)}*`))
        .map((entry) => ({ ...entry, id: entry.key.slice(this.prefix.length) }))
        .filter((item) => after === null || isAfterCursor(item, after))
        .sort(compareSnapshotItems);
    }
    return entries
      .filter((entry) => entry.key !== STATE_PREFIXES_KEY)
      .slice(0, limit)
      .map((entry) => ({ id: entry.key.slice(this.prefix.length), updatedAt: entry.updatedAt }));
  }

}
