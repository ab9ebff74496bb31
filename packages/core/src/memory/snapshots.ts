import type { Clock } from '../clock.js';
import type { LockingSnapshotStore, WorkflowLock, WorkflowSnapshot } from '../contracts/snapshots.js';
import { StowageError } from '../errors.js';
import {
  SnapshotStoreBase,
  compareSnapshotItems,
  isAfterCursor,
  type SnapshotCursor,
  type StoredSnapshot,
  type StoredSnapshotItem,
} from '../adapter/snapshots.js';
import { MEMORY_HANDLE, resolveMemoryOptions, type MemoryOptions, type MemoryStorage, type SnapshotRecord } from './storage.js';

export interface MemorySnapshotStoreOptions extends MemoryOptions {
  /** The store's namespace: stores with different prefixes on one storage never see each other's snapshots. Default `''`. */
  prefix?: string;
}

export interface MemoryWorkflowLockOptions {
  /** Lease for `tryAcquire` without `ttlMs`. Default 30 s. */
  ttl?: number;
}

export interface MemoryLockingSnapshotStoreOptions extends MemorySnapshotStoreOptions {
  /** Makes the store an awaitly `WorkflowLock` too (one runner per workflow id). */
  lock: true | MemoryWorkflowLockOptions;
}

/** Workflow snapshots in process memory: a drop-in `store` for awaitly's `durable.run`. */
export class MemorySnapshotStore<TSnapshot extends object = WorkflowSnapshot> extends SnapshotStoreBase<TSnapshot> {
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;
  readonly #snapshots: Map<string, SnapshotRecord>;

  constructor(options: MemorySnapshotStoreOptions & { lock?: true | MemoryWorkflowLockOptions } = {}) {
    const { storage, clock } = resolveMemoryOptions(options);
    const lock = options.lock === true ? {} : options.lock;
    if (lock !== undefined && (lock === null || typeof lock !== 'object')) {
      throw new StowageError('E_INVALID_OPTION', 'lock must be true or an object');
    }
    super({ name: 'MemorySnapshotStore', system: 'memory' }, MEMORY_HANDLE, {
      prefix: options.prefix,
      ...(lock && { workflowLeases: storage.workflowLocks.driver(clock), lockTtl: lock.ttl }),
    });
    this.#storage = storage;
    this.#clock = clock;
    this.#snapshots = storage.namespace(storage.snapshots, this.prefix);
  }

  protected async _save(id: string, document: string, expectedVersion: number | null | undefined): Promise<boolean> {
    const current = this.#snapshots.get(id);
    if (expectedVersion !== undefined && (current?.version ?? null) !== expectedVersion) return false;
    this.#snapshots.set(id, { text: document, version: this.#storage.nextVersion(), updatedAt: this.#clock.now() });
    return true;
  }

  protected async _load(id: string): Promise<StoredSnapshot | null> {
    const record = this.#snapshots.get(id);
    return record ? { document: record.text, version: record.version, updatedAt: new Date(record.updatedAt) } : null;
  }

  protected async _delete(id: string): Promise<void> {
    this.#snapshots.delete(id);
  }

  protected async _list(idPrefix: string, after: SnapshotCursor | null, limit: number): Promise<StoredSnapshotItem[]> {
    const items: StoredSnapshotItem[] = [];
    for (const [id, record] of this.#snapshots) {
      if (!id.startsWith(idPrefix)) continue;
      const item = { id, updatedAt: new Date(record.updatedAt) };
      if (after === null || isAfterCursor(item, after)) items.push(item);
    }
    return items.sort(compareSnapshotItems).slice(0, limit);
  }
}

/** A {@link MemorySnapshotStore} that is also awaitly's `WorkflowLock`. */
export class MemoryLockingSnapshotStore<TSnapshot extends object = WorkflowSnapshot>
  extends MemorySnapshotStore<TSnapshot>
  implements LockingSnapshotStore<TSnapshot>
{
  declare readonly tryAcquire: WorkflowLock['tryAcquire'];
  declare readonly release: WorkflowLock['release'];
  declare readonly renew: WorkflowLock['renew'];
  declare readonly clearExpiredLocks: () => Promise<number>;

  constructor(options: MemoryLockingSnapshotStoreOptions) {
    super(options);
  }
}

/**
 * The one-liner of awaitly's Postgres store, in memory: `memory()` is a snapshot store;
 * `memory({ lock: true })` is also a `WorkflowLock`, so `durable.run` runs each workflow id
 * once at a time.
 */
export function memory<TSnapshot extends object = WorkflowSnapshot>(
  options: MemoryLockingSnapshotStoreOptions,
): MemoryLockingSnapshotStore<TSnapshot>;
export function memory<TSnapshot extends object = WorkflowSnapshot>(
  options?: MemorySnapshotStoreOptions,
): MemorySnapshotStore<TSnapshot>;
export function memory<TSnapshot extends object = WorkflowSnapshot>(
  options: MemorySnapshotStoreOptions & { lock?: true | MemoryWorkflowLockOptions | false } = {},
): MemorySnapshotStore<TSnapshot> {
  const { lock, ...rest } = options;
  return lock ? new MemoryLockingSnapshotStore<TSnapshot>({ ...rest, lock }) : new MemorySnapshotStore<TSnapshot>(rest);
}
