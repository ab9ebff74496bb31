import {
  DEFAULT_WORKFLOW_LOCK_TTL,
  StowageError,
  assertExpectedVersion,
  assertSnapshotObject,
  assertValidDuration,
  assertValidSnapshotId,
  describeType,
  jsonCodec,
  parseListOptions,
  toSnapshotPage,
  type SnapshotListItem,
  type SnapshotListOptions,
  type SnapshotPage,
  type SnapshotPageOptions,
  type SnapshotSaveOptions,
  type SnapshotStore,
  type VersionedSnapshot,
  type WorkflowLock,
  type WorkflowSnapshot,
} from '@stowage/core';
import type { Document, WriteConcernSettings } from 'mongodb';
import { isDuplicateKeyError, upsertById } from './errors.js';
import { MongoLockProvider } from './locks.js';
import { idFilterForPrefix } from './patterns.js';
import { MongoResource, type MongoStoreOptions } from './resource.js';
import { DEFAULT_COLLECTIONS } from './schema.js';

/**
 * A snapshot document. The snapshot is kept as JSON text: every JSON value round-trips exactly,
 * including object keys with `.` or a leading `$` (which BSON field names cannot hold safely),
 * nesting deeper than BSON's 100 levels, and `-0`/integer/double distinctions BSON would change.
 */
export interface SnapshotDocument {
  /** `prefix + id`. */
  _id: string;
  snapshot: string;
  /** 1 after the first save, +1 on every save. */
  version: number;
  /** Server time of the last save. */
  updatedAt: Date;
}

export interface MongoWorkflowLockOptions {
  /** The lock collection (default `awaitly_workflow_locks`). */
  collection?: string;
  /** Lease for `tryAcquire` without `ttlMs`, in ms (default 30 000). */
  ttl?: number;
  /** Write concern of lock writes (default `{ w: 'majority' }`). */
  writeConcern?: WriteConcernSettings;
}

export interface MongoSnapshotStoreOptions extends MongoStoreOptions {
  /** Prepended to every id in `_id`; `list()` returns ids without it (default `''`). */
  prefix?: string;
  /** Also implement awaitly's `WorkflowLock` (cross-process: one runner per workflow id). */
  lock?: MongoWorkflowLockOptions | boolean;
}

/**
 * Workflow snapshots in one collection (default `awaitly_snapshots`): a drop-in `store` for
 * awaitly's `durable.run`. Saves stamp `updatedAt` with the server's clock (`$currentDate`), and
 * `expectedVersion` makes a save conditional in the same command.
 */
export class MongoSnapshotStore<TSnapshot extends object = WorkflowSnapshot>
  extends MongoResource<SnapshotDocument>
  implements SnapshotStore<TSnapshot>
{
  readonly prefix: string;

  constructor(options: MongoSnapshotStoreOptions) {
    super('MongoSnapshotStore', 'snapshots', options);
    const prefix = options.prefix ?? '';
    if (typeof prefix !== 'string') {
      throw new StowageError('E_INVALID_OPTION', `prefix must be a string, got ${describeType(prefix)}`);
    }
    this.prefix = prefix;
  }

  async save(id: string, snapshot: TSnapshot, options?: SnapshotSaveOptions): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    assertSnapshotObject(snapshot);
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw new StowageError('E_INVALID_OPTION', `save options must be an object, got ${describeType(options)}`);
    }
    const expected = options?.expectedVersion;
    assertExpectedVersion(expected);
    const text = jsonCodec.encode(snapshot);
    const _id = this.prefix + id;
    const update = { $set: { snapshot: text }, $inc: { version: 1 }, $currentDate: { updatedAt: true } } as const;
    return this.run(async ({ collection }) => {
      const conflict = () => new StowageError('E_VERSION_CONFLICT', `snapshot "${id}" is not at version ${expected ?? '(absent)'}`);
      if (expected === undefined) {
        await upsertById(() => collection.updateOne({ _id }, update, { upsert: true }));
      } else if (expected === null) {
        // The filter matches no stored document, so an existing one makes the upsert collide on _id.
        try {
          await collection.updateOne({ _id, version: { $lt: 0 } }, update, { upsert: true });
        } catch (error) {
          if (isDuplicateKeyError(error)) throw conflict();
          throw error;
        }
      } else {
        const result = await collection.updateOne({ _id, version: expected }, update);
        if (result.matchedCount === 0) throw conflict();
      }
    });
  }

  async load(id: string): Promise<TSnapshot | null> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    return this.run(async ({ collection }) => {
      const document = await collection.findOne({ _id: this.prefix + id }, { projection: { snapshot: 1 } });
      return document === null ? null : (jsonCodec.decode(document.snapshot) as TSnapshot);
    });
  }

  async loadVersioned(id: string): Promise<VersionedSnapshot<TSnapshot> | null> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    return this.run(async ({ collection }) => {
      const document = await collection.findOne({ _id: this.prefix + id });
      if (document === null) return null;
      return {
        snapshot: jsonCodec.decode(document.snapshot) as TSnapshot,
        version: document.version,
        updatedAt: document.updatedAt.toISOString(),
      };
    });
  }

  async delete(id: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    await this.run(({ collection }) => collection.deleteOne({ _id: this.prefix + id }));
  }

  async list(options?: SnapshotListOptions): Promise<SnapshotListItem[]> {
    this.lifecycle.assertOpen();
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw new StowageError('E_INVALID_OPTION', `list options must be an object, got ${describeType(options)}`);
    }
    return (await this.listPage({ prefix: options?.prefix, limit: options?.limit })).items;
  }

  async listPage(options?: SnapshotPageOptions): Promise<SnapshotPage> {
    this.lifecycle.assertOpen();
    const { prefix, limit, after } = parseListOptions(options);
    const filter: Document = idFilterForPrefix(this.prefix + prefix);
    if (after !== null) {
      const updatedAt = new Date(after.updatedAt);
      filter.$or = [{ updatedAt: { $lt: updatedAt } }, { updatedAt, _id: { $gt: this.prefix + after.id } }];
    }
    return this.run(async ({ collection }) => {
      const documents = await collection
        .find(filter, { projection: { updatedAt: 1 } })
        .sort({ updatedAt: -1, _id: 1 })
        .limit(limit + 1)
        .toArray();
      const rows = documents.map((document) => ({
        id: document._id.slice(this.prefix.length),
        updatedAt: document.updatedAt.toISOString(),
      }));
      return toSnapshotPage(rows, limit);
    });
  }
}

/**
 * A snapshot store that is also awaitly's `WorkflowLock`: `tryAcquire` takes a lease on the
 * workflow id in the lock collection (same rules as {@link MongoLockProvider}: server-clock
 * leases, majority writes, takeover of expired leases at once).
 */
export class MongoLockingSnapshotStore<TSnapshot extends object = WorkflowSnapshot>
  extends MongoSnapshotStore<TSnapshot>
  implements WorkflowLock
{
  readonly #locks: MongoLockProvider;
  readonly #lockTtl: number;

  constructor(options: MongoSnapshotStoreOptions) {
    super(options);
    const lock = typeof options.lock === 'object' && options.lock !== null ? options.lock : {};
    const lockTtl = lock.ttl ?? DEFAULT_WORKFLOW_LOCK_TTL;
    assertValidDuration(lockTtl, 'lock.ttl');
    this.#lockTtl = lockTtl;
    this.#locks = new MongoLockProvider(
      {
        collection: lock.collection ?? DEFAULT_COLLECTIONS.workflowLocks,
        writeConcern: lock.writeConcern,
        autoCreate: options.autoCreate,
        dialect: options.dialect,
      },
      { connection: this.connection },
    );
  }

  async tryAcquire(id: string, options?: { ttlMs?: number }): Promise<{ ownerToken: string } | null> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    const handle = await this.#locks.acquire(this.prefix + id, this.#ttl(options));
    return handle === null ? null : { ownerToken: handle.owner };
  }

  async release(id: string, ownerToken: string): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    await this.#locks.release(this.prefix + id, ownerToken);
  }

  async renew(id: string, ownerToken: string, options?: { ttlMs?: number }): Promise<boolean> {
    this.lifecycle.assertOpen();
    assertValidSnapshotId(id);
    return this.#locks.extend(this.prefix + id, this.#ttl(options), ownerToken);
  }

  override async connect(): Promise<this> {
    await Promise.all([super.connect(), this.#locks.connect()]);
    return this;
  }

  protected override async beforeClose(): Promise<void> {
    await this.#locks.close();
  }

  #ttl(options: { ttlMs?: number } | undefined): number {
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw new StowageError('E_INVALID_OPTION', `lock options must be an object, got ${describeType(options)}`);
    }
    const ttl = options?.ttlMs ?? this.#lockTtl;
    assertValidDuration(ttl, 'ttlMs');
    return ttl;
  }
}

/** `mongo(url)` or `mongo({ url, database, collection, prefix, client, lock })` (seed 003's shape). */
export type MongoSnapshotOptions = MongoSnapshotStoreOptions;

/**
 * The one-liner: a snapshot store for `durable.run`. With `lock`, it is also a `WorkflowLock`.
 * It connects on first use (or `await store.connect()`).
 */
export function mongo<TSnapshot extends object = WorkflowSnapshot>(
  options: MongoSnapshotOptions & { lock: MongoWorkflowLockOptions | true },
): MongoLockingSnapshotStore<TSnapshot>;
export function mongo<TSnapshot extends object = WorkflowSnapshot>(urlOrOptions: string | MongoSnapshotOptions): MongoSnapshotStore<TSnapshot>;
export function mongo<TSnapshot extends object = WorkflowSnapshot>(
  urlOrOptions: string | MongoSnapshotOptions,
): MongoSnapshotStore<TSnapshot> {
  const options: MongoSnapshotOptions = typeof urlOrOptions === 'string' ? { url: urlOrOptions } : urlOrOptions;
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `mongo() needs a connection string or an options object, got ${describeType(options)}`);
  }
  return options.lock ? new MongoLockingSnapshotStore<TSnapshot>(options) : new MongoSnapshotStore<TSnapshot>(options);
}
