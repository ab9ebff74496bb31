import type { CircuitBreakerPersistedState } from '@stowage/core';
import { effectiveCircuitState, type Lease, type MeasuredClock } from '@stowage/core/adapter';
import type { AnyBulkWriteOperation, ClientSession, Collection, Document, Filter } from 'mongodb';
import type { CircuitDocument, IdempotencyDocument, KeyValueDocument, LockDocument } from '../documents.js';
import type { ProcessVersionDocument } from '../process/documents.js';
import { isDuplicateKeyError, statementsToRetry } from '../errors.js';
import { ServerClock } from './clock.js';
import {
  TOMBSTONE_GRACE,
  circuitState,
  later,
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
 * The `classic` dialect: operator updates only, for servers without update pipelines or
 * `$$NOW`. "Now" is the server's clock as this process measures it (see `ServerClock`); one
 * operation takes it once, for its filter and every date it writes (`expiresAt - updatedAt`
 * is exactly the ttl).
 *
 * Reads and writes of one key filter on `_id` alone and judge expiry on arrival, against the
 * same clock: FerretDB 1.x, the main server of this dialect, uses its `_id` index only for a
 * filter that is `_id` equality and nothing else, and scans the collection for anything more.
 *
 * Operator updates cannot choose between branches the way a pipeline does, so a few operations
 * take a second command, in the cases listed in the README ("One command per operation").
 */

/**
 * Filter: the document has a value (a string) that has not expired at `now`. An `expiresAt`
 * that is not a date (a hand-written document) reads as expired, as the pipeline dialect's
 * `$expr` comparison has it.
 */
const liveAt = (now: Date) => ({ value: { $type: 'string' }, $or: [{ expiresAt: null }, { expiresAt: { $gt: now } }] });
/** Filter: the negation of {@link liveAt} (absent value, or an `expiresAt` that is not a later date). */
const notLiveAt = (now: Date) => ({ $or: [{ value: { $not: { $type: 'string' } } }, { expiresAt: { $not: { $gt: now }, $ne: null } }] });
/** Whether a document read back (with its value) is live at `now` by the rule of {@link liveAt}. */
const isLiveAt = (document: Document, now: Date) =>
  typeof document.value === 'string' &&
  (document.expiresAt === null || document.expiresAt === undefined || (document.expiresAt instanceof Date && document.expiresAt > now));
/** Filter: a lease that is free at `now` (released, never taken, or ended). */
const freeAt = (now: Date) => ({ $or: [{ expiresAt: null }, { expiresAt: { $lte: now } }] });
/** Filter on the stored fence: `fence`, where 0 stands for none (a lock document written before it had one). */
const fenceIs = (fence: number): unknown => (fence === 0 ? { $in: [0, null] } : fence);
/** How many keys' fences a lock store remembers (the oldest is forgotten first): a forgotten key's next grant reads it first. */
const KNOWN_FENCES = 10_000;
/** Remembers `fence` as the latest seen for `key`, forgetting the longest-unused key beyond {@link KNOWN_FENCES}. */
function rememberFence(fences: Map<string, number>, key: string, fence: number): void {
  fences.delete(key); // re-inserted last: a Map iterates in insertion order
  fences.set(key, fence);
  if (fences.size > KNOWN_FENCES) fences.delete(fences.keys().next().value!);
}
/** A delete: no value, no namespace, `expiresAt` now; the version stays. */
const tombstone = (now: Date): Document => ({ $set: { expiresAt: now }, $unset: { value: '', ns: '' } });

export class ClassicDialect extends ServerClock implements MongoDialect {
  readonly name = 'classic';
  readonly #atomicUpdates: boolean;
  /** Per lock collection: the fence last seen per key (see `acquireLease`). */
  readonly #fences = new WeakMap<Collection<LockDocument>, Map<string, number>>();

  /** `atomicUpdates`: the server applies a conditional update as one step (`ServerFeatures.atomicUpdates`). */
  constructor(clock: MeasuredClock, atomicUpdates: boolean) {
    super(clock);
    this.#atomicUpdates = atomicUpdates;
  }

  // --- value documents ---------------------------------------------------------------

  liveValues(): Document {
    return liveAt(this.now());
  }

  /** The value is always read: whether it is a string decides liveness (an operator filter cannot, see above). */
  readValue(_id: string, projection: Document): PointRead {
    return {
      filter: { _id },
      projection: { ...projection, value: 1, expiresAt: 1 },
      isLive: (document) => isLiveAt(document, this.now()),
    };
  }

  async inspectValue(collection: Collection<KeyValueDocument>, _id: string): Promise<{ live: boolean; version: number } | null> {
    const document = await collection.findOne({ _id }, { projection: { version: 1, value: 1, expiresAt: 1 } });
    return document ? { live: isLiveAt(document, this.now()), version: Number(document.version ?? 0) } : null;
  }

  expiredValues(): Document {
    const now = this.now();
    return { $or: [{ value: { $exists: true }, expiresAt: { $lte: now } }, { expiresAt: { $lte: later(now, -TOMBSTONE_GRACE) } }] };
  }

  /**
   * One `update`: an upsert that writes only if the stored version is below this process's
   * candidate. When it is not (another process wrote the key within the same instant, or the
   * server's clock stepped back) the upsert collides on `_id`; the stored version is read and
   * the write tried again above it. (No `$max`: not every server of this dialect has it.)
   * In a transaction, where a collision would abort it, the version is read first.
   */
  async writeValue(collection: Collection<KeyValueDocument>, write: ValueWrite, session?: ClientSession): Promise<void> {
    if (session) return this.#writeInTransaction(collection, [write], session);
    for (let above = 0, attempt = 1; ; attempt++) {
      const version = this.nextVersion(above);
      try {
        await collection.updateOne({ _id: write._id, version: { $not: { $gte: version } } }, this.#write(write, this.now(), version), { upsert: true });
        return;
      } catch (error) {
        if (!isDuplicateKeyError(error) || attempt >= 5) throw error;
      }
      above = Number((await collection.findOne({ _id: write._id }, { projection: { version: 1 } }))?.version ?? 0);
    }
  }

  /**
   * One `update` command; each statement writes only if the stored version is below its
   * candidate. A statement that found it otherwise (its upsert then collides on `_id`) is
   * written again on its own with {@link writeValue}; so is every statement where the server
   * does not say which collided (see `statementsToRetry`). In a transaction, where such a
   * collision would abort it, the stored versions are read first (one `find`), then written
   * above them.
   */
  async writeValues(collection: Collection<KeyValueDocument>, writes: readonly ValueWrite[], session?: ClientSession): Promise<void> {
    if (session) return this.#writeInTransaction(collection, writes, session);
    const now = this.now();
    const operations: AnyBulkWriteOperation<KeyValueDocument>[] = writes.map((write) => {
      const version = this.nextVersion();
      return {
        updateOne: { filter: { _id: write._id, version: { $not: { $gte: version } } }, update: this.#write(write, now, version), upsert: true },
      };
    });
    try {
      await collection.bulkWrite(operations, { ordered: false });
    } catch (error) {
      const retry = statementsToRetry(error, writes.length);
      if (retry === null) throw error;
      for (const index of retry) await this.writeValue(collection, writes[index]!);
    }
  }

  /** In a transaction (which isolates the read from concurrent writers): read the stored versions, write above them. */
  async #writeInTransaction(collection: Collection<KeyValueDocument>, writes: readonly ValueWrite[], session: ClientSession): Promise<void> {
    const ids = writes.map((write) => write._id);
    const stored = await collection.find({ _id: { $in: ids } }, { projection: { version: 1 }, session }).toArray();
    const versions = new Map(stored.map((document) => [document._id, Number(document.version ?? 0)]));
    const now = this.now();
    const operations: AnyBulkWriteOperation<KeyValueDocument>[] = writes.map((write) => ({
      updateOne: { filter: { _id: write._id }, update: this.#write(write, now, this.nextVersion(versions.get(write._id))), upsert: true },
    }));
    await collection.bulkWrite(operations, { ordered: true, session });
  }

  createValue(write: ValueWrite, version: number): FilterAndUpdate {
    const now = this.now();
    // A live document, or one whose version is not below `version`, does not match: the upsert then collides on `_id`.
    return { filter: { _id: write._id, ...notLiveAt(now), version: { $not: { $gte: version } } }, update: this.#write(write, now, version) };
  }

  replaceValue(write: ValueWrite, expectedVersion: number, version: number): FilterAndUpdate {
    const now = this.now();
    return { filter: { _id: write._id, version: versionIs(expectedVersion), ...liveAt(now) }, update: this.#write(write, now, version) };
  }

  /** One `findAndModify` on `_id` that leaves a tombstone whatever the document's state, and tells from the document as it was whether it was live. */
  async deleteValue(collection: Collection<KeyValueDocument>, _id: string): Promise<boolean> {
    const now = this.now();
    const before = await collection.findOneAndUpdate({ _id }, tombstone(now), { returnDocument: 'before' });
    return before !== null && isLiveAt(before, now);
  }

  deleteValues(ids: readonly string[]): FilterAndUpdate {
    const now = this.now();
    return { filter: { _id: { $in: [...ids] }, ...liveAt(now) }, update: tombstone(now) };
  }

  setExpiring(fields: Record<string, string>, ttl: number | undefined, unset: readonly string[] = []): MongoUpdate {
    return withExpiry({ $set: { ...fields } }, this.now(), ttl, unset);
  }

  /** The fields, `version`, `updatedAt` now and `expiresAt` from the ttl. */
  #write(write: ValueWrite, now: Date, version: number): Document {
    return withExpiry({ $set: { ...write.fields, version, updatedAt: now } }, now, write.ttl);
  }

  // --- leases ----------------------------------------------------------------------------

  /**
   * Without update pipelines an operator update cannot choose between "add one to the fence"
   * (a new holder) and "keep it" (the holder renewing), and an `update` does not say what it
   * wrote: the fence of a grant has to be known before the write or read after it. Where
   * updates are atomic (`atomicUpdates`: jongodb, MongoDB with `dialect: 'classic'`) it is
   * known before: the grant is a compare-and-set on the fence this store last saw for the key
   * (one conditional `update` that writes `fence + 1`; the server refuses it if anyone granted
   * the key since, or holds it), and only when that fence is unknown or out of date is the
   * document read first. A conditional `findAndModify` would answer in one command too, but
   * jongodb applies it as a separate match and write, where two acquirers can both take a free
   * lease (measured: 2 to 3 double grants in 200 rounds of 8), so it never decides here.
   *
   * Where updates are not atomic (FerretDB 1.x: every update is a read, then a separate write)
   * two compare-and-sets on the same fence can both "succeed" and hand out the same fence
   * twice: there the grant stays an `$inc` and the lease is read back after it (see
   * {@link #acquireReadingBack}).
   */
  async acquireLease(collection: Collection<LockDocument>, key: string, owner: string, ttl: number): Promise<Lease | null> {
    if (!this.#atomicUpdates) return this.#acquireReadingBack(collection, key, owner, ttl);
    const now = this.now();
    const expiresAt = later(now, ttl);
    const fences = this.#knownFences(collection);
    let fence = fences.get(key);
    // Three rounds: each failed compare-and-set means another grant or release landed in between.
    for (let round = 0; round < 3; round++) {
      if (fence !== undefined) {
        const granted = await collection.updateOne({ _id: key, fence: fenceIs(fence), ...freeAt(now) } as Filter<LockDocument>, {
          $set: { owner, expiresAt, renewed: false, fence: fence + 1 },
        });
        if (granted.matchedCount === 1) {
          rememberFence(fences, key, fence + 1);
          return { key, owner, fence: fence + 1, expiresAt, renewed: false };
        }
      }
      const stored = await collection.findOne({ _id: key }, { projection: { fence: 1, owner: 1, expiresAt: 1 } });
      if (stored === null) {
        // A new key: the first grant inserts it (an insert is exclusive on `_id` everywhere).
        try {
          await collection.insertOne({ _id: key, fence: 1, owner, expiresAt, renewed: false });
          rememberFence(fences, key, 1);
          return { key, owner, fence: 1, expiresAt, renewed: false };
        } catch (error) {
          if (!isDuplicateKeyError(error)) throw error;
          fence = undefined; // another acquirer created it first: read it again
          continue;
        }
      }
      fence = Number(stored.fence ?? 0);
      rememberFence(fences, key, fence);
      const live = stored.expiresAt instanceof Date && stored.expiresAt > now;
      if (live && stored.owner !== owner) return null;
      if (live) {
        // `owner` renews and keeps the fence; the filter names the fence, so a lease that ended and
        // was granted again in between (to anyone) is not taken for this one.
        const renewed = await collection.updateOne({ _id: key, owner, fence: fenceIs(fence), expiresAt: { $gt: now } } as Filter<LockDocument>, {
          $set: { expiresAt, renewed: true },
        });
        if (renewed.matchedCount === 1) return { key, owner, fence, expiresAt, renewed: true };
      }
    }
    return null;
  }

  /**
   * For servers without atomic updates (FerretDB 1.x): two conditional `update`s (take a free
   * lease adding one to the fence; else renew `owner`'s own), then a `find` of the grant by
   * owner and end. The read-back is kept there because the update is a read and a separate
   * write: two acquirers can both match a free lease, and one whose grant was overwritten before
   * it reads finds nothing (it narrows the race, it does not close it: `atomicUpdates: false`
   * says locks are not to be relied on there). Same instant for both: a lease that was live at
   * the first is renewed even if it ran out since.
   */
  async #acquireReadingBack(collection: Collection<LockDocument>, key: string, owner: string, ttl: number): Promise<Lease | null> {
    const now = this.now();
    const expiresAt = later(now, ttl);
    let granted = false;
    try {
      // When the lease is held the filter matches nothing and the upsert collides on `_id`.
      const taken = await collection.updateOne({ _id: key, ...freeAt(now) } as Filter<LockDocument>, { $set: { owner, expiresAt, renewed: false }, $inc: { fence: 1 } }, { upsert: true });
      granted = taken.upsertedCount + taken.modifiedCount > 0;
    } catch (error) {
      if (!isDuplicateKeyError(error)) throw error;
    }
    if (!granted) {
      const renewed = await collection.updateOne({ _id: key, owner, expiresAt: { $gt: now } }, { $set: { expiresAt, renewed: true } });
      if (renewed.matchedCount === 0) return null;
    }
    // The grant as written (null when another write landed after it, or it ended and was taken over in between).
    const lease = await collection.findOne({ _id: key, owner, expiresAt }, { projection: { fence: 1, expiresAt: 1, renewed: 1 } });
    return lease && toLease(key, owner, lease);
  }

  /** The fence this store last saw per key of `collection` (granted, or read), for the compare-and-set of the next grant. */
  #knownFences(collection: Collection<LockDocument>): Map<string, number> {
    let fences = this.#fences.get(collection);
    if (!fences) this.#fences.set(collection, (fences = new Map()));
    return fences;
  }

  /** One conditional `update`; the new end is known without reading it back. */
  async extendLease(collection: Collection<LockDocument>, key: string, owner: string, ttl: number): Promise<Date | null> {
    const now = this.now();
    const expiresAt = later(now, ttl);
    return (await collection.updateOne({ _id: key, owner, expiresAt: { $gt: now } }, { $set: { expiresAt } })).matchedCount === 1 ? expiresAt : null;
  }

  liveLease(): Document {
    return { expiresAt: { $gt: this.now() } };
  }

  endedLeases(): Document {
    return { expiresAt: { $lte: this.now() } };
  }

  // --- circuits --------------------------------------------------------------------------

  async readCircuit(collection: Collection<CircuitDocument>, key: string): Promise<CircuitBreakerPersistedState | null> {
    const document = await collection.findOne({ _id: key });
    if (document === null) return null;
    const state = circuitState(document);
    state.state = effectiveCircuitState(state.state, state.openUntil, this.now().getTime());
    return state;
  }

  /**
   * The count is a compare-and-set on the count read just before (a conditional `update`,
   * atomic on every server this dialect serves; a `findAndModify` with `$inc` is not on all of
   * them: jongodb's returned one count to two callers), retried when another failure landed in
   * between, so each caller gets its own count. Opening is a second, conditional command run
   * only by callers whose count reached `maxFailures`, and only the first of them matches.
   */
  async recordFailure(collection: Collection<CircuitDocument>, key: string, maxFailures: number, cooldown: number | undefined): Promise<number> {
    const now = this.now();
    let failureCount: number;
    for (;;) {
      const current = await collection.findOne({ _id: key }, { projection: { failureCount: 1 } });
      if (current === null) {
        try {
          await collection.insertOne({ _id: key, state: 'closed', failureCount: 1, lastFailureTime: now } as CircuitDocument);
          failureCount = 1;
          break;
        } catch (error) {
          if (isDuplicateKeyError(error)) continue; // another failure created it first
          throw error;
        }
      }
      const counted = await collection.updateOne(
        { _id: key, failureCount: current.failureCount } as Filter<CircuitDocument>,
        { $set: { failureCount: current.failureCount + 1, lastFailureTime: now } },
      );
      if (counted.modifiedCount === 1) {
        failureCount = current.failureCount + 1;
        break;
      }
    }
    if (failureCount >= maxFailures) {
      const open: Document =
        cooldown === undefined
          ? { $set: { state: 'open' }, $unset: { openUntil: '' } }
          : { $set: { state: 'open', openUntil: later(now, cooldown) } };
      const notOpen = { $or: [{ state: { $ne: 'open' } }, { openUntil: { $lte: now } }] };
      await collection.updateOne({ _id: key, failureCount: { $gte: maxFailures }, ...notOpen } as Filter<CircuitDocument>, open);
    }
    return failureCount;
  }

  // --- idempotency records -----------------------------------------------------------------

  /**
   * One command when the key is new or its record is live (`$setOnInsert` claims a new key and
   * otherwise returns the record untouched); taking over a claim whose lease ran out, or an
   * expired result, is a conditional `update` and a read.
   */
  async reserve(collection: Collection<IdempotencyDocument>, key: string, token: string, ttl: number): Promise<IdempotencyDocument | null> {
    const now = this.now();
    const claim = { status: 'in-flight' as const, token, leaseUntil: later(now, ttl) };
    const existing = await collection.findOneAndUpdate({ _id: key }, { $setOnInsert: claim } as Document, { upsert: true, returnDocument: 'after' });
    if (existing && !isClaimableAt(existing, now)) return existing;
    const claimable = {
      $or: [
        // A claim written before claims had a lease field of their own has its lease in `expiresAt`.
        { status: 'in-flight', $nor: [{ leaseUntil: { $gt: now } }, { leaseUntil: null, expiresAt: { $gt: now } }] },
        { status: 'completed', expiresAt: { $not: { $gt: now }, $ne: null } },
        { status: { $nin: ['in-flight', 'completed'] } },
      ],
    };
    const taken = await collection.updateOne({ _id: key, ...claimable } as Filter<IdempotencyDocument>, { $set: claim, $unset: { value: '', expiresAt: '' } });
    return taken.matchedCount === 1 ? collection.findOne({ _id: key }) : null;
  }

  // --- circuits (continued) ------------------------------------------------------------------

  recordSuccess(): MongoUpdate {
    return { $set: { state: 'closed', failureCount: 0, lastSuccessTime: this.now() }, $unset: { openUntil: '' } };
  }

  // --- process items -----------------------------------------------------------------------

  /** One `insert`, with `at` (and a new item's `createdAt`) from the measured clock. */
  async insertVersion(collection: Collection<ProcessVersionDocument>, version: NewProcessVersion): Promise<ProcessVersionDocument | null> {
    const now = this.now();
    const document: ProcessVersionDocument = { ...version, createdAt: version.createdAt ?? now, at: now };
    try {
      await collection.insertOne(document);
      return document;
    } catch (error) {
      if (isDuplicateKeyError(error)) return null;
      throw error;
    }
  }

  leaseRanOut(): Document {
    return { leaseUntil: { $lte: this.now() } };
  }

  /** A conditional `update`, then a `find` of the claim it wrote (by owner and lease end). */
  async claimItem(collection: Collection<ProcessVersionDocument>, identity: Document, owner: string, lease: number): Promise<ProcessVersionDocument | null> {
    const now = this.now();
    const leaseUntil = later(now, lease);
    const free = { $or: [{ leaseUntil: null }, { leaseUntil: { $lte: now } }] };
    const claimed = await collection.updateOne({ ...identity, ...free } as Filter<ProcessVersionDocument>, { $set: { leaseOwner: owner, leaseUntil }, $inc: { attempts: 1 } });
    if (claimed.matchedCount === 0) return null;
    return collection.findOne({ ...identity, leaseOwner: owner, leaseUntil } as Filter<ProcessVersionDocument>);
  }

  extendItemLease(lease: number): MongoUpdate {
    return { $set: { leaseUntil: later(this.now(), lease) } };
  }

  releaseItem(delay: number, refundAttempt: boolean, error: string | undefined): MongoUpdate {
    return {
      $set: { leaseUntil: later(this.now(), delay), ...(error !== undefined && { lastError: error }) },
      $inc: { attempts: refundAttempt ? -1 : 0 },
    };
  }
}

/** Whether an idempotency record may be claimed at `now`: its claim's lease ran out, its result expired, or it is neither. */
function isClaimableAt(document: IdempotencyDocument, now: Date): boolean {
  const lease = document.leaseUntil ?? document.expiresAt;
  if (document.status === 'in-flight') return !(lease instanceof Date && lease > now);
  if (document.status === 'completed') return !isLiveAt({ value: '', expiresAt: document.expiresAt }, now);
  return true;
}

/** Adds `expiresAt` (`ttl` ms after `now`) to an operator update, or removes it; removes `unset` too. */
function withExpiry(update: { $set: Document }, now: Date, ttl: number | undefined, unset: readonly string[] = []): Document {
  const removed = [...unset, ...(ttl === undefined ? ['expiresAt'] : [])];
  if (ttl !== undefined) update.$set.expiresAt = later(now, ttl);
  return removed.length === 0 ? update : { ...update, $unset: Object.fromEntries(removed.map((name) => [name, ''])) };
}
