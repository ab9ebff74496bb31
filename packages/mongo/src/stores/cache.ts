import type { CacheOptions } from '@stowage/core';
import { CacheProviderBase, compareKeys, type CacheWrite, type Glob } from '@stowage/core/adapter';
import type { AnyBulkWriteOperation } from 'mongodb';
import { mongoStore, storeDatabase, type StoreDatabase } from '../database.js';
import type { CacheDocument } from '../documents.js';
import { upsertById, statementsToRetry } from '../errors.js';
import type { MongoStoreOptions } from '../options.js';
import { findMatching, idsStartingWith, namespaceStart, readLive } from './values.js';

export interface MongoCacheProviderOptions extends MongoStoreOptions, CacheOptions {
  /** Send concurrent `get` and `set` calls of one tick as one command each (default true). */
  coalesce?: boolean;
}

/**
 * {@link CacheProvider} on one collection (default `stowage_cache`), documents
 * `{ _id: prefix + "\u0000" + key, value: <codec text>, expiresAt? }`. Each prefix is a
 * namespace: caches with different prefixes share a collection without ever seeing, listing,
 * clearing or expiring each other's entries, and a prefix's entries are one `_id` index range.
 */
export class MongoCacheProvider extends mongoStore(CacheProviderBase) {
  readonly #db: StoreDatabase<CacheDocument>;
  /** Where this cache's `_id`s start. */
  readonly #start: string;

  constructor(options: MongoCacheProviderOptions) {
    const db = storeDatabase<CacheDocument>(options, { kind: 'cache', name: 'MongoCacheProvider' });
    super(db.identity, db, options);
    this.#db = db;
    this.#start = namespaceStart(this.prefix);
  }

  protected async _get(key: string): Promise<string | null> {
    const { collection, dialect } = await this.#db.use();
    return (await readLive(collection, dialect, this.#start + key, { value: 1 }))?.value ?? null;
  }

  protected override async _getMany(keys: readonly string[]): Promise<(string | null)[]> {
    const { collection, dialect } = await this.#db.use();
    const ids = [...new Set(keys.map((key) => this.#start + key))];
    const documents = await collection.find({ _id: { $in: ids }, ...dialect.liveValues() }, { projection: { value: 1 } }).toArray();
    const values = new Map(documents.map((document) => [document._id, document.value]));
    return keys.map((key) => values.get(this.#start + key) ?? null);
  }

  protected async _set(key: string, text: string, ttl: number | undefined): Promise<void> {
    const { collection, dialect } = await this.#db.use();
    const update = dialect.setExpiring({ value: text }, ttl);
    await upsertById(() => collection.updateOne({ _id: this.#start + key }, update, { upsert: true }));
  }

  /** One `update` command; a statement that lost an insert race (see `upsertById`) is run again on its own (see `statementsToRetry`). */
  protected override async _setMany(writes: readonly CacheWrite[]): Promise<void> {
    const { collection, dialect } = await this.#db.use();
    const statements = writes.map(({ key, text, ttl }) => ({ filter: { _id: this.#start + key }, update: dialect.setExpiring({ value: text }, ttl) }));
    const operations: AnyBulkWriteOperation<CacheDocument>[] = statements.map(({ filter, update }) => ({ updateOne: { filter, update, upsert: true } }));
    try {
      await collection.bulkWrite(operations, { ordered: false });
    } catch (error) {
      const retry = statementsToRetry(error, statements.length);
      if (retry === null) throw error;
      await Promise.all(retry.map((index) => upsertById(() => collection.updateOne(statements[index]!.filter, statements[index]!.update, { upsert: true }))));
    }
  }

  protected async _delete(key: string): Promise<void> {
    const { collection } = await this.#db.use();
    await collection.deleteOne({ _id: this.#start + key });
  }

  protected override async _has(key: string): Promise<boolean> {
    const { collection, dialect } = await this.#db.use();
    return (await readLive(collection, dialect, this.#start + key, { _id: 1 })) !== null;
  }

  protected async _clear(): Promise<void> {
    const { collection } = await this.#db.use();
    await collection.deleteMany(idsStartingWith(this.#start));
  }

  protected async _keys(glob: Glob): Promise<string[]> {
    const { collection, dialect } = await this.#db.use();
    const documents = await findMatching(collection, glob, this.#start, dialect.liveValues(), { _id: 1 });
    return documents.map((document) => document._id.slice(this.#start.length)).sort(compareKeys);
  }

  /** One page in `_id` order after `after` (see `findMatching`). */
  protected override async _keysPage(glob: Glob, after: string | null, limit: number): Promise<string[]> {
    const { collection, dialect } = await this.#db.use();
    const documents = await findMatching(collection, glob, this.#start, dialect.liveValues(), { _id: 1 }, { after, limit });
    return documents.map((document) => document._id.slice(this.#start.length));
  }

  protected async _clearExpired(): Promise<number> {
    const { collection, dialect } = await this.#db.use();
    return (await collection.deleteMany({ ...idsStartingWith(this.#start), ...dialect.expiredValues() })).deletedCount;
  }
}
