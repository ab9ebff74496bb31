import type { KeyValueEntry, KeyValueEntryInfo } from '@stowage/core';
import { KeyValueStoreBase, compareKeys, type Glob, type KeyValueStoreBaseOptions, type KeyValueWriteOp } from '@stowage/core/adapter';
import type { Document } from 'mongodb';
import { mongoStore, storeDatabase, type StoreDatabase } from '../database.js';
import { lastWritten, type KeyValueDocument } from '../documents.js';
import type { MongoStoreOptions } from '../options.js';
import { compareAndSetValue, findMatching, idsStartingWith, readLive } from './values.js';

export interface MongoKeyValueStoreOptions extends MongoStoreOptions, KeyValueStoreBaseOptions {}

/**
 * {@link KeyValueStore} on one MongoDB collection (default `workflow_state`), documents
 * `{ _id: key, value, version, updatedAt, expiresAt? }`. Every method is one command; reads
 * filter on expiry so an expired key is invisible at once, and the TTL index (where the
 * server has one) or `clearExpired()` removes it.
 */
export class MongoKeyValueStore extends mongoStore(KeyValueStoreBase) {
  readonly #db: StoreDatabase<KeyValueDocument>;

  constructor(options: MongoKeyValueStoreOptions) {
    const db = storeDatabase<KeyValueDocument>(options, { kind: 'kv', name: 'MongoKeyValueStore' });
    super(db.identity, db, options);
    this.#db = db;
  }

  /** This store inside the caller's transaction (see `withTransaction`): same collections, every command with the transaction's session. */
  protected override _bind(session: object): this {
    return new MongoKeyValueStore(this.#db.viewOptions(session)) as this;
  }

  protected override async _get(key: string): Promise<string | null> {
    const { collection, dialect } = await this.#db.use();
    return (await readLive(collection, dialect, key, { value: 1 }))?.value ?? null;
  }

  protected async _getMany(keys: readonly string[]): Promise<(string | null)[]> {
    const { collection, dialect } = await this.#db.use();
    const documents = await collection.find({ _id: { $in: [...new Set(keys)] }, ...dialect.liveValues() }, { projection: { value: 1 } }).toArray();
    const values = new Map(documents.map((document) => [document._id, document.value]));
    return keys.map((key) => values.get(key) ?? null);
  }

  protected override async _set(key: string, value: string, ttl: number | undefined): Promise<void> {
    const { collection, dialect, session } = await this.#db.use();
    await dialect.writeValue(collection, { _id: key, fields: { value }, ttl }, session);
  }

  /** All or nothing where the server has transactions (see `StoreConnection.atomically`). */
  protected async _setMany(writes: readonly KeyValueWriteOp[]): Promise<void> {
    const { collection, dialect } = await this.#db.use();
    const values = writes.map(({ key, value, ttl }) => ({ _id: key, fields: { value }, ttl }));
    await this.#db.atomically((session) => dialect.writeValues(collection, values, session));
  }

  protected override async _delete(key: string): Promise<boolean> {
    const { collection, dialect } = await this.#db.use();
    return dialect.deleteValue(collection, key);
  }

  protected async _deleteMany(keys: readonly string[]): Promise<number> {
    const { collection, dialect } = await this.#db.use();
    const { filter, update } = dialect.deleteValues(keys);
    return this.#db.atomically(async (session) => (await collection.updateMany(filter, update, { session })).matchedCount);
  }

  protected override async _exists(key: string): Promise<boolean> {
    const { collection, dialect } = await this.#db.use();
    return (await readLive(collection, dialect, key, { _id: 1 })) !== null;
  }

  protected override async _existsMany(keys: readonly string[]): Promise<boolean[]> {
    const { collection, dialect } = await this.#db.use();
    const documents = await collection.find({ _id: { $in: [...new Set(keys)] }, ...dialect.liveValues() }, { projection: { _id: 1 } }).toArray();
    const live = new Set(documents.map((document) => document._id));
    return keys.map((key) => live.has(key));
  }

  protected async _getEntry(key: string): Promise<KeyValueEntry | null> {
    const { collection, dialect } = await this.#db.use();
    const document = await readLive(collection, dialect, key, { value: 1, version: 1, updatedAt: 1 });
    return document === null ? null : { key, value: document.value!, ...entryInfo(document) };
  }

  protected async _entries(glob: Glob): Promise<KeyValueEntryInfo[]> {
    const { collection, dialect } = await this.#db.use();
    const documents = await findMatching(collection, glob, '', dialect.liveValues(), { value: 0 });
    return documents.map((document) => ({ key: document._id, ...entryInfo(document) })).sort((a, b) => compareKeys(a.key, b.key));
  }

  /** One page in `_id` order after `after` (see `findMatching`). */
  protected override async _entriesPage(glob: Glob, after: string | null, limit: number): Promise<KeyValueEntryInfo[]> {
    const { collection, dialect } = await this.#db.use();
    const documents = await findMatching(collection, glob, '', dialect.liveValues(), { value: 0 }, { after, limit });
    return documents.map((document) => ({ key: document._id, ...entryInfo(document) }));
  }

  /**
   * Up to `limit` live entries under `prefix`, newest first, ties by key, after `after`
   * (createStatePersistence's `list`): sorted and limited by the server, on the
   * `{ updatedAt: -1, _id: 1 }` index, so a page costs in proportion to it. An entry reads as
   * written at the epoch when its `updatedAt` is not a date after it (`lastWritten`: awaitly's
   * own documents have none), and such entries come last, by key. MongoDB sorts them below
   * every date but by type and value (a missing field as `null`), not by key, so they are read
   * by a second `find`, in `_id` order, which only the page that gets past the dated entries sends.
   */
  protected override async _recentEntries(prefix: string, after: { updatedAt: Date; key: string } | null, limit: number): Promise<KeyValueEntryInfo[]> {
    const { collection, dialect } = await this.#db.use();
    const range = idsStartingWith(prefix);
    const projection = { value: 0 };
    const entries: KeyValueEntryInfo[] = [];
    const toInfo = (document: KeyValueDocument) => ({ key: document._id, ...entryInfo(document) });
    const cursorTime = after?.updatedAt.getTime() ?? Infinity;
    if (cursorTime > 0) {
      const dated: Document = { $gt: EPOCH };
      if (after !== null) dated.$lte = after.updatedAt;
      const filter: Document = { ...range, ...dialect.liveValues(), updatedAt: dated };
      // Past the cursor: older, or as old with a greater key (`$and`: the dialect's filter may have an `$or`).
      if (after !== null) filter.$and = [{ $or: [{ updatedAt: { $lt: after.updatedAt } }, { _id: { $gt: after.key } }] }];
      const documents = await collection.find(filter, { projection }).sort({ updatedAt: -1, _id: 1 }).limit(limit).toArray();
      entries.push(...documents.map(toInfo));
    }
    if (entries.length < limit && cursorTime >= 0) {
      const ids: Document = { ...(range._id as Document | undefined) };
      if (cursorTime === 0) ids.$gt = after!.key;
      const filter: Document = { ...(Object.keys(ids).length > 0 && { _id: ids }), ...dialect.liveValues(), updatedAt: { $not: { $gt: EPOCH } } };
      const documents = await collection.find(filter, { projection }).sort({ _id: 1 }).limit(limit - entries.length).toArray();
      entries.push(...documents.map(toInfo));
    }
    return entries;
  }

  protected async _compareAndSet(key: string, value: string, expectedVersion: number | null, ttl: number | undefined): Promise<number | null> {
    const { collection, dialect, session } = await this.#db.use();
    return compareAndSetValue(collection, dialect, { _id: key, fields: { value }, ttl }, expectedVersion, session);
  }

  protected async _clearExpired(): Promise<number> {
    const { collection, dialect } = await this.#db.use();
    return (await collection.deleteMany(dialect.expiredValues())).deletedCount;
  }
}

/** Entries written before this time (or without a date) read as written at it (`lastWritten`). */
const EPOCH = new Date(0);

/** Version and times of a key-value document; one written by awaitly's own persistence has neither and reads as version 1 at the epoch. */
export function entryInfo(document: KeyValueDocument): Omit<KeyValueEntryInfo, 'key'> {
  return { version: Number(document.version ?? 1), updatedAt: lastWritten(document), expiresAt: document.expiresAt ?? null };
}
