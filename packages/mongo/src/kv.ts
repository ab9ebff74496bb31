import {
  StowageError,
  assertValidKey,
  assertValidKeys,
  assertValidStringValue,
  compareKeys,
  parseKeyValueWrites,
  ttlOfSetOptions,
  type KeyValueWrites,
  type KeyValueEntry,
  type KeyValueEntryInfo,
  type KeyValueSetOptions,
  type KeyValueStore,
  type KeyValueWrite,
} from '@stowage/core';
import type { AnyBulkWriteOperation, Collection, Document } from 'mongodb';
import { ServerTime, VALUE_IS_LIVE, expiresIn, literal } from './clock.js';
import { isDuplicateKeyError, upsertById } from './errors.js';
import { idFilterForGlob } from './patterns.js';
import { MongoResource, type MongoStoreOptions, type SharedConnection } from './resource.js';

/**
 * A key-value document (seed 000's `{ _id, value, expiresAt? }`, plus the version and the
 * server time of the last write).
 */
export interface KeyValueDocument {
  _id: string;
  value: string;
  /** 1 when the key is created, +1 on every write; an expired key starts over at 1. */
  version: number;
  /** Server time of the last write. */
  updatedAt: Date;
  /** Server time after which the key is gone; absent for no expiry. */
  expiresAt?: Date;
}

export type MongoKeyValueStoreOptions = MongoStoreOptions;

/**
 * {@link KeyValueStore} on one MongoDB collection (default `workflow_state`). Every method is
 * one command; reads filter on expiry so an expired key is invisible at once, and the TTL index
 * (where the server has one) or `clearExpired()` removes it.
 */
export class MongoKeyValueStore extends MongoResource<KeyValueDocument> implements KeyValueStore {
  constructor(options: MongoKeyValueStoreOptions, internal?: SharedConnection) {
    super('MongoKeyValueStore', 'kv', options, internal);
  }

  async get(key: string): Promise<string | null> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    return this.run(async ({ collection, time }) => {
      const document = await time.findLiveValue(collection, key, { value: 1 });
      return document?.value ?? null;
    });
  }

  async set(key: string, value: string, options?: KeyValueSetOptions): Promise<void> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertValidStringValue(value);
    const ttl = ttlOfSetOptions(options);
    return this.run(({ collection, time }) => setValue(collection, time, key, value, ttl));
  }

  async delete(key: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    return this.run(({ collection, time }) => deleteValue(collection, time, key));
  }

  async exists(key: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    return this.run(async ({ collection, time }) => {
      return (await time.findLiveValue(collection, key, { _id: 1 })) !== null;
    });
  }

  async keys(pattern = '*'): Promise<string[]> {
    this.lifecycle.assertOpen();
    const filter = idFilterForGlob(pattern);
    return this.run(async ({ collection, time }) => {
      const documents = await collection.find({ ...filter, ...time.liveValue() }, { projection: { _id: 1 } }).toArray();
      return documents.map((document) => document._id).sort(compareKeys);
    });
  }

  async getMany(keys: readonly string[]): Promise<(string | null)[]> {
    this.lifecycle.assertOpen();
    assertValidKeys(keys);
    if (keys.length === 0) return [];
    return this.run(async ({ collection, time }) => {
      const documents = await collection
        .find({ _id: { $in: [...new Set(keys)] }, ...time.liveValue() }, { projection: { value: 1 } })
        .toArray();
      const values = new Map(documents.map((document) => [document._id, document.value]));
      return keys.map((key) => values.get(key) ?? null);
    });
  }

  async setMany(entries: readonly KeyValueWrite[]): Promise<void> {
    this.lifecycle.assertOpen();
    const writes = parseKeyValueWrites(entries);
    if (writes.size === 0) return;
    return this.run(({ collection, time }) => setValues(collection, time, writes));
  }

  async deleteMany(keys: readonly string[]): Promise<number> {
    this.lifecycle.assertOpen();
    assertValidKeys(keys);
    if (keys.length === 0) return 0;
    return this.run(async ({ collection, time }) => {
      // Counts live keys; expired documents among them are left to the TTL index / clearExpired().
      const result = await collection.deleteMany({ _id: { $in: [...new Set(keys)] }, ...time.liveValue() });
      return result.deletedCount;
    });
  }

  async getEntry(key: string): Promise<KeyValueEntry | null> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    return this.run(async ({ collection, time }) => {
      const document = await time.findLiveValue(collection, key);
      return document === null ? null : { key: document._id, value: document.value, ...entryInfo(document) };
    });
  }

  async entries(pattern = '*'): Promise<KeyValueEntryInfo[]> {
    this.lifecycle.assertOpen();
    const filter = idFilterForGlob(pattern);
    return this.run(async ({ collection, time }) => {
      const documents = await collection.find({ ...filter, ...time.liveValue() }, { projection: { value: 0 } }).toArray();
      return documents
        .map((document) => ({ key: document._id, ...entryInfo(document) }))
        .sort((a, b) => compareKeys(a.key, b.key));
    });
  }

  async compareAndSet(
    key: string,
    value: string,
    expectedVersion: number | null,
    options?: KeyValueSetOptions,
  ): Promise<number> {
    this.lifecycle.assertOpen();
    assertValidKey(key);
    assertValidStringValue(value);
    if (expectedVersion !== null && (!Number.isSafeInteger(expectedVersion) || expectedVersion < 1)) {
      throw new StowageError('E_INVALID_OPTION', 'expectedVersion must be a positive integer or null');
    }
    const ttl = ttlOfSetOptions(options);
    return this.run(async ({ collection, time }) => {
      const conflict = () =>
        new StowageError('E_VERSION_CONFLICT', `"${key}" is not at version ${expectedVersion ?? '(absent)'}`);
      const now = time.now();
      if (expectedVersion === null && time.dialect === 'pipeline') {
        // One upsert on { _id }: the pipeline writes version 1 over an absent or expired key and
        // leaves a live one as it is, which the server reports as not modified. (MongoDB refuses
        // `$expr` in an upsert's filter, hence the decision inside the pipeline.)
        try {
          const result = await collection.updateOne({ _id: key }, createIfAbsent(value, ttl), { upsert: true });
          if (result.upsertedCount === 0 && result.modifiedCount === 0) throw conflict();
        } catch (error) {
          if (isDuplicateKeyError(error)) throw conflict(); // another create won the insert race
          throw error;
        }
        return 1;
      }
      if (expectedVersion === null) {
        // Classic dialect: the filter matches only an expired document; a live one makes the
        // upsert collide on _id.
        try {
          await collection.updateOne({ _id: key, ...time.expiredValue(now) }, writeWithVersion(time, now, value, ttl, 1), {
            upsert: true,
          });
        } catch (error) {
          if (isDuplicateKeyError(error)) throw conflict();
          throw error;
        }
        return 1;
      }
      const result = await collection.updateOne(
        { _id: key, version: expectedVersion, ...time.liveValue(now) },
        writeWithVersion(time, now, value, ttl, expectedVersion + 1),
      );
      if (result.matchedCount === 0) throw conflict();
      return expectedVersion + 1;
    });
  }

  async clearExpired(): Promise<number> {
    this.lifecycle.assertOpen();
    return this.run(async ({ collection, time }) => (await collection.deleteMany(time.expiredValue())).deletedCount);
  }
}


function entryInfo(document: KeyValueDocument): Omit<KeyValueEntryInfo, 'key'> {
  return { version: document.version, updatedAt: document.updatedAt, expiresAt: document.expiresAt ?? null };
}

/**
 * The pipeline-dialect write: the server decides in the same command whether the current
 * document is live (version + 1) or absent/expired (version 1), and stamps `$$NOW`.
 */
function pipelineWrite(value: string, ttl: number | undefined): Document[] {
  return [
    {
      $set: {
        value: literal(value),
        version: { $cond: [VALUE_IS_LIVE, { $add: [{ $ifNull: ['$version', 0] }, 1] }, 1] },
        updatedAt: '$$NOW',
        expiresAt: ttl === undefined ? '$$REMOVE' : expiresIn(ttl),
      },
    },
  ];
}

/** Pipeline dialect: writes version 1 when the key is absent or expired, else changes nothing. */
function createIfAbsent(value: string, ttl: number | undefined): Document[] {
  const ifAbsent = (written: unknown, kept: unknown) => ({ $cond: ['$absent', written, kept] });
  return [
    { $set: { absent: { $or: [{ $eq: [{ $type: '$version' }, 'missing'] }, { $not: [VALUE_IS_LIVE] }] } } },
    {
      $set: {
        value: ifAbsent(literal(value), '$value'),
        version: ifAbsent(1, '$version'),
        updatedAt: ifAbsent('$$NOW', '$updatedAt'),
        expiresAt: ifAbsent(ttl === undefined ? '$$REMOVE' : expiresIn(ttl), '$expiresAt'),
      },
    },
    { $unset: 'absent' },
  ];
}

/** A write that sets the version to `version` (compare-and-set), in either dialect. */
function writeWithVersion(
  time: ServerTime,
  now: Date,
  value: string,
  ttl: number | undefined,
  version: number,
): Document | Document[] {
  if (time.dialect === 'pipeline') {
    return [
      {
        $set: {
          value: literal(value),
          version,
          updatedAt: '$$NOW',
          expiresAt: ttl === undefined ? '$$REMOVE' : expiresIn(ttl),
        },
      },
    ];
  }
  return classicWrite(now, value, ttl, { $set: { version } });
}

/** An operator update (classic dialect), every date from the operation's `now`. */
function classicWrite(now: Date, value: string, ttl: number | undefined, version: Document): Document {
  const update: Document = {
    ...version,
    $set: {
      ...(version.$set as Document | undefined),
      value,
      updatedAt: now,
      ...(ttl === undefined ? {} : { expiresAt: ServerTime.after(now, ttl) }),
    },
  };
  if (ttl === undefined) update.$unset = { expiresAt: '' };
  return update;
}

/**
 * `set` in one command. The classic dialect filters on `_id` alone (see
 * `ServerTime.findLiveValue`) and gets the document as it was: a key that had expired counted
 * as absent, so its version starts over at 1, in a second command only then. (If another
 * write lands in between, the version is left as it is: the classic dialect makes no promise
 * for concurrent writes; see `atomicUpdates`.)
 */
export async function setValue(
  collection: Collection<KeyValueDocument>,
  time: ServerTime,
  key: string,
  value: string,
  ttl: number | undefined,
): Promise<void> {
  if (time.dialect === 'pipeline') {
    await upsertById(() => collection.updateOne({ _id: key }, pipelineWrite(value, ttl), { upsert: true }));
    return;
  }
  const now = time.now();
  const before = await upsertById(() =>
    collection.findOneAndUpdate({ _id: key }, classicWrite(now, value, ttl, { $inc: { version: 1 } }), {
      upsert: true,
      returnDocument: 'before',
    }),
  );
  if (before !== null && ServerTime.hasExpired(before, now)) {
    await collection.updateOne({ _id: key, version: before.version + 1 }, { $set: { version: 1 } });
  }
}

/** All writes in one `update` command (statements applied in order). */
async function setValues(collection: Collection<KeyValueDocument>, time: ServerTime, writes: KeyValueWrites): Promise<void> {
  if (time.dialect === 'pipeline') {
    const operations: AnyBulkWriteOperation<KeyValueDocument>[] = [...writes].map(([key, { value, ttl }]) => ({
      updateOne: { filter: { _id: key }, update: pipelineWrite(value, ttl), upsert: true },
    }));
    // Statements are applied in order; one that lost an insert race (see upsertById) is run
    // again with the rest of the batch after it.
    for (let start = 0, retried = false; start < operations.length; ) {
      try {
        await collection.bulkWrite(operations.slice(start), { ordered: true });
        return;
      } catch (error) {
        const [first] = writeErrorsOf(error);
        if (retried || !first || first.code !== 11000) throw error;
        start += first.index;
        retried = true;
      }
    }
    return;
  }
  const keys = [...writes.keys()];
  const now = time.now();
  const operations: AnyBulkWriteOperation<KeyValueDocument>[] = [...writes].map(([key, { value, ttl }]) => ({
    updateOne: {
      filter: { _id: key, ...time.liveValue(now) },
      update: classicWrite(now, value, ttl, { $inc: { version: 1 } }),
      upsert: true,
    },
  }));
  try {
    await collection.bulkWrite(operations, { ordered: false });
  } catch (error) {
    // Keys whose expired document was in the way (see setValue) are written one by one.
    const failed = writeErrorsOf(error);
    if (failed.length === 0 || failed.some((writeError) => writeError.code !== 11000)) throw error;
    for (const { index } of failed) {
      const key = keys[index]!;
      const { value, ttl } = writes.get(key)!;
      await setValue(collection, time, key, value, ttl);
    }
  }
}

function writeErrorsOf(error: unknown): { index: number; code: unknown }[] {
  const writeErrors = (error as { writeErrors?: unknown }).writeErrors;
  if (writeErrors === undefined || writeErrors === null) return [];
  return (Array.isArray(writeErrors) ? writeErrors : [writeErrors]) as { index: number; code: unknown }[];
}

/** Removes the key; true when it was live. */
export async function deleteValue(collection: Collection<KeyValueDocument>, time: ServerTime, key: string): Promise<boolean> {
  if (time.dialect === 'pipeline') {
    // An expired document is left for the TTL index; the pipeline dialect writes over it in one command.
    return (await collection.deleteOne({ _id: key, ...time.liveValue() })).deletedCount === 1;
  }
  // The classic dialect removes the document whatever its expiry, so a later set() needs one command.
  const removed = await collection.findOneAndDelete({ _id: key });
  return removed !== null && (removed.expiresAt === undefined || removed.expiresAt === null || removed.expiresAt > time.now());
}
