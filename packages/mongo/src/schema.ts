import { StowageError } from '@stowage/core';
import { describeType } from '@stowage/core/adapter';
import type { Db, Document, IndexDescription, MongoClient } from 'mongodb';
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
  | 'idempotency'
  | 'process'
  | 'processClaims';

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
  process: 'stowage_process',
  processClaims: 'stowage_process_claims',
});

export interface MongoIndexSpec {
  key: Record<string, 1 | -1>;
  name: string;
  unique?: true;
  /** Present on TTL indexes (always 0: documents expire at their own `expiresAt`). */
  expireAfterSeconds?: 0;
}

/** A shard key: `hashed` spreads keys evenly, `1` keeps ranges (a prefix's listing) on one shard. */
export type MongoShardKey = Record<string, 1 | 'hashed'>;

export interface MongoCollectionSpec {
  kind: MongoCollectionKind;
  collection: string;
  /** Besides the `_id` index every collection has. */
  indexes: MongoIndexSpec[];
  /**
   * The shard key this collection may be sharded on: every single-document write stowage sends
   * to it (upserts, `findAndModify`, `updateOne`/`deleteOne`) filters on these fields by equality,
   * as MongoDB before 7.1 requires of upserts on a sharded collection.
   */
  shardKey: MongoShardKey;
}

const TTL_INDEX: MongoIndexSpec = { key: { expiresAt: 1 }, name: 'expiresAt_ttl', expireAfterSeconds: 0 };

/**
 * Lock collections get no TTL index on purpose: a lock document carries the key's fencing
 * counter, and a TTL deletion would reset it. Released and expired leases stay as small
 * documents (one per key ever locked) whose fence keeps counting. Snapshot collections get one
 * for the markers deleted snapshots leave (see the README, "Versions").
 */
const INDEXES: Readonly<Record<MongoCollectionKind, MongoIndexSpec[]>> = {
  // recentEntries (createStatePersistence's list): the newest entries first, without sorting the rest.
  kv: [{ key: { updatedAt: -1, _id: 1 }, name: 'updatedAt_-1__id_1' }, TTL_INDEX],
  cache: [TTL_INDEX],
  idempotency: [TTL_INDEX],
  snapshots: [{ key: { ns: 1, updatedAt: -1, _id: 1 }, name: 'ns_1_updatedAt_-1__id_1' }, TTL_INDEX],
  workflowLocks: [],
  locks: [],
  circuitBreaker: [],
  checkpoints: [
    { key: { taskId: 1, sequence: 1 }, name: 'taskId_1_sequence_1', unique: true },
    { key: { taskId: 1 }, name: 'taskId_1' },
  ],
  process: [
    { key: { process: 1, itemId: 1, version: 1 }, name: 'process_1_itemId_1_version_1', unique: true },
    { key: { process: 1, current: 1, state: 1, leaseUntil: 1, at: 1 }, name: 'process_1_current_1_state_1_leaseUntil_1_at_1' },
    // listItems (its sort: ids ascending, a worker-left duplicate's newer version first), getItem.
    { key: { process: 1, current: 1, itemId: 1, version: -1 }, name: 'process_1_current_1_itemId_1_version_-1' },
    // historyRetention: the oldest retired versions first, without reading the rest.
    { key: { current: 1, at: 1 }, name: 'current_1_at_1' },
  ],
  processClaims: [{ key: { of: 1, previous: 1, generation: -1 }, name: 'of_1_previous_1_generation_-1' }],
};

const BY_ID: MongoShardKey = { _id: 'hashed' };

/**
 * How each kind of collection may be sharded (see the README, "Deployments"). Checkpoints and
 * process versions by the prefix of their unique index (a sharded collection's unique indexes
 * must start with its shard key); claim tickets by the version they claim.
 */
const SHARD_KEYS: Readonly<Record<MongoCollectionKind, MongoShardKey>> = {
  kv: BY_ID,
  snapshots: BY_ID,
  workflowLocks: BY_ID,
  locks: BY_ID,
  cache: BY_ID,
  circuitBreaker: BY_ID,
  idempotency: BY_ID,
  checkpoints: { taskId: 1 },
  process: { process: 1, itemId: 1 },
  processClaims: { of: 1 },
};

/** The collection, indexes and shard key of one kind of collection. */
export function collectionSpec(kind: MongoCollectionKind, collection: string = DEFAULT_COLLECTIONS[kind]): MongoCollectionSpec {
  assertValidCollectionName(collection);
  return { kind, collection, indexes: INDEXES[kind].map((index) => ({ ...index, key: { ...index.key } })), shardKey: { ...SHARD_KEYS[kind] } };
}

/** The claim-ticket collection of a process collection: `<process collection>_claims`. */
export function processClaimsCollection(processCollection: string): string {
  return `${processCollection}_claims`;
}

/**
 * Every collection and index stowage can create, for users who create them with their own
 * migrations (and pass `autoCreate: false`). Pass the collection names you configured; the
 * process claims collection follows the process collection unless named.
 */
export function indexSpecs(collections: Partial<Record<MongoCollectionKind, string>> = {}): MongoCollectionSpec[] {
  const names = { ...collections };
  names.processClaims ??= processClaimsCollection(names.process ?? DEFAULT_COLLECTIONS.process);
  return (Object.keys(DEFAULT_COLLECTIONS) as MongoCollectionKind[]).map((kind) => collectionSpec(kind, names[kind]));
}

/** One privilege of a MongoDB role: `db.createRole({ role, privileges, roles: [] })`. */
export interface MongoPrivilege {
  /** A collection, or the whole database (`collection: ''`). */
  resource: { db: string; collection: string };
  actions: string[];
}

export interface RolePrivilegesOptions {
  /** Your collection names, as for {@link indexSpecs}. */
  collections?: Partial<Record<MongoCollectionKind, string>>;
  /** Only the collections of these kinds (default: every kind). */
  only?: readonly MongoCollectionKind[];
  /** The stores create collections and indexes: the stores' `autoCreate` (default `true`). */
  autoCreate?: boolean;
}

/** Kinds whose stores open change streams: lock wake-ups, process feeds. */
const WATCHED: readonly MongoCollectionKind[] = ['locks', 'workflowLocks', 'process'];

/**
 * The privileges a role needs for stowage's stores on `database` (what `grantsSql()` is for
 * PostgreSQL), per collection: `find`, `insert`, `update`, `remove` for the stores' calls (and
 * the transactions they begin); `listIndexes` for the start-up checks (without it they are
 * skipped under `autoCreate: false`); `changeStream` where the stores watch (without it they
 * poll); with `autoCreate`, `createCollection`, `createIndex`, and `collMod` where a plain
 * `expiresAt` index may need to become a TTL index. A process feed also reads the collection's
 * identity with `listCollections` on the database (without it, a dropped and re-created
 * collection goes unnoticed). Start-up lists collections with `nameOnly` and
 * `authorizedCollections`, which needs no action of its own.
 */
export function rolePrivileges(database: string, options: RolePrivilegesOptions = {}): MongoPrivilege[] {
  assertValidDatabaseName(database);
  const autoCreate = options.autoCreate ?? true;
  const kinds = new Set(options.only ?? (Object.keys(DEFAULT_COLLECTIONS) as MongoCollectionKind[]));
  const privileges = indexSpecs(options.collections)
    .filter((spec) => kinds.has(spec.kind))
    .map((spec): MongoPrivilege => {
      const actions = ['find', 'insert', 'update', 'remove', 'listIndexes'];
      if (WATCHED.includes(spec.kind)) actions.push('changeStream');
      if (autoCreate) actions.push('createCollection', 'createIndex', ...(wantsTtl(spec) ? ['collMod'] : []));
      return { resource: { db: database, collection: spec.collection }, actions };
    });
  if (kinds.has('process')) privileges.push({ resource: { db: database, collection: '' }, actions: ['listCollections'] });
  return privileges;
}

/** MongoDB's rules for collection names: no `$`, no NUL, not `system.*`, and short enough for a namespace. */
export function assertValidCollectionName(name: unknown, what = 'collection'): asserts name is string {
  if (
    typeof name !== 'string' ||
    name.length === 0 ||
    Buffer.byteLength(name) > 120 ||
    name.includes('$') ||
    name.includes('\u0000') ||
    name.startsWith('system.') ||
    name.startsWith('.') ||
    name.endsWith('.')
  ) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `${what} must be a collection name of 1 to 120 bytes without "$" or NUL, not starting with "system.", got ${typeof name === 'string' ? JSON.stringify(name) : describeType(name)}`,
    );
  }
}

export interface SchemaState {
  /** A TTL index removes expired documents in the background. */
  ttlIndex: boolean;
}

/** Collections already set up, per client (a cluster reached through it), database, collection and kind. */
const ensured = new WeakMap<MongoClient, Map<string, Promise<SchemaState>>>();

/**
 * Creates the collection and its indexes once per client. Keyed by the client object, not by
 * its hosts: a `mongodb+srv://` client knows its hosts only after the SRV lookup, so every
 * Atlas cluster would share one key. Safe when many processes start at once: "already exists"
 * answers are success. An index the server refuses to build as a TTL index (some
 * MongoDB-compatible servers) is built as a plain index and reported as `ttlIndex: false`
 * (reads filter on expiry, and `clearExpired()` removes expired documents).
 *
 * Refuses (`E_INVALID_OPTION`) a collection stowage cannot keep its promises in: one with a
 * default collation other than `simple` (distinct keys could compare equal), and a lock
 * collection with a TTL index (a TTL deletion would reset a key's fence).
 */
export function ensureCollection(db: Db, spec: MongoCollectionSpec): Promise<SchemaState> {
  let byCollection = ensured.get(db.client);
  if (!byCollection) ensured.set(db.client, (byCollection = new Map()));
  const key = `${db.databaseName}\u0000${spec.collection}\u0000${spec.kind}`;
  let state = byCollection.get(key);
  if (!state) {
    state = createCollection(db, spec);
    byCollection.set(key, state);
    state.catch(() => byCollection.delete(key));
  }
  return state;
}

/**
 * With `autoCreate: false`: creates nothing, refuses what {@link ensureCollection} refuses, and
 * reads the existing indexes to report whether a TTL index is there. A role without the
 * `listIndexes` action (only `find`, `insert`, `update`, `remove`) starts too: the indexes are then
 * the migration's to get right (see `indexSpecs()`), and `ttlIndex` is reported `false`.
 */
export async function inspectCollection(db: Db, spec: MongoCollectionSpec): Promise<SchemaState> {
  await collectionInfo(db, spec);
  let indexes: Document[];
  try {
    indexes = await existingIndexes(db, spec.collection);
  } catch (error) {
    if ((error as { code?: unknown }).code === 13) return { ttlIndex: false }; // Unauthorized
    throw error;
  }
  assertSchema(spec, indexes);
  return { ttlIndex: wantsTtl(spec) && indexes.some(isTtlIndexOnExpiresAt) };
}

async function createCollection(db: Db, spec: MongoCollectionSpec): Promise<SchemaState> {
  const info = await collectionInfo(db, spec);
  // Created only when the list says it is missing (or the server cannot list): a role without
  // the createCollection privilege works on a collection that exists.
  if (info === null || info === undefined) await ignoreCodes(db.createCollection(spec.collection), [48, ...NOT_IMPLEMENTED]); // 48: another process won
  // Refused before stowage adds indexes to it (they would take its collation).
  else assertSimpleIdCollation(spec, await existingIndexes(db, spec.collection));
  const collection = onPrimary(db, spec.collection);
  // One index per command: simple to retry, and some MongoDB-compatible servers mishandle a
  // createIndexes listing several indexes that already exist.
  for (const index of spec.indexes.filter((candidate) => candidate.expireAfterSeconds === undefined)) {
    // An index of that name or those keys with other options (IndexOptionsConflict 85 /
    // IndexKeySpecsConflict 86): assertIndexes below says which, or accepts an equivalent one.
    await ignoreCodes(withRetries(() => collection.createIndexes([toIndexDescription(index)])), [85, 86]);
  }
  assertSchema(spec, await existingIndexes(db, spec.collection));
  return { ttlIndex: wantsTtl(spec) && (await ensureTtlIndex(db, spec)) };
}

/** What start-up refuses in a collection's indexes: see {@link ensureCollection}. */
function assertSchema(spec: MongoCollectionSpec, indexes: Document[]): void {
  assertSimpleIdCollation(spec, indexes);
  assertNoTtlOnLocks(spec, indexes);
  assertIndexes(spec, indexes);
}

/**
 * The collection's default collation is the one of its `_id` index (`listCollections` with
 * `nameOnly`, which a least-privileged role can send, does not show the collection's options).
 */
function assertSimpleIdCollation(spec: MongoCollectionSpec, indexes: Document[]): void {
  const idIndex = indexes.find((index) => index.name === '_id_');
  assertSimpleCollation(spec.collection, { options: { collation: idIndex?.collation } });
}

/**
 * `E_INVALID_OPTION` unless the collection has the indexes stowage relies on: each unique index
 * of the spec (the checkpoints' `(taskId, sequence)`, the process versions'), on the same keys,
 * unique and over every document (not partial), under any name; and no index of a spec's name
 * with other keys or another `unique`. `createIndexes` is not enough to tell: FerretDB and
 * jongodb answer it with success when an index of that name exists, whatever its keys and
 * options, and a non-unique `taskId_1_sequence_1` would let duplicate checkpoints in (a unique
 * `taskId_1` would refuse a task's second checkpoint).
 */
function assertIndexes(spec: MongoCollectionSpec, indexes: Document[]): void {
  for (const wanted of spec.indexes.filter((index) => index.expireAfterSeconds === undefined)) {
    const named = indexes.find((index) => index.name === wanted.name);
    if (named && !(sameKeys(named, wanted) && (named.unique === true) === (wanted.unique === true))) {
      throw new StowageError(
        'E_INVALID_OPTION',
        `collection "${spec.collection}" has the index "${wanted.name}" ${describeIndex(named)}, where stowage needs it ${describeIndex(wanted)}: ` +
          `drop it (db.${spec.collection}.dropIndex("${wanted.name}")) and let a store create it again, or use another collection`,
      );
    }
    if (wanted.unique && !indexes.some((index) => sameKeys(index, wanted) && index.unique === true && index.partialFilterExpression === undefined)) {
      throw new StowageError(
        'E_INVALID_OPTION',
        `collection "${spec.collection}" has no index ${describeIndex(wanted)} over every document ("${wanted.name}", see indexSpecs()), which keeps its documents unique: ` +
          'create it, after dropping any other index on those keys that stands in its way, or use another collection',
      );
    }
  }
}

/** Same keys, in the same order and directions (a server may answer `1` as a double). */
function sameKeys(index: Document, wanted: MongoIndexSpec): boolean {
  const keys = Object.entries((index.key ?? {}) as Document);
  const wantedKeys = Object.entries(wanted.key);
  return keys.length === wantedKeys.length && keys.every(([field, direction], at) => field === wantedKeys[at]![0] && Number(direction) === wantedKeys[at]![1]);
}

/** `unique on {"taskId":1,"sequence":1}`, `non-unique on {"taskId":-1}`. */
function describeIndex(index: Document | MongoIndexSpec): string {
  const partial = 'partialFilterExpression' in index && index.partialFilterExpression !== undefined ? ' (partial)' : '';
  return `${index.unique === true ? 'unique' : 'non-unique'} on ${JSON.stringify(index.key)}${partial}`;
}

/**
 * The TTL index on `expiresAt`. An index on `expiresAt` made by hand is fine if it is a TTL
 * index, whatever its name; a plain one (IndexOptionsConflict) is converted with `collMod`
 * (MongoDB >= 5.1), or kept as the plain index `clearExpired()` uses where the server cannot.
 */
async function ensureTtlIndex(db: Db, spec: MongoCollectionSpec): Promise<boolean> {
  const collection = onPrimary(db, spec.collection);
  const ttl = spec.indexes.find((index) => index.expireAfterSeconds !== undefined)!;
  try {
    await withRetries(() => collection.createIndexes([toIndexDescription(ttl)]));
    return true;
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code !== 85 && code !== 86 && !isUnsupportedError(error)) throw error; // 85/86: IndexOptionsConflict / IndexKeySpecsConflict
  }
  const existing = await collection.listIndexes().toArray();
  if (existing.some(isTtlIndexOnExpiresAt)) return true;
  const plain = existing.find(isOnExpiresAt);
  if (!plain) {
    await withRetries(() => collection.createIndexes([{ key: { expiresAt: 1 }, name: 'expiresAt_1' }]));
    return false;
  }
  try {
    await db.command({ collMod: spec.collection, index: { name: plain.name as string, expireAfterSeconds: 0 } });
    return true;
  } catch (error) {
    if (isUnsupportedError(error)) return false;
    throw new StowageError(
      'E_INVALID_OPTION',
      `collection "${spec.collection}" has a plain index "${String(plain.name)}" on { expiresAt: 1 }, and stowage could not make it a TTL index: ` +
        `run db.runCommand({ collMod: "${spec.collection}", index: { name: "${String(plain.name)}", expireAfterSeconds: 0 } }) or drop it`,
      { cause: error },
    );
  }
}

/** Commands a server may not have at all (jongodb has no `create`, `listCollections` or `collMod`). */
const NOT_IMPLEMENTED = [59, 115, 238];

/**
 * The collection's `listCollections` entry (`{ name, type }`): `null` when there is none,
 * `undefined` when the server cannot list collections. Sent with `nameOnly` and
 * `authorizedCollections`, which together let a role without the `listCollections` action see the
 * collections it holds privileges on (either alone still needs the action); the collation is
 * checked on the `_id` index instead (see `assertSchema`).
 */
async function collectionInfo(db: Db, spec: MongoCollectionSpec): Promise<Document | null | undefined> {
  try {
    const listed = db.listCollections({ name: spec.collection }, { nameOnly: true, authorizedCollections: true, readPreference: 'primary' });
    return (await listed.toArray())[0] ?? null;
  } catch (error) {
    if (NOT_IMPLEMENTED.includes((error as { code?: unknown }).code as number)) return undefined;
    throw error;
  }
}

/**
 * `E_INVALID_OPTION` for a collection whose default collation is not `simple` (binary): under
 * a case- or accent-insensitive collation, `_id: "A"` and `_id: "a"` are one key, so distinct
 * keys would overwrite each other and ranges would list the wrong keys.
 */
export function assertSimpleCollation(collection: string, info: Document | null | undefined): void {
  const collation = (info?.options as Document | undefined)?.collation as Document | undefined;
  if (collation !== undefined && collation !== null && collation.locale !== 'simple') {
    throw new StowageError(
      'E_INVALID_OPTION',
      `collection "${collection}" has the default collation ${JSON.stringify(collation)}; stowage needs the simple (binary) collation, ` +
        'where distinct keys never compare equal: use another collection',
    );
  }
}

/** `E_INVALID_OPTION` for a lock collection with a TTL index: deleting a lock document would reset its fence. */
function assertNoTtlOnLocks(spec: MongoCollectionSpec, indexes: Document[]): void {
  if (!isLockKind(spec.kind)) return;
  const ttl = indexes.find((index) => typeof index.expireAfterSeconds === 'number');
  if (ttl) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `lock collection "${spec.collection}" has the TTL index "${String(ttl.name)}": a TTL deletion of a lock document would reset its fencing counter, ` +
        'so fences could go back. Drop that index, or use another collection for locks',
    );
  }
}

async function existingIndexes(db: Db, collection: string): Promise<Document[]> {
  try {
    return await onPrimary(db, collection).listIndexes().toArray();
  } catch (error) {
    if ((error as { code?: unknown }).code === 26) return []; // NamespaceNotFound
    throw error;
  }
}

/**
 * The collection, read on the primary whatever the client's read preference: a secondary may not
 * have the collection or the index just created yet, and start-up would refuse what is there;
 * adoption moves what the primary holds.
 */
export const onPrimary = (db: Db, collection: string) => db.collection(collection, { readPreference: 'primary' });
const isLockKind = (kind: MongoCollectionKind) => kind === 'locks' || kind === 'workflowLocks';
const wantsTtl = (spec: MongoCollectionSpec) => spec.indexes.some((index) => index.expireAfterSeconds !== undefined);

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
/**
 * FerretDB 1.x on its SQLite backend answers two concurrent `createIndexes` of one index (two
 * stores starting at once) with InternalError 1 "index … already exists" for the one that lost:
 * asked again, it finds the index there and succeeds.
 */
function indexCreatedMeanwhile(code: unknown, message: unknown): boolean {
  return code === 1 && typeof message === 'string' && /index .* already exists/.test(message);
}

async function withRetries(operation: () => Promise<unknown>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await operation();
      return;
    } catch (error) {
      const { code, name, message } = error as { code?: unknown; name?: unknown; message?: unknown };
      const transient =
        code === 48 || code === 68 || code === 112 || code === 276 || code === 11000 || name === 'MongoNetworkError' || indexCreatedMeanwhile(code, message);
      if (!transient || attempt >= 5) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20 * attempt));
    }
  }
}

const FORBIDDEN_IN_DATABASE_NAMES = /[/\\. "$*<>:|?]/;

/** MongoDB's rules for database names (the stricter Windows set, so a name works everywhere). */
export function assertValidDatabaseName(name: unknown, what = 'database'): asserts name is string {
  if (
    typeof name !== 'string' ||
    name.length === 0 ||
    Buffer.byteLength(name) > 63 ||
    FORBIDDEN_IN_DATABASE_NAMES.test(name) ||
    name.includes('\u0000')
  ) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `${what} must be a name of 1 to 63 bytes without / \\ . " $ * < > : | ? spaces or NUL, got ${typeof name === 'string' ? JSON.stringify(name) : describeType(name)}`,
    );
  }
}
