import type { CircuitBreakerPersistedState } from '@stowage/core';
import type { Lease, MeasuredClock } from '@stowage/core/adapter';
import type { AnyBulkWriteOperation, ClientSession, Collection, Document } from 'mongodb';
import type { CircuitDocument, IdempotencyDocument, KeyValueDocument, LockDocument } from '../documents.js';
import type { ProcessVersionDocument } from '../process/documents.js';
import { isDuplicateKeyError, upsertById, writeErrorsOf } from '../errors.js';
import { ServerClock } from './clock.js';
import {
  TOMBSTONE_GRACE,
  circuitState,
  toLease,
  versionIs,
  type FilterAndUpdate,
  type MongoDialect,
  type MongoUpdate,
  type NewProcessVersion,
  type PointRead,
  type ValueWrite,
} from './dialect.js';

/*
 * The `pipeline` dialect: every time-dependent decision is made by the server, on `$$NOW`,
 * inside the one command that reads or writes. Two rules the server enforces or safety needs:
 *
 * - MongoDB refuses `$expr` in the filter of an upsert, so an upsert's decision ("is the key
 *   live?") is made inside its update pipeline, on `{ _id }` alone;
 * - a caller's string inside an expression is wrapped in `$literal`, or `'$x'` would read
 *   field x and `'$$NOW'` the clock.
 */

const NOW = '$$NOW';
/** Later than any date a store writes: "no expiry" inside expressions. */
const FOREVER = new Date(8_640_000_000_000_000);
/** Earlier than any date a store writes: "no lease" inside expressions. */
const EPOCH = new Date(0);

/** A caller's value inside an expression: never read as a field path, variable or operator. */
export function literal(value: unknown): Document {
  return { $literal: value };
}

const literalFields = (fields: Record<string, string>) =>
  Object.fromEntries(Object.entries(fields).map(([name, value]) => [name, literal(value)]));
const fromNow = (ms: number) => ({ $add: [NOW, ms] });
/** `expiresAt` in a `$set` stage: `ttl` ms from now, or removed. */
const expiry = (ttl: number | undefined) => (ttl === undefined ? '$$REMOVE' : fromNow(ttl));
/** `$expr`: `field` holds a date later than now (`ifAbsent` stands in when it is missing). */
const laterThanNow = (field: string, ifAbsent: Date) => ({ $gt: [{ $ifNull: [`$${field}`, ifAbsent] }, NOW] });
/** `$expr`: a document with a value that has not expired. */
const VALUE_IS_LIVE = { $and: [{ $eq: [{ $type: '$value' }, 'string'] }, laterThanNow('expiresAt', FOREVER)] };
/** `$expr`: a lease that has not ended (absent: released). */
const LEASE_IS_LIVE = laterThanNow('expiresAt', EPOCH);
/** `max(previous version + 1, candidate)`: the one version rule, in one expression. */
const nextVersionOf = (candidate: number) => ({ $max: [{ $add: [{ $ifNull: ['$version', 0] }, 1] }, candidate] });
/** A delete: no value, no namespace, `expiresAt` now; the version stays. */
const TOMBSTONE = [{ $set: { expiresAt: NOW, value: '$$REMOVE', ns: '$$REMOVE' } }];

/** `$expr`: an open circuit's cool-down has ended. */
const COOLED_DOWN = { $and: [{ $eq: [{ $type: '$openUntil' }, 'date'] }, { $lte: ['$openUntil', NOW] }] };
/** `$expr`: the stored circuit reads `open` now. */
const READS_OPEN = { $and: [{ $eq: ['$state', 'open'] }, { $not: [COOLED_DOWN] }] };
/** `$expr`: what the stored circuit reads as now (`half-open` once an open circuit's cool-down ended). */
const READ_STATE = { $cond: [{ $and: [{ $eq: ['$state', 'open'] }, COOLED_DOWN] }, 'half-open', '$state'] };

export class PipelineDialect extends ServerClock implements MongoDialect {
  readonly name = 'pipeline';

  constructor(clock: MeasuredClock) {
    super(clock);
  }

  // --- value documents ---------------------------------------------------------------

  liveValues(): Document {
    return { $expr: VALUE_IS_LIVE };
  }

  readValue(_id: string, projection: Document): PointRead {
    return { filter: { _id, $expr: VALUE_IS_LIVE }, projection, isLive: () => true };
  }

  async inspectValue(collection: Collection<KeyValueDocument>, _id: string): Promise<{ live: boolean; version: number } | null> {
    const [document] = await collection.aggregate([{ $match: { _id } }, { $project: { version: 1, live: VALUE_IS_LIVE } }]).toArray();
    return document ? { live: document.live === true, version: Number(document.version ?? 0) } : null;
  }

  expiredValues(): Document {
    const tombstone = { $eq: [{ $type: '$value' }, 'missing'] };
    return { expiresAt: { $type: 'date' }, $expr: { $lte: ['$expiresAt', { $cond: [tombstone, { $subtract: [NOW, TOMBSTONE_GRACE] }, NOW] }] } };
  }

  async writeValue(collection: Collection<KeyValueDocument>, write: ValueWrite, session?: ClientSession): Promise<void> {
    await upsertById(() => collection.updateOne({ _id: write._id }, this.#write(write), { upsert: true, session }));
  }

  async writeValues(collection: Collection<KeyValueDocument>, writes: readonly ValueWrite[], session?: ClientSession): Promise<void> {
    const operations: AnyBulkWriteOperation<KeyValueDocument>[] = writes.map((write) => ({
      updateOne: { filter: { _id: write._id }, update: this.#write(write), upsert: true },
    }));
    // Statements are applied in order; one that lost an insert race (see upsertById) is run
    // again with the rest of the batch after it (in a transaction the race is a transient
    // conflict the driver retries the transaction for).
    for (let start = 0, retried = false; start < operations.length; ) {
      try {
        await collection.bulkWrite(operations.slice(start), { ordered: true, session });
        return;
      } catch (error) {
        const [first] = writeErrorsOf(error);
        if (retried || session || !first || first.code !== 11000) throw error;
        start += first.index;
        retried = true;
      }
    }
  }

  createValue(write: ValueWrite, version: number): FilterAndUpdate {
    const ifCreated = (created: unknown, kept: string) => ({ $cond: ['$_create', created, kept] });
    const fields = Object.fromEntries(Object.entries(write.fields).map(([name, value]) => [name, ifCreated(literal(value), `$${name}`)]));
    return {
      filter: { _id: write._id },
      update: [
        { $set: { _create: { $and: [{ $not: [VALUE_IS_LIVE] }, { $lt: [{ $ifNull: ['$version', 0] }, version] }] } } },
        {
          $set: {
            ...fields,
            version: ifCreated(version, '$version'),
            updatedAt: ifCreated(NOW, '$updatedAt'),
            expiresAt: ifCreated(expiry(write.ttl), '$expiresAt'),
          },
        },
        { $unset: '_create' },
      ],
    };
  }

  replaceValue(write: ValueWrite, expectedVersion: number, version: number): FilterAndUpdate {
    return {
      filter: { _id: write._id, version: versionIs(expectedVersion), $expr: VALUE_IS_LIVE },
      update: [{ $set: { ...literalFields(write.fields), version, updatedAt: NOW, expiresAt: expiry(write.ttl) } }],
    };
  }

  async deleteValue(collection: Collection<KeyValueDocument>, _id: string): Promise<boolean> {
    return (await collection.updateOne({ _id, $expr: VALUE_IS_LIVE }, TOMBSTONE)).matchedCount === 1;
  }

  deleteValues(ids: readonly string[]): FilterAndUpdate {
    return { filter: { _id: { $in: [...ids] }, $expr: VALUE_IS_LIVE }, update: TOMBSTONE };
  }

  setExpiring(fields: Record<string, string>, ttl: number | undefined, unset: readonly string[] = []): MongoUpdate {
    const removed = Object.fromEntries(unset.map((name) => [name, '$$REMOVE']));
    return [{ $set: { ...literalFields(fields), expiresAt: expiry(ttl), ...removed } }];
  }

  #write(write: ValueWrite): Document[] {
    return [{ $set: { ...literalFields(write.fields), version: nextVersionOf(this.nextVersion()), updatedAt: NOW, expiresAt: expiry(write.ttl) } }];
  }

  // --- leases ----------------------------------------------------------------------------

  /**
   * One command in every case: an upsert on `{ _id: key }` whose pipeline grants the lease
   * when it is free or `owner`'s, keeping the fence for the holder renewing and adding one
   * otherwise; when another owner holds it the document stays as it is. The returned document
   * says who holds the lease. Two first-time upserts of a new key can race to insert; the
   * loser's duplicate-key error means "held".
   */
  async acquireLease(collection: Collection<LockDocument>, key: string, owner: string, ttl: number): Promise<Lease | null> {
    const ifGranted = (granted: unknown, kept: unknown) => ({ $cond: ['$_grant', granted, kept] });
    const isOwner = { $eq: ['$owner', literal(owner)] };
    try {
      const document = await collection.findOneAndUpdate(
        { _id: key },
        [
          { $set: { _grant: { $or: [{ $not: [LEASE_IS_LIVE] }, isOwner] }, _renew: { $and: [LEASE_IS_LIVE, isOwner] } } },
          {
            $set: {
              fence: ifGranted({ $cond: ['$_renew', '$fence', { $add: [{ $ifNull: ['$fence', 0] }, 1] }] }, '$fence'),
              owner: ifGranted(literal(owner), '$owner'),
              expiresAt: ifGranted(fromNow(ttl), '$expiresAt'),
              // Kept in the document: the returned document is the command's only answer.
              renewed: ifGranted('$_renew', '$renewed'),
            },
          },
          { $unset: ['_grant', '_renew'] },
        ],
        { upsert: true, returnDocument: 'after' },
      );
      return document?.owner === owner ? toLease(key, owner, document) : null;
    } catch (error) {
      if (isDuplicateKeyError(error)) return null;
      throw error;
    }
  }

  async extendLease(collection: Collection<LockDocument>, key: string, owner: string, ttl: number): Promise<Date | null> {
    const update = [{ $set: { expiresAt: fromNow(ttl) } }];
    return (await collection.findOneAndUpdate({ _id: key, owner, $expr: LEASE_IS_LIVE }, update, { returnDocument: 'after' }))?.expiresAt ?? null;
  }

  liveLease(): Document {
    return { $expr: LEASE_IS_LIVE };
  }

  endedLeases(): Document {
    return { expiresAt: { $type: 'date' }, $expr: { $lte: ['$expiresAt', NOW] } };
  }

  // --- circuits --------------------------------------------------------------------------

  async readCircuit(collection: Collection<CircuitDocument>, key: string): Promise<CircuitBreakerPersistedState | null> {
    const projection = { state: READ_STATE, failureCount: 1, lastFailureTime: 1, lastSuccessTime: 1, openUntil: 1 };
    const [document] = await collection.aggregate<CircuitDocument>([{ $match: { _id: key } }, { $project: projection }]).toArray();
    return document ? circuitState(document) : null;
  }

  /**
   * Stage 1 counts; stage 2 decides, on the new count and the state as it reads now, whether
   * this failure opens the circuit; stage 3 applies that decision.
   */
  async recordFailure(collection: Collection<CircuitDocument>, key: string, maxFailures: number, cooldown: number | undefined): Promise<number> {
    const document = await upsertById(() =>
      collection.findOneAndUpdate(
        { _id: key },
        [
          {
            $set: {
              failureCount: { $add: [{ $ifNull: ['$failureCount', 0] }, 1] },
              lastFailureTime: NOW,
              state: { $ifNull: ['$state', 'closed'] },
            },
          },
          { $set: { _opens: { $and: [{ $gte: ['$failureCount', maxFailures] }, { $not: [READS_OPEN] }] } } },
          {
            $set: {
              state: { $cond: ['$_opens', 'open', '$state'] },
              openUntil: { $cond: ['$_opens', cooldown === undefined ? '$$REMOVE' : fromNow(cooldown), '$openUntil'] },
            },
          },
          { $unset: '_opens' },
        ],
        { upsert: true, returnDocument: 'after', projection: { failureCount: 1 } },
      ),
    );
    return document!.failureCount;
  }

  recordSuccess(): MongoUpdate {
    return [{ $set: { state: 'closed', failureCount: 0, lastSuccessTime: NOW, openUntil: '$$REMOVE' } }];
  }

  // --- idempotency records -----------------------------------------------------------------

  /**
   * One command: the filter always matches (or upserts) the record; the update writes a new
   * claim only when the record may be claimed now (new, a claim whose lease ran out, or an
   * expired result) and otherwise leaves every field as it is; the returned record says who
   * holds it.
   */
  reserve(collection: Collection<IdempotencyDocument>, key: string, token: string, ttl: number): Promise<IdempotencyDocument | null> {
    const ifClaimed = (claimed: unknown, kept: string) => ({ $cond: ['$_claim', claimed, kept] });
    // A claim written before claims had a lease field of their own has its lease in `expiresAt`.
    const leaseHeld = { $gt: [{ $ifNull: ['$leaseUntil', { $ifNull: ['$expiresAt', EPOCH] }] }, NOW] };
    const claimable = {
      $switch: {
        branches: [
          { case: { $eq: ['$status', 'in-flight'] }, then: { $not: [leaseHeld] } },
          { case: { $eq: ['$status', 'completed'] }, then: { $not: [laterThanNow('expiresAt', FOREVER)] } },
        ],
        default: true,
      },
    };
    return collection.findOneAndUpdate(
      { _id: key },
      [
        { $set: { _claim: claimable } },
        {
          $set: {
            status: ifClaimed('in-flight', '$status'),
            token: ifClaimed(literal(token), '$token'),
            leaseUntil: ifClaimed(fromNow(ttl), '$leaseUntil'),
            value: ifClaimed('$$REMOVE', '$value'),
            expiresAt: ifClaimed('$$REMOVE', '$expiresAt'),
          },
        },
        { $unset: '_claim' },
      ],
      { upsert: true, returnDocument: 'after' },
    );
  }

  // --- process items -----------------------------------------------------------------------

  leaseRanOut(): Document {
    return { leaseUntil: { $type: 'date' }, $expr: { $lte: ['$leaseUntil', NOW] } };
  }

  /** One `findAndModify`: free on the server clock, one attempt counted. */
  claimItem(collection: Collection<ProcessVersionDocument>, identity: Document, owner: string, lease: number): Promise<ProcessVersionDocument | null> {
    return collection.findOneAndUpdate(
      { ...identity, $expr: { $lte: [{ $ifNull: ['$leaseUntil', EPOCH] }, NOW] } },
      [{ $set: { leaseOwner: literal(owner), leaseUntil: fromNow(lease), attempts: { $add: ['$attempts', 1] } } }],
      { returnDocument: 'after' },
    );
  }

  extendItemLease(lease: number): MongoUpdate {
    return [{ $set: { leaseUntil: fromNow(lease) } }];
  }

  releaseItem(delay: number, refundAttempt: boolean, error: string | undefined): MongoUpdate {
    const attempts = refundAttempt ? { $max: [0, { $subtract: ['$attempts', 1] }] } : '$attempts';
    return [{ $set: { leaseUntil: fromNow(delay), attempts, ...(error !== undefined && { lastError: literal(error) }) } }];
  }

  /**
   * One `findAndModify` upsert on `_id` that writes the version only when the document is new
   * (an existing `_id` keeps every field), with `at` and a new item's `createdAt` at `$$NOW`;
   * the result's metadata says whether it inserted.
   */
  async insertVersion(collection: Collection<ProcessVersionDocument>, version: NewProcessVersion): Promise<ProcessVersionDocument | null> {
    const { _id, createdAt, ...fields } = version;
    const ifNew = (name: string, value: unknown) => ({ $cond: ['$_new', value, `$${name}`] });
    // The filter names the shard key (`{ process, itemId }`: an upsert on a sharded collection
    // must, before MongoDB 7.1), whose values an upsert starts from: `state` tells a new document.
    const set: Document = Object.fromEntries(Object.entries(fields).map(([name, value]) => [name, ifNew(name, literal(value))]));
    set.createdAt = ifNew('createdAt', createdAt === undefined ? NOW : literal(createdAt));
    set.at = ifNew('at', NOW);
    try {
      const result = await collection.findOneAndUpdate(
        { _id, process: version.process, itemId: version.itemId },
        [{ $set: { _new: { $eq: [{ $type: '$state' }, 'missing'] } } }, { $set: set }, { $unset: '_new' }],
        { upsert: true, returnDocument: 'after', includeResultMetadata: true },
      );
      return result.lastErrorObject?.upserted === undefined ? null : result.value;
    } catch (error) {
      if (isDuplicateKeyError(error)) return null; // a concurrent upsert of the same `_id` inserted it
      throw error;
    }
  }
}
