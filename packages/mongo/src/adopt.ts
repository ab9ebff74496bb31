import { StowageError, richCodec } from '@stowage/core';
import { ObjectId, type AnyBulkWriteOperation, type Collection, type Db, type Document, type MongoClient } from 'mongodb';
import { isDuplicateKeyError, statementsToRetry } from './errors.js';
import { onPrimary } from './schema.js';

/*
 * Collections that go-go-scope's own MongoDB adapters (`MongoDBAdapter`,
 * `MongoDBIdempotencyAdapter`) wrote: `go_goscope_locks`, `go_goscope_circuit`,
 * `go_goscope_cache`, `go_goscope_idempotency`, `go_goscope_checkpoints`, the names
 * `goGoScopePersistence` uses too.
 *
 * Their documents have an ObjectId `_id` and the full key in a `key` field with a unique index
 * (`keyPrefix + 'lock:' + key`, `'circuit:'`, `'cache:'`; idempotency: its own prefix + key);
 * values are BSON values, not text. Stowage keys its documents by a string `_id`. At start-up,
 * once, the documents of this `keyPrefix` are rewritten in stowage's shape under the key the
 * stowage provider uses, values through the codec goGoScopePersistence gives the stores
 * (`richCodec`). In place (the default), go-go-scope's unique `{ key: 1 }` index goes first
 * (stowage's documents have no `key`, and a unique index counts a missing field as one value),
 * and so does the TTL index of the lock collection (a TTL deletion would reset a lock's fence);
 * a server that cannot drop an index (jongodb) is refused, and the documents can be moved into
 * other collections instead (`adoptFrom`). Before anything changes, every go-go-scope document
 * is checked: a shape stowage does not know refuses the start with `E_INVALID_OPTION`, and
 * nothing is changed.
 *
 * Each document is inserted in stowage's shape before the original is deleted, and an insert
 * never overwrites: two processes adopting at once, or one after a crash, convert each
 * document once, and a crash at any point loses none. Checkpoints adopted in place cannot be
 * inserted beside their originals (the unique `(taskId, sequence)` index holds both shapes):
 * a batch is inserted into a staging collection (`<collection>_adopting`) first, then the
 * originals are deleted, then the batch moves from staging into the collection; an adoption
 * that starts finds what a crash left in staging and moves it first. Documents of another
 * keyPrefix stay where they are (stowage never reads a document whose `_id` is not a string).
 *
 * A lock go-go-scope holds keeps excluding stowage's acquirers: it becomes a stowage lease with
 * the same owner and end (fence 1: go-go-scope's grant counts as the first). go-go-scope's own
 * processes must be stopped before the switch: they cannot see stowage's leases, and once the
 * unique index is gone their inserts no longer exclude each other (see the README).
 */

/** The slot of go-go-scope's persistence a collection holds. */
export type GoGoScopeSlot = 'lock' | 'circuitBreaker' | 'cache' | 'idempotency' | 'checkpoint';

export interface GoGoScopeAdoption {
  /** goGoScopePersistence's keyPrefix (and that of go-go-scope's `MongoDBAdapter`). */
  keyPrefix: string;
  /** The keyPrefix go-go-scope's `MongoDBIdempotencyAdapter` had (its default: none). */
  idempotencyKeyPrefix: string;
  /**
   * Per slot: the store's collection (`target`) and where go-go-scope's documents are
   * (`source`: the same collection to adopt in place, or another to move them from).
   */
  slots: ReadonlyArray<{ slot: GoGoScopeSlot; source: string; target: string }>;
}

/** Adoptions to run before a store on (Db, collection) starts; set up by goGoScopePersistence. */
const registered = new WeakMap<Db, Map<string, GoGoScopeAdoption>>();
/** Adoptions done (or running), per client, database and adoption. */
const adopted = new WeakMap<MongoClient, Map<string, Promise<void>>>();

/** Says that the stores opened on `db` and the adoption's collections adopt go-go-scope's documents first. */
export function registerGoGoScopeAdoption(db: Db, adoption: GoGoScopeAdoption): void {
  let byCollection = registered.get(db);
  if (!byCollection) registered.set(db, (byCollection = new Map()));
  for (const { target } of adoption.slots) byCollection.set(target, adoption);
}

/**
 * Runs the adoption registered for (db, collection), once per client, for all the slots of its
 * goGoScopePersistence together (a no-op without one): a refusal then leaves every slot as it was.
 */
export function adoptRegistered(db: Db, collection: string): Promise<void> {
  const adoption = registered.get(db)?.get(collection);
  if (adoption === undefined) return Promise.resolve();
  let byKey = adopted.get(db.client);
  if (!byKey) adopted.set(db.client, (byKey = new Map()));
  const key = JSON.stringify([db.databaseName, adoption]);
  let running = byKey.get(key);
  if (!running) {
    running = adoptGoGoScope(db, adoption);
    byKey.set(key, running);
    running.catch(() => byKey.delete(key)); // tried again by the next start
  }
  return running;
}

/** Every ObjectId: a range of the `_id` index, and no string `_id` (stowage's) is in it. */
const GO_GO_SCOPE_IDS = { _id: { $gte: new ObjectId('000000000000000000000000'), $lte: new ObjectId('ffffffffffffffffffffffff') } };
const BATCH = 500;

interface SlotWork {
  slot: GoGoScopeSlot;
  source: Collection;
  target: Collection;
  inPlace: boolean;
  /** Where checkpoints adopted in place wait between their originals' delete and their insert. */
  staging: Collection | undefined;
  /** go-go-scope's indexes that stowage's documents cannot live with (in place only). */
  doomed: Document[];
  convert: Converter;
}

/**
 * Moves go-go-scope's documents of `adoption.keyPrefix` into the slots' collections in
 * stowage's shape. Every slot is checked first (documents, and whether the server can drop
 * the indexes), then changed. Exported for tests; stores run it through {@link adoptRegistered}.
 */
export async function adoptGoGoScope(db: Db, adoption: GoGoScopeAdoption): Promise<void> {
  const works: SlotWork[] = [];
  for (const { slot, source, target } of adoption.slots) {
    const inPlace = source === target;
    const collection = onPrimary(db, source);
    const doomed = inPlace
      ? (await existingIndexes(collection)).filter((index) => isUniqueOnKey(index) || (slot === 'lock' && typeof index.expireAfterSeconds === 'number'))
      : [];
    const staging = inPlace && slot === 'checkpoint' ? onPrimary(db, `${source}${STAGING_SUFFIX}`) : undefined;
    const hasDocuments = (await collection.findOne(GO_GO_SCOPE_IDS, { projection: { _id: 1 } })) !== null;
    const staged = staging !== undefined && (await staging.findOne({}, { projection: { _id: 1 } })) !== null;
    if (doomed.length > 0 || hasDocuments || staged) {
      works.push({ slot, source: collection, target: onPrimary(db, target), inPlace, staging, doomed, convert: converter(slot, adoption) });
    }
  }
  if (works.length === 0) return;

  // Refuse before changing anything.
  for (const work of works) {
    const problems: string[] = [];
    for await (const document of work.source.find(GO_GO_SCOPE_IDS)) {
      const problem = work.convert(document).problem;
      if (problem !== undefined) problems.push(`${String(document._id)}: ${problem}`);
      if (problems.length >= 5) break;
    }
    if (problems.length > 0) {
      throw new StowageError(
        'E_INVALID_OPTION',
        `collection "${work.source.collectionName}" has documents stowage does not know as go-go-scope's (${work.slot}): ${problems.join('; ')}. ` +
          'Fix or remove them; nothing was changed',
      );
    }
  }
  const first = works.find((work) => work.doomed.length > 0);
  if (first) await dropIndex(first, first.doomed[0]!, true);

  for (const work of works) {
    for (const index of work.doomed) await dropIndex(work, index, false);
    if (work.staging) await moveStaged(work.staging, work.target); // what a crash left there
    let batch: Document[] = [];
    for await (const document of work.source.find(GO_GO_SCOPE_IDS)) {
      batch.push(document);
      if (batch.length >= BATCH) {
        await convertBatch(work, batch);
        batch = [];
      }
    }
    if (batch.length > 0) await convertBatch(work, batch);
    await work.staging?.drop().catch(() => undefined); // empty now; a server without `drop` keeps it empty
  }
}

/** The staging collection of checkpoints adopted in place: `<collection>_adopting`. */
const STAGING_SUFFIX = '_adopting';

/**
 * Drops one of go-go-scope's indexes (gone already: fine). `first`: the first drop of the
 * adoption, before anything changed; a server without `dropIndexes` (jongodb) is refused there.
 */
async function dropIndex(work: SlotWork, index: Document, first: boolean): Promise<void> {
  try {
    await work.source.dropIndex(String(index.name));
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 27) return; // IndexNotFound: another process dropped it
    if (first && (code === 59 || code === 115)) {
      const name = work.source.collectionName;
      throw new StowageError(
        'E_INVALID_OPTION',
        `this server cannot drop indexes, and go-go-scope's index "${String(index.name)}" on "${name}" would refuse stowage's documents; nothing was changed. ` +
          `Move the documents into other collections instead: goGoScopePersistence({ …, collections: { ${work.slot}: 'stowage_${name}', … }, ` +
          `adoptFrom: { ${work.slot}: '${name}', … } })`,
        { cause: error },
      );
    }
    throw error;
  }
}

/**
 * Converts one batch: its documents in stowage's shape are inserted (into staging, for
 * checkpoints adopted in place), and only then are the originals deleted. A crash anywhere
 * leaves each document in the source, in staging or in the target, where the next adoption
 * finds it.
 */
async function convertBatch(work: SlotWork, documents: Document[]): Promise<void> {
  const results = documents.map((document) => ({ id: document._id as ObjectId, ...work.convert(document) }));
  const replacements = results.flatMap((result) => (result.replacement ? [result.replacement] : []));
  const gone = results.filter((result) => result.replacement !== undefined || result.drop).map((result) => result.id);
  await insertAll(work.staging ?? work.target, replacements);
  await work.source.deleteMany({ _id: { $in: gone } });
  if (work.staging) await moveStaged(work.staging, work.target);
}

/** Moves every staged document into `target` (inserted there first, then deleted from staging). */
async function moveStaged(staging: Collection, target: Collection): Promise<void> {
  for (;;) {
    const staged = await staging.find({}).limit(BATCH).toArray();
    if (staged.length === 0) return;
    await insertAll(target, staged);
    await staging.deleteMany({ _id: { $in: staged.map((document) => document._id) } });
  }
}

/**
 * Inserts `documents` into `target`; a document already there (converted by another process,
 * or written by stowage since) wins. Where the server does not say which inserts it skipped,
 * those not there yet go again.
 */
async function insertAll(target: Collection, documents: Document[]): Promise<void> {
  if (documents.length === 0) return;
  const inserts: AnyBulkWriteOperation[] = documents.map((document) => ({ insertOne: { document } }));
  try {
    await target.bulkWrite(inserts, { ordered: false });
  } catch (error) {
    const retry = statementsToRetry(error, inserts.length);
    if (retry === null) throw error;
    await insertMissing(target, retry.map((index) => documents[index]!));
  }
}

/**
 * Inserts those of `documents` that `target` does not hold yet, one at a time. Found with one
 * query first: when two processes adopt at once, one usually converted the whole batch already
 * (500 inserts, one after the other, took most of a minute on jongodb).
 */
async function insertMissing(target: Collection, documents: Document[]): Promise<void> {
  const there = await target.find({ _id: { $in: documents.map((document) => document._id) } }, { projection: { _id: 1 } }).toArray();
  const present = new Set(there.map((document) => document._id as unknown));
  for (const document of documents) {
    if (present.has(document._id)) continue;
    await target.insertOne(document).catch((again: unknown) => {
      if (!isDuplicateKeyError(again)) throw again;
    });
  }
}

/** What becomes of one go-go-scope document: a replacement, dropped (an expired cache entry), kept (another keyPrefix), or a problem. */
interface Conversion {
  replacement?: Document;
  drop?: boolean;
  problem?: string;
}

type Converter = (document: Document) => Conversion;

const COMMON = ['_id', 'createdAt', 'updatedAt'];
const FIELDS: Record<GoGoScopeSlot, string[]> = {
  lock: ['key', 'owner', 'expiresAt'],
  circuitBreaker: ['key', 'state', 'failureCount', 'lastFailureTime', 'lastSuccessTime'],
  cache: ['key', 'value', 'expiresAt'],
  idempotency: ['key', 'value', 'expiresAt'],
  checkpoint: ['id', 'taskId', 'sequence', 'timestamp', 'progress', 'data', 'estimatedTimeRemaining'],
};

function converter(slot: GoGoScopeSlot, { keyPrefix, idempotencyKeyPrefix }: GoGoScopeAdoption): Converter {
  const fields = new Set([...COMMON, ...FIELDS[slot]]);
  // Where go-go-scope's keys of this keyPrefix start (`keyPrefix + 'lock:' + key` …), and where stowage's do.
  const from = { lock: `${keyPrefix}lock:`, circuitBreaker: `${keyPrefix}circuit:`, cache: `${keyPrefix}cache:`, idempotency: idempotencyKeyPrefix, checkpoint: '' }[slot];
  const to = slot === 'cache' ? `${keyPrefix}\u0000` : slot === 'checkpoint' ? '' : keyPrefix;
  return (document) => {
    const unknown = Object.keys(document).filter((field) => !fields.has(field));
    if (unknown.length > 0) return { problem: `unrecognised field(s) ${unknown.join(', ')}` };
    if (slot === 'checkpoint') return convertCheckpoint(document);
    if (typeof document.key !== 'string') return { problem: 'no key' };
    if (!document.key.startsWith(from) || document.key.length === from.length) return {}; // another keyPrefix: not ours
    const _id = to + document.key.slice(from.length);
    const expiresAt = document.expiresAt as unknown;
    if (expiresAt !== undefined && expiresAt !== null && !(expiresAt instanceof Date)) return { problem: 'expiresAt is not a date' };
    switch (slot) {
      case 'lock':
        if (typeof document.owner !== 'string' || !(expiresAt instanceof Date)) return { problem: 'a lock needs owner and expiresAt' };
        return { replacement: { _id, fence: 1, owner: document.owner, expiresAt } };
      case 'circuitBreaker':
        return convertCircuit(_id, document);
      case 'cache':
      case 'idempotency': {
        if (expiresAt instanceof Date && expiresAt.getTime() <= Date.now()) return { drop: true }; // expired: gone either way
        let value: string;
        try {
          value = richCodec.encode(document.value);
        } catch (error) {
          // An entry of a cache can go (the next read misses); an idempotency result cannot.
          if (slot === 'cache') return { drop: true };
          return { problem: `its value cannot be stored as text (${error instanceof Error ? error.message : String(error)})` };
        }
        const replacement: Document = slot === 'cache' ? { _id, value } : { _id, status: 'completed', value };
        if (expiresAt instanceof Date) replacement.expiresAt = expiresAt;
        return { replacement };
      }
    }
  };
}

const CIRCUIT_STATES = new Set(['closed', 'open', 'half-open']);

function convertCircuit(_id: string, document: Document): Conversion {
  const { state, failureCount, lastFailureTime, lastSuccessTime } = document;
  if (!CIRCUIT_STATES.has(state as string)) return { problem: `state ${JSON.stringify(state)} is not closed, open or half-open` };
  if (!Number.isSafeInteger(failureCount) || (failureCount as number) < 0) return { problem: 'failureCount is not a count' };
  const replacement: Document = { _id, state, failureCount };
  for (const [field, value] of Object.entries({ lastFailureTime, lastSuccessTime })) {
    if (value instanceof Date) replacement[field] = value;
    else if (value !== undefined && value !== null) return { problem: `${field} is not a date` };
  }
  return { replacement };
}

function convertCheckpoint(document: Document): Conversion {
  const { id, taskId, sequence, progress, data, estimatedTimeRemaining } = document;
  const timestamp = document.timestamp instanceof Date ? document.timestamp.getTime() : document.timestamp;
  if (typeof id !== 'string' || id === '' || typeof taskId !== 'string' || taskId === '') return { problem: 'a checkpoint needs id and taskId' };
  if (!Number.isSafeInteger(sequence) || typeof timestamp !== 'number' || typeof progress !== 'number') {
    return { problem: 'sequence, timestamp and progress must be numbers' };
  }
  let text: string;
  try {
    text = richCodec.encode(data);
  } catch (error) {
    return { problem: `its data cannot be stored as text (${error instanceof Error ? error.message : String(error)})` };
  }
  const replacement: Document = { _id: id, taskId, sequence, timestamp, progress, data: text };
  if (typeof estimatedTimeRemaining === 'number') replacement.estimatedTimeRemaining = estimatedTimeRemaining;
  return { replacement };
}

function isUniqueOnKey(index: Document): boolean {
  const keys = Object.keys((index.key ?? {}) as Document);
  return index.unique === true && keys.length === 1 && keys[0] === 'key';
}

async function existingIndexes(collection: Collection): Promise<Document[]> {
  try {
    return await collection.listIndexes().toArray();
  } catch (error) {
    if ((error as { code?: unknown }).code === 26) return []; // NamespaceNotFound: nothing to adopt
    throw error;
  }
}
