import { StowageError, type WorkflowLock, type WorkflowSnapshot } from '@stowage/core';
import { FINISHED_STATUSES, SnapshotStoreBase, describeType, type SnapshotCursor, type StoredSnapshot, type StoredSnapshotItem } from '@stowage/core/adapter';
import type { Document, WriteConcernSettings } from 'mongodb';
import { mongoStore, storeDatabase, type StoreCollection, type StoreDatabase } from '../database.js';
import type { ValueWrite } from '../dialects/dialect.js';
import { lastWritten, type SnapshotDocument } from '../documents.js';
import { MAJORITY, writeConcernOption, type MongoStoreOptions } from '../options.js';
import { DEFAULT_COLLECTIONS } from '../schema.js';
import { deleteInBatches } from '../retention.js';
import { MongoLeases } from './leases.js';
import { compareAndSetValue, idsStartingWith, namespaceStart, readLive } from './values.js';

export interface MongoWorkflowLockOptions {
  /** The lock collection (default `awaitly_workflow_locks`). */
  collection?: string;
  /** Lease for `tryAcquire` without `ttlMs`, in ms (default 30 000). */
  ttl?: number;
  /** Write concern of lock writes (default `{ w: 'majority' }`). */
  writeConcern?: WriteConcernSettings;
}

export interface MongoSnapshotStoreOptions extends MongoStoreOptions {
  /** The store's namespace: `list()` and every id are within it, and no other prefix's snapshots are ever seen (default `''`). */
  prefix?: string;
  /** Also implement awaitly's `WorkflowLock` (cross-process: one runner per workflow id). */
  lock?: MongoWorkflowLockOptions | boolean;
  /**
   * How long snapshots of finished workflows are kept (default: for ever). With `finishedAfter`,
   * the background sweeper (every `cleanupInterval` ms) and {@link MongoSnapshotStore.clearFinished} delete this prefix's
   * snapshots whose `execution.status` is `"completed"` or `"failed"` and that were not saved for
   * that many ms (server clock). Running workflows and documents of other shapes are kept.
   */
  snapshotRetention?: MongoSnapshotRetention;
}

/** See {@link MongoSnapshotStoreOptions.snapshotRetention}. */
export interface MongoSnapshotRetention {
  /** Ms after its last save that a finished workflow's snapshot is deleted. */
  finishedAfter?: number;
}

/**
 * Workflow snapshots in one collection (default `awaitly_snapshots`): a drop-in `store` for
 * awaitly's `durable.run`. Documents `{ _id: prefix + "\u0000" + id, ns: prefix, value: <JSON>,
 * version, updatedAt, finished }`, listed newest first on the `{ ns, updatedAt, _id }` index.
 * `finished` is the snapshot's `execution.status` when it is `completed` or `failed`, else `''`:
 * the value is JSON text the server cannot look into, so `snapshotRetention` filters on it.
 */
export class MongoSnapshotStore<TSnapshot extends object = WorkflowSnapshot> extends mongoStore(SnapshotStoreBase)<TSnapshot> {
  readonly #db: StoreDatabase<SnapshotDocument>;

  constructor(options: MongoSnapshotStoreOptions) {
    const lock = workflowLockOptions(options?.lock);
    const workflowLocks = (): StoreCollection[] =>
      lock ? [{ kind: 'workflowLocks', name: lock.collection ?? DEFAULT_COLLECTIONS.workflowLocks, writeConcern: writeConcernOption(lock.writeConcern, MAJORITY) }] : [];
    const db = storeDatabase<SnapshotDocument>(options, { kind: 'snapshots', name: 'MongoSnapshotStore', more: workflowLocks, wakeups: lock !== undefined });
    const leases = lock ? new MongoLeases(db, 'workflowLocks') : undefined;
    super(db.identity, db, { prefix: options.prefix, snapshotRetention: options.snapshotRetention, ...(leases && { workflowLeases: leases, lockTtl: lock?.ttl }) });
    this.#db = db;
    if (this.finishedAfter !== undefined) {
      db.sweep({ key: `snapshots:finished:${JSON.stringify(this.prefix)}:${this.finishedAfter}`, run: () => this.clearFinished() });
    }
  }

  /**
   * Removes the tombstones deleted snapshots of this prefix leave (once a few seconds old);
   * how many. A TTL index does it where the server has one (`capabilities.ttlIndex`).
   */
  clearExpired(): Promise<number> {
    return this.call('snapshots.clearExpired', async () => {
      const { collection, dialect } = await this.#db.use();
      return (await collection.deleteMany({ ...idsStartingWith(namespaceStart(this.prefix)), ...dialect.expiredValues() })).deletedCount;
    });
  }

  /**
   * `clearFinished()` (the kit's), in batches on the listing index. Snapshots saved before this
   * store wrote the `finished` field (by an older store, or by awaitly's own adapter) are kept
   * until they are saved again.
   */
  protected override async _clearFinished(finishedAfter: number): Promise<number> {
    const { collection, dialect } = await this.#db.use();
    const savedBefore = new Date(dialect.now().getTime() - finishedAfter);
    return deleteInBatches(collection, { ns: this.prefix, updatedAt: { $lt: savedBefore }, finished: { $in: [...FINISHED_STATUSES] } }, this.closeSignal);
  }

  /**
   * This store inside the caller's transaction (see `withTransaction`): same collection, every
   * command with the transaction's session; without the workflow lock (a lease taken inside a
   * transaction would vanish on rollback).
   */
  protected override _bind(session: object): this {
    return new MongoSnapshotStore<TSnapshot>(this.#db.viewOptions<MongoSnapshotStoreOptions>(session, { lock: false })) as this;
  }

  protected async _save(id: string, document: string, expectedVersion: number | null | undefined): Promise<boolean> {
    const { collection, dialect, session } = await this.#db.use();
    const write: ValueWrite = { _id: this.#id(id), fields: { value: document, ns: this.prefix, finished: finishedStatus(document) }, ttl: undefined };
    if (expectedVersion === undefined) {
      await dialect.writeValue(collection, write, session);
      return true;
    }
    return (await compareAndSetValue(collection, dialect, write, expectedVersion, session)) !== null;
  }

  protected async _load(id: string): Promise<StoredSnapshot | null> {
    const { collection, dialect } = await this.#db.use();
    const document = await readLive(collection, dialect, this.#id(id), { value: 1, version: 1, updatedAt: 1 });
    // A document without a version or write time (written by hand or by an older store) reads as version 1 written at the epoch, as in the key-value store (lastWritten).
    return document && { document: document.value!, version: Number(document.version ?? 1), updatedAt: lastWritten(document) };
  }

  protected async _delete(id: string): Promise<void> {
    const { collection, dialect } = await this.#db.use();
    await dialect.deleteValue(collection, this.#id(id));
  }

  /** An index range: this prefix's snapshots (a tombstone has no `ns`) whose `_id` starts with the id prefix, newest first. */
  protected async _list(idPrefix: string, after: SnapshotCursor | null, limit: number): Promise<StoredSnapshotItem[]> {
    const { collection } = await this.#db.use();
    const filter: Document = { ns: this.prefix, ...idsStartingWith(this.#id(idPrefix)) };
    if (after !== null) filter.$or = [{ updatedAt: { $lt: after.updatedAt } }, { updatedAt: after.updatedAt, _id: { $gt: this.#id(after.id) } }];
    const documents = await collection.find(filter, { projection: { updatedAt: 1 } }).sort({ updatedAt: -1, _id: 1 }).limit(limit).toArray();
    const start = namespaceStart(this.prefix).length;
    return documents.map((document) => ({ id: document._id.slice(start), updatedAt: lastWritten(document) }));
  }

  #id(id: string): string {
    return namespaceStart(this.prefix) + id;
  }
}

/**
 * The snapshot's `execution.status` if it is a finished one, else `''`. The text is parsed only
 * when it holds such a status word, so a running workflow's save pays for one substring search.
 */
function finishedStatus(document: string): string {
  if (!FINISHED_STATUSES.some((status) => document.includes(`"${status}"`))) return '';
  const status = (JSON.parse(document) as { execution?: { status?: unknown } } | null)?.execution?.status;
  return typeof status === 'string' && FINISHED_STATUSES.includes(status) ? status : '';
}

/** `lock` as given: `undefined` without one. */
function workflowLockOptions(lock: unknown): MongoWorkflowLockOptions | undefined {
  if (lock === undefined || lock === false) return undefined;
  if (lock === true) return {};
  if (lock === null || typeof lock !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `lock must be true or an object, got ${describeType(lock)}`);
  }
  return lock as MongoWorkflowLockOptions;
}

/**
 * A snapshot store that is also awaitly's `WorkflowLock`: `tryAcquire` takes a lease on the
 * workflow id in the lock collection (the rules of {@link MongoLockProvider}: server-clock
 * leases, majority writes, takeover of expired leases at once).
 */
export class MongoLockingSnapshotStore<TSnapshot extends object = WorkflowSnapshot> extends MongoSnapshotStore<TSnapshot> {
  declare readonly tryAcquire: WorkflowLock['tryAcquire'];
  declare readonly release: WorkflowLock['release'];
  declare readonly renew: WorkflowLock['renew'];
  declare readonly clearExpiredLocks: () => Promise<number>;

  constructor(options: MongoSnapshotStoreOptions & { lock: MongoWorkflowLockOptions | true }) {
    super({ ...options, lock: options?.lock || true });
  }
}

/** `mongo(url)` or `mongo({ url, database, collection, prefix, client, lock })` (seed 003's shape). */
export type MongoSnapshotOptions = MongoSnapshotStoreOptions;

/**
 * The one-liner: a snapshot store for `durable.run`. With `lock`, it is also a `WorkflowLock`.
 * It connects on first use (or `await store.ready()`).
 */
export function mongo<TSnapshot extends object = WorkflowSnapshot>(
  options: MongoSnapshotOptions & { lock: MongoWorkflowLockOptions | true },
): MongoLockingSnapshotStore<TSnapshot>;
export function mongo<TSnapshot extends object = WorkflowSnapshot>(urlOrOptions: string | MongoSnapshotOptions): MongoSnapshotStore<TSnapshot>;
export function mongo<TSnapshot extends object = WorkflowSnapshot>(urlOrOptions: string | MongoSnapshotOptions): MongoSnapshotStore<TSnapshot> {
  const options: MongoSnapshotOptions = typeof urlOrOptions === 'string' ? { url: urlOrOptions } : urlOrOptions;
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `mongo() needs a connection string or an options object, got ${describeType(options)}`);
  }
  return options.lock ? new MongoLockingSnapshotStore<TSnapshot>({ ...options, lock: options.lock }) : new MongoSnapshotStore<TSnapshot>(options);
}
