import type { CircuitBreakerPersistedState } from '@stowage/core';
import type { Lease } from '@stowage/core/adapter';
import type { ClientSession, Collection, Document } from 'mongodb';
import type { CircuitDocument, IdempotencyDocument, KeyValueDocument, LockDocument } from '../documents.js';
import type { ProcessVersionDocument } from '../process/documents.js';

/**
 * How a store writes time-dependent documents:
 *
 * - `pipeline` (MongoDB >= 5.1): update pipelines, `$expr` filters and `$$NOW`. The server
 *   decides every expiry, lease and cool-down in the same command that reads or writes.
 * - `classic`: operator updates (`$set`, `$inc`, `$max`) with "now" from the server's clock as
 *   this process measures it, for MongoDB-compatible servers without update pipelines or
 *   `$$NOW` (FerretDB 1.x, some managed "MongoDB API" services).
 */
export type MongoDialectName = 'pipeline' | 'classic';

/** `auto` (default) detects the dialect once per client and database. */
export type MongoDialectOption = 'auto' | MongoDialectName;

/** An operator update (`{ $set: … }`) or an update pipeline (`[{ $set: … }]`). */
export type MongoUpdate = Document | Document[];

/** The filter and update of one command (merge the filter with the document's identity). */
export interface FilterAndUpdate {
  filter: Document;
  update: MongoUpdate;
}

/** A point read: the filter and projection sent, and the check of the document that came back. */
export interface PointRead {
  filter: Document;
  projection: Document;
  isLive(document: Document): boolean;
}

/**
 * One write of a value document (key-value entry or snapshot): `fields` (the `value`, and a
 * snapshot's `ns`) are stored literally, with a new version, `updatedAt` now and `expiresAt`
 * `ttl` ms from now (none without a ttl).
 */
export interface ValueWrite {
  _id: string;
  fields: { value: string } & Record<string, string>;
  ttl: number | undefined;
}

/** A process item version to insert: `at` (and, for a new item, `createdAt`) come from the server's clock. */
export type NewProcessVersion = Omit<ProcessVersionDocument, 'at' | 'createdAt'> & { createdAt?: Date };

/** How long a tombstone (the document a delete leaves, see `deleteValue`) outlives the delete before `clearExpired()` removes it. */
export const TOMBSTONE_GRACE = 5_000;

/**
 * The time-dependent filters and updates of every store, in one of two dialects (see
 * {@link MongoDialectName}): `pipeline.ts` and `classic.ts` implement it. Where both dialects
 * send the same command, a member returns its filter and update and the store sends them;
 * where they must send different commands (an operator update cannot always do in one what a
 * pipeline does), the member runs the whole operation on the collection it is given.
 *
 * Compare-and-set writes are `update` commands in both dialects. The pipeline dialect also
 * decides with `findAndModify` (atomic on MongoDB); the classic dialect never lets a
 * `findAndModify` decide between concurrent writers (it writes with a conditional `update`,
 * then reads what it wrote, or, for a lease, writes a fence it knew before: see
 * `ClassicDialect.acquireLease`): some servers of that dialect (jongodb) apply a conditional
 * `findAndModify` as a separate match and write, where two writers can both win.
 *
 * Value documents (key-value entries, snapshots, cache entries, idempotency records) expire
 * at `expiresAt` (absent: never). Versions follow one rule: a write stores
 * `max(previous version + 1, t)`, `t` from {@link nextVersion}, so a version is never reused
 * for a key, also after delete (a delete leaves a tombstone that keeps the version) or expiry.
 */
export interface MongoDialect {
  readonly name: MongoDialectName;

  /** The server's time as this process measures it (for dates a command carries as values). */
  now(): Date;
  /**
   * A version candidate: the server's time in microseconds as this process measures it,
   * above every candidate this process handed out before and above `above`.
   */
  nextVersion(above?: number): number;

  // --- value documents ---------------------------------------------------------------

  /** Filter: documents with a value that has not expired. */
  liveValues(): Document;
  /** Reads one value document by `_id` (the projection must list fields: inclusion). */
  readValue(_id: string, projection: Document): PointRead;
  /** Whether the document is live, and its stored version (`null`: no document). */
  inspectValue(collection: Collection<KeyValueDocument>, _id: string): Promise<{ live: boolean; version: number } | null>;
  /** Filter: expired values, and tombstones older than {@link TOMBSTONE_GRACE}. */
  expiredValues(): Document;
  /** Upserts the value with the next version (`set`, `save`). */
  writeValue(collection: Collection<KeyValueDocument>, write: ValueWrite, session?: ClientSession): Promise<void>;
  /**
   * Upserts every value, each with its own next version (`setMany`): one command where nothing
   * gets in the way; in the transaction of `session` when given.
   */
  writeValues(collection: Collection<KeyValueDocument>, writes: readonly ValueWrite[], session?: ClientSession): Promise<void>;
  /**
   * Upsert: writes the value with exactly `version` if the document is absent, expired or a
   * tombstone, and its stored version is below `version`; else changes nothing (applied: the
   * command upserted or modified a document and raised no duplicate-key error).
   */
  createValue(write: ValueWrite, version: number): FilterAndUpdate;
  /** Writes the value with exactly `version` if the document is live at `expectedVersion` (applied: matched). */
  replaceValue(write: ValueWrite, expectedVersion: number, version: number): FilterAndUpdate;
  /** Turns a live document into a tombstone (no value, `expiresAt` now, version kept); true when it was live. */
  deleteValue(collection: Collection<KeyValueDocument>, _id: string): Promise<boolean>;
  /** `updateMany`: turns the live ones of these documents into tombstones (matched: how many were live). */
  deleteValues(ids: readonly string[]): FilterAndUpdate;
  /** Sets `fields` literally and `expiresAt` `ttl` ms from now (none without), removes `unset` (unversioned documents: cache, idempotency). */
  setExpiring(fields: Record<string, string>, ttl: number | undefined, unset?: readonly string[]): MongoUpdate;

  // --- leases (lock documents) ---------------------------------------------------------

  /**
   * Grants the lease on `key` to `owner` if it is free, expired or already `owner`'s (who
   * keeps the fence); a grant to a new holder adds one to the fence, a refusal changes
   * nothing. `null` while another owner holds it.
   */
  acquireLease(collection: Collection<LockDocument>, key: string, owner: string, ttl: number): Promise<Lease | null>;
  /** `owner`'s live lease on `key` now ends `ttl` ms from now: the new end, or `null` when it is not `owner`'s live lease. */
  extendLease(collection: Collection<LockDocument>, key: string, owner: string, ttl: number): Promise<Date | null>;
  /** Filter: leases still held. */
  liveLease(): Document;
  /** Filter: leases whose time ran out. */
  endedLeases(): Document;

  // --- circuits ----------------------------------------------------------------------

  /** The stored circuit, with an `open` one past its cool-down reading `half-open`. */
  readCircuit(collection: Collection<CircuitDocument>, key: string): Promise<CircuitBreakerPersistedState | null>;
  /** `nextCircuitOnFailure` of the kit, atomically on the server; the new count. */
  recordFailure(collection: Collection<CircuitDocument>, key: string, maxFailures: number, cooldown: number | undefined): Promise<number>;
  /** The update of a success: closed, no failures, `lastSuccessTime` now (the server's clock; not `$currentDate`, which not every server has). */
  recordSuccess(): MongoUpdate;

  // --- idempotency records -------------------------------------------------------------

  /**
   * Claims `key` for `token` for `ttl` ms when it is absent, an expired result, or a claim whose
   * lease (`leaseUntil`) ran out; returns the record as it is afterwards (the claim is `token`'s
   * when its token is), or `null` when someone else changed it in between (look again). A claim
   * keeps its lease in `leaseUntil`, never in the TTL-indexed `expiresAt`: a claim whose lease
   * ran out stays until someone reserves the key again, so its token can still complete.
   */
  reserve(collection: Collection<IdempotencyDocument>, key: string, token: string, ttl: number): Promise<IdempotencyDocument | null>;

  // --- process items ---------------------------------------------------------------------

  /** Filter: items whose claim (`leaseUntil`) ran out. */
  leaseRanOut(): Document;
  /**
   * Claims the version `identity` names when nobody holds it (or its claim ran out), for
   * `owner` for `lease` ms, counting an attempt; the claimed version, or `null`.
   */
  claimItem(collection: Collection<ProcessVersionDocument>, identity: Document, owner: string, lease: number): Promise<ProcessVersionDocument | null>;
  /** The claim now ends `lease` ms from now. */
  extendItemLease(lease: number): MongoUpdate;
  /** The claim ends `delay` ms from now; one attempt given back with `refundAttempt`; `error` kept as `lastError`. */
  releaseItem(delay: number, refundAttempt: boolean, error: string | undefined): MongoUpdate;
  /**
   * Inserts the version unless its `_id` exists (the transition's compare-and-set), with `at`,
   * and `createdAt` when not given, on the server's clock (`$$NOW` where the dialect has it);
   * the document written, or `null` when the `_id` was taken.
   */
  insertVersion(collection: Collection<ProcessVersionDocument>, version: NewProcessVersion): Promise<ProcessVersionDocument | null>;
}

/**
 * The stored version a compare-and-set expects. Documents of awaitly's own persistence have no
 * version and read as version 1, so `1` also matches a document without one.
 */
export function versionIs(expected: number): unknown {
  return expected === 1 ? { $in: [1, null] } : expected;
}

/** A granted lease, from the lock document the command returned. */
export function toLease(key: string, owner: string, document: Pick<LockDocument, 'fence' | 'expiresAt' | 'renewed'>): Lease {
  return { key, owner, fence: Number(document.fence), expiresAt: document.expiresAt!, renewed: document.renewed === true };
}

/** The date `ms` after `date`. */
export function later(date: Date, ms: number): Date {
  return new Date(date.getTime() + ms);
}

/** A circuit document as the kit's persisted state (dates as epoch milliseconds). */
export function circuitState(document: Partial<CircuitDocument>): CircuitBreakerPersistedState {
  const state: CircuitBreakerPersistedState = { state: document.state!, failureCount: document.failureCount! };
  if (document.lastFailureTime) state.lastFailureTime = document.lastFailureTime.getTime();
  if (document.lastSuccessTime) state.lastSuccessTime = document.lastSuccessTime.getTime();
  if (document.openUntil) state.openUntil = document.openUntil.getTime();
  return state;
}
