import type { CircuitState } from '@stowage/core';

/*
 * The documents stowage writes, one interface per collection kind. Dates are BSON dates on the
 * server's clock. Values, snapshots and checkpoint data are JSON (or codec) text, never BSON
 * sub-documents, so any JSON value round-trips exactly whatever its keys.
 */

/**
 * A key-value document (collection `workflow_state`): seed 000's `{ _id, value, expiresAt? }`
 * plus the version and the time of the last write. A delete leaves the document without its
 * `value`, with `expiresAt` at the time of the delete (a tombstone, see the README,
 * "Versions"). Documents of awaitly's own Mongo persistence, which have no `version` or
 * `updatedAt`, read as version 1 written at the epoch.
 */
export interface KeyValueDocument {
  _id: string;
  value?: string;
  /** `max(previous version + 1, server time in µs)`: grows with every write, never reused for the key. */
  version?: number;
  updatedAt?: Date;
  /** After this time the key is gone; absent for no expiry. */
  expiresAt?: Date;
}

/**
 * When a key-value or snapshot document was last written: its `updatedAt` when that is a
 * valid date after the epoch, else the epoch. A document written by awaitly's own persistence
 * has none, and one written by hand or another tool may hold anything there (a string, a
 * number, a date before 1970): such a document reads as written at the epoch rather than
 * failing every read and listing, and lists with the others written "at the epoch" (see
 * `MongoKeyValueStore._recentEntries`).
 */
export function lastWritten(document: { updatedAt?: unknown }): Date {
  const { updatedAt } = document;
  return updatedAt instanceof Date && updatedAt.getTime() > 0 ? updatedAt : new Date(0);
}

/**
 * A snapshot document (collection `awaitly_snapshots`): the key-value document shape, with the
 * store's prefix as `ns` and `_id` = `prefix + "\u0000" + id`, so each prefix is a namespace
 * of its own (`users:` never sees `users:admin:`) and a listing is an index range.
 */
export interface SnapshotDocument extends KeyValueDocument {
  /** The store's prefix; absent on the tombstone a delete leaves. */
  ns?: string;
  /** `execution.status` when `completed` or `failed`, else `''` (what `snapshotRetention` deletes); absent on documents older stores wrote. */
  finished?: string;
}

/** A cache entry (collection `stowage_cache`): `_id` = `prefix + "\u0000" + key`, `value` = codec text. */
export interface CacheDocument {
  _id: string;
  value: string;
  expiresAt?: Date;
}

/**
 * One lock per key (collections `stowage_locks`, `awaitly_workflow_locks`). The document
 * outlives its leases: `fence` counts every grant ever made for the key, so these collections
 * have no TTL index, and a release only removes `owner` and `expiresAt`.
 */
export interface LockDocument {
  _id: string;
  /** The highest fencing token granted for this key. */
  fence: number;
  /** Present while a lease is (or was, until it expired) held. */
  owner?: string;
  /** When the lease ends. */
  expiresAt?: Date;
  /** Whether the latest grant only renewed its owner's live lease (absent on documents of older versions). */
  renewed?: boolean;
}

/** One circuit (collection `stowage_circuit`, seed 001's circuit document). */
export interface CircuitDocument {
  _id: string;
  state: CircuitState;
  failureCount: number;
  lastFailureTime?: Date;
  lastSuccessTime?: Date;
  /** While `open`: from this time on, the circuit reads `half-open`. */
  openUntil?: Date;
}

/** One checkpoint (collection `stowage_checkpoints`, seed 001's shape, `_id` = checkpoint id). */
export interface CheckpointDocument {
  _id: string;
  taskId: string;
  sequence: number;
  timestamp: number;
  progress: number;
  /** The codec's text (strict JSON by default). */
  data: string;
  estimatedTimeRemaining?: number;
}

/**
 * One idempotency record (collection `stowage_idempotency`): an in-flight claim (`token`,
 * `leaseUntil` = end of the claim) or a completed result (`value` as codec text, `expiresAt`
 * absent for no expiry). A claim has no `expiresAt`, so the TTL index never deletes it: its
 * token can complete until someone else reserves the key (see `MongoDialect.reserve`).
 */
export interface IdempotencyDocument {
  _id: string;
  status: 'in-flight' | 'completed';
  token?: string;
  /** While in flight: the end of the claim's lease. */
  leaseUntil?: Date;
  value?: string;
  /** Once completed: when the result expires (absent: never). */
  expiresAt?: Date;
}
