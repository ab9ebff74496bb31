import type { KeyValueStore } from './contracts/kv.js';
import type { SnapshotStore, WorkflowSnapshot } from './contracts/snapshots.js';
import { isStowageError } from './errors.js';
import { escapeGlob } from './glob.js';
import { SnapshotStoreBase, compareSnapshotItems, isAfterCursor, type SnapshotCursor, type StoredSnapshot, type StoredSnapshotItem } from './adapter/snapshots.js';
import type { Capabilities } from './capabilities.js';

/** The key prefix awaitly's own key-value persistence (`awaitly-postgres`, `awaitly-mongo`) uses. */
export const DEFAULT_STATE_PREFIX = 'workflow:state:';

export interface StatePersistenceOptions {
  /** Close the key-value store when the persistence is closed (the adapters' factories set this). */
  ownsStore?: boolean;
}

/**
 * Turns any {@link KeyValueStore} into a snapshot store that awaitly's `durable.run` accepts,
 * the way `createStatePersistence` of `awaitly/persistence` does: each snapshot is one JSON
 * value under `prefix + id`, so tables written by awaitly's own adapters read as they are.
 * Versions are the key-value store's; listing orders by its `updatedAt`, so it never depends
 * on a client clock.
 */
export function createStatePersistence<TSnapshot extends object = WorkflowSnapshot>(
  kv: KeyValueStore,
  prefix: string = DEFAULT_STATE_PREFIX,
  options: StatePersistenceOptions = {},
): SnapshotStore<TSnapshot> {
  return new StatePersistence<TSnapshot>(kv, prefix, options.ownsStore ?? false);
}

class StatePersistence<TSnapshot extends object> extends SnapshotStoreBase<TSnapshot> {
  readonly #kv: KeyValueStore;
  readonly #ownsStore: boolean;

  constructor(kv: KeyValueStore, prefix: string, ownsStore: boolean) {
    super('state persistence', { prefix });
    this.#kv = kv;
    this.#ownsStore = ownsStore;
  }

  get capabilities(): Capabilities {
    return this.#kv.capabilities;
  }

  protected async _save(id: string, document: string, expectedVersion: number | null | undefined): Promise<boolean> {
    const key = this.prefix + id;
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
    const entry = await this.#kv.getEntry(this.prefix + id);
    return entry === null ? null : { document: entry.value, version: entry.version, updatedAt: entry.updatedAt };
  }

  protected async _delete(id: string): Promise<void> {
    await this.#kv.delete(this.prefix + id);
  }

  protected async _list(idPrefix: string, after: SnapshotCursor | null, limit: number): Promise<StoredSnapshotItem[]> {
    if (this.#kv.recentEntries) {
      // A page at a time, newest first, on the store's index where it has one.
      const entries = await this.#kv.recentEntries({
        prefix: this.prefix + idPrefix,
        limit,
        ...(after && { after: { updatedAt: after.updatedAt, key: this.prefix + after.id } }),
      });
      return entries.map((entry) => ({ id: entry.key.slice(this.prefix.length), updatedAt: entry.updatedAt }));
    }
    const entries = await this.#kv.entries(`${escapeGlob(this.prefix + idPrefix)}*`);
    const items = entries.map((entry) => ({ id: entry.key.slice(this.prefix.length), updatedAt: entry.updatedAt }));
    return items
      .filter((item) => after === null || isAfterCursor(item, after))
      .sort(compareSnapshotItems)
      .slice(0, limit);
  }

  protected override async _close(): Promise<void> {
    if (this.#ownsStore) await this.#kv.close();
  }
}
