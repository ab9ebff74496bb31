import type { Db, Document, IndexDescription } from 'mongodb';
import { assertValidCollectionName } from './connection.js';
import { isUnsupportedError } from './errors.js';

/** The kinds of collection stowage keeps. */
export type MongoCollectionKind =
  | 'kv'
  | 'snapshots'
  | 'workflowLocks'
  | 'locks'
  | 'cache'
  | 'circuitBreaker'
  | 'checkpoints'
  | 'idempotency';

/** Collection names used when none is given. */
export const DEFAULT_COLLECTIONS: Readonly<Record<MongoCollectionKind, string>> = Object.freeze({
  kv: 'workflow_state',
  snapshots: 'awaitly_snapshots',
  workflowLocks: 'awaitly_workflow_locks',
  locks: 'stowage_locks',
  cache: 'stowage_cache',
  circuitBreaker: 'stowage_circuit',
  checkpoints: 'stowage_checkpoints',
  idempotency: 'stowage_idempotency',
});

export interface MongoIndexSpec {
  key: Record<string, 1 | -1>;
  name: string;
  unique?: true;
  /** Present on TTL indexes (always 0: documents expire at their own `expiresAt`). */
  expireAfterSeconds?: 0;
}

export interface MongoCollectionSpec {
  kind: MongoCollectionKind;
  collection: string;
  /** Besides the `_id` index every collection has. */
  indexes: MongoIndexSpec[];
}

const TTL_INDEX: MongoIndexSpec = { key: { expiresAt: 1 }, name: 'expiresAt_ttl', expireAfterSeconds: 0 };

/**
 * Lock collections get no TTL index on purpose: a lock document carries the key's fencing
 * counter, and a TTL deletion would reset it. Released and expired leases stay as small
 * documents (one per key ever locked) whose fence keeps counting.
 */
const INDEXES: Readonly<Record<MongoCollectionKind, MongoIndexSpec[]>> = {
  kv: [TTL_INDEX],
  cache: [TTL_INDEX],
  idempotency: [TTL_INDEX],
  snapshots: [{ key: { updatedAt: -1, _id: 1 }, name: 'updatedAt_-1__id_1' }],
  workflowLocks: [],
  locks: [],
  circuitBreaker: [],
  checkpoints: [
    { key: { taskId: 1, sequence: 1 }, name: 'taskId_1_sequence_1', unique: true },
    { key: { taskId: 1 }, name: 'taskId_1' },
  ],
};

/** The collection and indexes of one store. */
export function collectionSpec(kind: MongoCollectionKind, collection: string = DEFAULT_COLLECTIONS[kind]): MongoCollectionSpec {
  assertValidCollectionName(collection);
  return { kind, collection, indexes: INDEXES[kind].map((index) => ({ ...index, key: { ...index.key } })) };
}

/**
 * Every collection and index stowage creates, for users who create them with their own
 * migrations (and pass `autoCreate: false`). Pass the collection names you configured.
 */
export function indexSpecs(collections: Partial<Record<MongoCollectionKind, string>> = {}): MongoCollectionSpec[] {
  return (Object.keys(DEFAULT_COLLECTIONS) as MongoCollectionKind[]).map((kind) => collectionSpec(kind, collections[kind]));
}

export interface SchemaState {
  /** A TTL index removes expired documents in the background. */
  ttlIndex: boolean;
}

/** Collections already set up by this process, per cluster, database and collection. */
const ensured = new Map<string, Promise<SchemaState>>();

/**
 * Creates the collection and its indexes once per process. Safe when many processes start at
 * once: "already exists" answers are success, and an index the server refuses to build as a
 * TTL index (some MongoDB-compatible servers) is built as a plain index and reported as
 * `ttlIndex: false` (reads filter on expiry, and `clearExpired()` removes expired documents).
 */
export function ensureCollection(db: Db, spec: MongoCollectionSpec): Promise<SchemaState> {
  const key = `${clusterKey(db)}\u0000${db.databaseName}\u0000${spec.collection}\u0000${spec.kind}`;
  let state = ensured.get(key);
  if (!state) {
    state = createCollection(db, spec);
    ensured.set(key, state);
    state.catch(() => ensured.delete(key));
  }
  return state;
}

/** With `autoCreate: false`: reads the existing indexes to report whether a TTL index is there. */
export async function inspectCollection(db: Db, spec: MongoCollectionSpec): Promise<SchemaState> {
  if (!spec.indexes.some((index) => index.expireAfterSeconds !== undefined)) return { ttlIndex: false };
  try {
    const indexes = await db.collection(spec.collection).listIndexes().toArray();
    return { ttlIndex: indexes.some(isTtlIndexOnExpiresAt) };
  } catch (error) {
    if ((error as { code?: unknown }).code === 26) return { ttlIndex: false }; // NamespaceNotFound
    throw error;
  }
}

async function createCollection(db: Db, spec: MongoCollectionSpec): Promise<SchemaState> {
  await ignoreCodes(db.createCollection(spec.collection), [48]); // NamespaceExists: another process won
  const collection = db.collection(spec.collection);
  // One index per command: simple to retry, and some MongoDB-compatible servers mishandle a
  // createIndexes listing several indexes that already exist.
  for (const index of spec.indexes.filter((candidate) => candidate.expireAfterSeconds === undefined)) {
    await withRetries(() => collection.createIndexes([toIndexDescription(index)]));
  }

  const ttl = spec.indexes.find((index) => index.expireAfterSeconds !== undefined);
  if (!ttl) return { ttlIndex: false };
  try {
    await withRetries(() => collection.createIndexes([toIndexDescription(ttl)]));
    return { ttlIndex: true };
  } catch (error) {
    if (!isUnsupportedError(error)) throw error;
    const existing = await collection.listIndexes().toArray();
    // An index on expiresAt with another name (e.g. made by hand) is fine as long as it is TTL.
    if (existing.some(isTtlIndexOnExpiresAt)) return { ttlIndex: true };
    if (!existing.some((index) => isOnExpiresAt(index))) {
      await withRetries(() => collection.createIndexes([{ key: { expiresAt: 1 }, name: 'expiresAt_1' }]));
    }
    return { ttlIndex: false };
  }
}

function toIndexDescription(index: MongoIndexSpec): IndexDescription {
  return { ...index, key: { ...index.key } };
}

function isOnExpiresAt(index: Document): boolean {
  const keys = Object.keys((index.key ?? {}) as Document);
  return keys.length === 1 && keys[0] === 'expiresAt';
}

function isTtlIndexOnExpiresAt(index: Document): boolean {
  return isOnExpiresAt(index) && typeof index.expireAfterSeconds === 'number';
}

async function ignoreCodes(operation: Promise<unknown>, codes: number[]): Promise<void> {
  try {
    await operation;
  } catch (error) {
    if (!codes.includes((error as { code?: unknown }).code as number)) throw error;
  }
}

/**
 * Concurrent index builds of the same index by several processes can answer with transient
 * conflicts (an implicit collection creation racing, a build in progress) or a dropped
 * connection; the build is idempotent, so it is simply tried again.
 */
async function withRetries(operation: () => Promise<unknown>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await operation();
      return;
    } catch (error) {
      const { code, name } = error as { code?: unknown; name?: unknown };
      const transient =
        code === 48 || code === 68 || code === 112 || code === 276 || code === 11000 || name === 'MongoNetworkError';
      if (!transient || attempt >= 5) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20 * attempt));
    }
  }
}

function clusterKey(db: Db): string {
  const hosts = (db.client as { options?: { hosts?: unknown[] } }).options?.hosts;
  return Array.isArray(hosts) ? hosts.map(String).sort().join(',') : 'unknown';
}
