import {
  StowageError,
  type ClaimRequest,
  type CreateItemRequest,
  type ExtendLeaseRequest,
  type FindClaimableRequest,
  type ListItemsRequest,
  type ProcessChange,
  type ProcessFeed,
  type ProcessItem,
  type ReleaseRequest,
  type TransitionRecord,
  type TransitionRequest,
} from '@stowage/core';
import { ProcessBackendBase } from '@stowage/core/adapter';
import type { Collection, Document, Filter } from 'mongodb';
import { mongoStore, storeDatabase, type Ready, type StoreCollection, type StoreDatabase } from '../database.js';
import { later, type NewProcessVersion } from '../dialects/dialect.js';
import { assertDocumentSize } from '../errors.js';
import type { MongoSettings, MongoStoreOptions } from '../options.js';
import { deleteInBatches } from '../retention.js';
import { DEFAULT_COLLECTIONS, collectionSpec, processClaimsCollection, type MongoIndexSpec, type MongoShardKey } from '../schema.js';
import { claimWithTicket } from './claim-tickets.js';
import { byVersion, toItem, toTransition, versionId, type ClaimTicketDocument, type ProcessVersionDocument, type VersionKey } from './documents.js';
import { ChangeStreamFeed, PollingFeed, changeStreamSource } from './feeds.js';

/*
 * The state-machine backend on MongoDB (see `ProcessBackend` in @stowage/core).
 *
 * One collection holds every version of every item: a transition inserts the item's next
 * version as a new document whose `_id` names (process, version, item). That insert is the
 * compare-and-set (of two workers advancing version v, only one can insert v + 1: the `_id`
 * is unique) and the transition log entry at once; the old version is then marked
 * `current: false`. Because the arbiter is a unique insert, an item never advances twice even
 * on servers whose conditional updates are not atomic (FerretDB 1.x). Should a worker die
 * between the two writes, the old version still looks current until the next worker that
 * tries to advance it finds v + 1 taken and retires it; readers take the highest version.
 *
 * Claims are single conditional updates of the current version, with the lease on the server
 * clock (see the dialects). Where updates are not atomic (`atomicUpdates: false`) a claim
 * first inserts a ticket into the claims collection (see `claimWithTicket`).
 *
 * Feeds: a change stream of inserted versions, resumable with `resumeAfter`, on replica sets
 * and sharded clusters; elsewhere a polling reader of the indexed set of current versions
 * nobody has claimed yet.
 */

export const DEFAULT_PROCESS_COLLECTION = DEFAULT_COLLECTIONS.process;

export interface MongoProcessBackendOptions extends MongoStoreOptions {
  /**
   * How long the transition history is kept, in ms (default: for ever). With it, the background
   * sweeper (every `cleanupInterval` ms) and {@link MongoProcessBackend.clearHistory} delete the retired versions of items
   * (their transition records) recorded longer ago (server clock). An item's current version and
   * its first one (the creation, whose `_id` makes `createItem` idempotent) are kept.
   */
  historyRetention?: number;
}

/**
 * The collections, indexes and shard keys the backend uses (for `autoCreate: false` and your own
 * migrations). The claims collection is used only on servers without atomic updates.
 */
export function processIndexSpec(collection: string = DEFAULT_PROCESS_COLLECTION): {
  collection: string;
  indexes: MongoIndexSpec[];
  shardKey: MongoShardKey;
  claims: { collection: string; indexes: MongoIndexSpec[]; shardKey: MongoShardKey };
} {
  const { indexes, shardKey } = collectionSpec('process', collection);
  const claims = collectionSpec('processClaims', processClaimsCollection(collection));
  return { collection, indexes, shardKey, claims: { collection: claims.collection, indexes: claims.indexes, shardKey: claims.shardKey } };
}

/** Creates a {@link ProcessBackend} on MongoDB. */
export function createMongoProcessBackend(options: MongoProcessBackendOptions): MongoProcessBackend {
  return new MongoProcessBackend(options);
}

/** Versions are immutable but for their lease and `current` flag: what a transition copies from the old one. */
interface Carried {
  state: string;
  data: string;
  createdAt: Date;
  /** `performance.now()` when it was remembered (see `_transition`). */
  rememberedAt: number;
}

const CARRIED_CACHE_SIZE = 10_000;

/**
 * {@link ProcessBackend} on MongoDB (collection `stowage_process`). Claims, lease updates and
 * reads are one command each; a transition is two (insert the next version, retire the old one).
 */
export class MongoProcessBackend extends mongoStore(ProcessBackendBase) {
  readonly #db: StoreDatabase<ProcessVersionDocument>;
  readonly #feeds = new Set<ProcessFeed>();
  /** What the last claims returned, so a transition does not read the old version again. */
  readonly #carried = new Map<string, Carried>();

  constructor(options: MongoProcessBackendOptions) {
    const claims = (settings: MongoSettings): StoreCollection[] => [
      { kind: 'processClaims', name: processClaimsCollection(settings.collection), writeConcern: settings.writeConcern, neededOn: (features) => !features.atomicUpdates },
    ];
    const db = storeDatabase<ProcessVersionDocument>(options, { kind: 'process', name: 'MongoProcessBackend', more: claims, fencing: false, wakeups: true });
    super(db.identity, db, { historyRetention: options?.historyRetention });
    this.#db = db;
    if (this.historyRetention !== undefined) db.sweep({ key: `process:history:${this.historyRetention}`, run: () => this.clearHistory() });
    db.onClose(() => Promise.all([...this.#feeds].map((feed) => feed.close())));
  }

  /**
   * `clearHistory()` (the kit's), in batches on the `{ current, at }` index. `history(id)` then
   * starts with the creation and goes on with the kept transitions.
   */
  protected override async _clearHistory(retention: number): Promise<number> {
    const { collection, dialect } = await this.#db.use();
    const recordedBefore = new Date(dialect.now().getTime() - retention);
    return deleteInBatches(collection, { current: false, at: { $lt: recordedBefore }, version: { $gt: 1 } }, this.closeSignal);
  }

  /** This backend inside the caller's transaction (see `withTransaction`): same collections, every command with the transaction's session. */
  protected override _bind(session: object): this {
    return new MongoProcessBackend(this.#db.viewOptions(session)) as this;
  }

  protected async _createItem(request: CreateItemRequest): Promise<{ item: ProcessItem; created: boolean }> {
    const ready = await this.#db.ready();
    const collection = ready.collection<ProcessVersionDocument>('process');
    const version: NewProcessVersion = {
      _id: versionId(request.process, 1, request.id),
      process: request.process,
      itemId: request.id,
      version: 1,
      state: request.state,
      from: null,
      kind: 'create',
      key: null,
      data: JSON.stringify(request.data),
      current: true,
      attempts: 0,
      lastError: null,
      error: null,
      leaseOwner: null,
      leaseUntil: null,
    };
    const inserted = await insertVersion(ready, collection, checkedSize(version));
    if (inserted) return { item: toItem(inserted), created: true };
    const existing = await current(collection, request.process, request.id);
    if (!existing) throw new StowageError('E_UNAVAILABLE', `item ${JSON.stringify(request.id)} exists but its current version was not found`);
    return { item: toItem(existing), created: false };
  }

  protected async _getItem(processName: string, id: string): Promise<ProcessItem | null> {
    const { collection } = await this.#db.use();
    const document = await current(collection, processName, id);
    return document && toItem(document);
  }

  /**
   * A worker that died between inserting a version and retiring the old one leaves two
   * "current" versions; the older is dropped here (the next worker to touch the item retires
   * it), and the page is topped up.
   */
  protected async _listItems(request: ListItemsRequest): Promise<ProcessItem[]> {
    const { collection } = await this.#db.use();
    const items: ProcessItem[] = [];
    let after = request.after;
    for (;;) {
      const wanted = request.limit - items.length;
      const filter: Filter<ProcessVersionDocument> = { process: request.process, current: true };
      if (request.state !== undefined) filter.state = request.state;
      if (after !== undefined) filter.itemId = { $gt: after };
      const documents = await collection.find(filter).sort({ itemId: 1, version: -1 }).limit(wanted).toArray();
      const latest = await latestVersions(collection, request.process, documents);
      for (const document of documents) {
        if (latest.get(document.itemId) === document.version && items.at(-1)?.id !== document.itemId) items.push(toItem(document));
      }
      if (documents.length < wanted || items.length >= request.limit) return items;
      after = documents.at(-1)!.itemId;
    }
  }

  protected async _history(processName: string, id: string): Promise<TransitionRecord[]> {
    const { collection } = await this.#db.use();
    return (await collection.find({ process: processName, itemId: id }).sort({ version: 1 }).toArray()).map(toTransition);
  }

  protected async _openFeed(processName: string, state: string, position: string | null): Promise<ProcessFeed> {
    if (this.#db.inTransaction) throw new StowageError('E_INVALID_OPTION', 'a feed reads on a connection of its own: open it on the backend, not on its view inside a transaction');
    const ready = await this.#db.ready();
    const collection = ready.collection<ProcessVersionDocument>('process');
    const call = <T>(operation: () => Promise<T>) => this.call('process.feed.read', operation);
    const feed = ready.features.changeStreams
      ? await ChangeStreamFeed.open(changeStreamSource(collection, ready.db, processName, state), position, call)
      : new PollingFeed(collection, processName, state, call);
    this.#feeds.add(feed);
    return feed;
  }

  protected async _findClaimable(request: FindClaimableRequest): Promise<ProcessChange[]> {
    const { collection, dialect } = await this.#db.use();
    const { process: processName, state, includeUnclaimed, unclaimedFor, limit } = request;
    const ranOut = dialect.leaseRanOut();
    const unclaimed: Document | null = includeUnclaimed
      ? { leaseOwner: null }
      : unclaimedFor === undefined
        ? null
        : { leaseOwner: null, at: { $lte: later(dialect.now(), -unclaimedFor) } };
    const filter: Document = { process: processName, current: true, state, ...(unclaimed ? { $or: [unclaimed, ranOut] } : ranOut) };
    const documents = await collection
      .find(filter, { projection: { itemId: 1, state: 1, version: 1 } })
      .sort({ leaseUntil: 1, at: 1 })
      .limit(limit)
      .toArray();
    return documents.map((document) => ({ itemId: document.itemId, state: document.state, version: document.version, position: '' }));
  }

  protected async _claim(request: ClaimRequest): Promise<ProcessItem | null> {
    const ready = await this.#db.ready();
    const { dialect } = ready;
    const collection = ready.collection<ProcessVersionDocument>('process');
    const identity = { ...byVersion(request), state: request.state, current: true as const };
    let document: ProcessVersionDocument | null;
    if (!ready.features.atomicUpdates) {
      const tickets = ready.collection<ClaimTicketDocument>('processClaims');
      document = await claimWithTicket(collection, tickets, dialect.now(), identity, request);
    } else {
      document = await dialect.claimItem(collection, identity, request.owner, request.lease);
    }
    if (!document) return null;
    this.#remember(document);
    return toItem(document);
  }

  protected async _extendLease(request: ExtendLeaseRequest): Promise<boolean> {
    const { collection, dialect } = await this.#db.use();
    const filter = { ...byVersion(request), leaseOwner: request.owner, current: true };
    return (await collection.updateOne(filter, dialect.extendItemLease(request.lease))).matchedCount === 1;
  }

  protected async _release(request: ReleaseRequest): Promise<boolean> {
    const { collection, dialect } = await this.#db.use();
    const filter = { ...byVersion(request), leaseOwner: request.owner, current: true };
    const update = dialect.releaseItem(request.delay, request.refundAttempt, request.error);
    return (await collection.updateOne(filter, update)).matchedCount === 1;
  }

  protected async _transition(request: TransitionRequest): Promise<ProcessItem | null> {
    const ready = await this.#db.ready();
    const collection = ready.collection<ProcessVersionDocument>('process');
    const old = byVersion(request);
    const carried = this.#rememberedFresh(old._id) ?? (await readCarried(collection, old));
    if (!carried || carried.state !== request.from) return null;
    const next: NewProcessVersion = {
      _id: versionId(request.process, request.version + 1, request.itemId),
      process: request.process,
      itemId: request.itemId,
      version: request.version + 1,
      state: request.to,
      from: request.from,
      kind: request.kind,
      key: request.key,
      data: request.data === undefined ? carried.data : JSON.stringify(request.data),
      createdAt: carried.createdAt,
      current: true,
      attempts: 0,
      lastError: request.error ?? null,
      error: request.error ?? null,
      leaseOwner: null,
      leaseUntil: null,
    };
    // `null`: another worker advanced it first.
    const inserted = await insertVersion(ready, collection, checkedSize(next));
    this.#carried.delete(old._id);
    // Retire the old version (also when another worker won but may have died before doing so).
    await collection.updateOne(old, { $set: { current: false, leaseOwner: null, leaseUntil: null } });
    if (!ready.features.atomicUpdates) await ready.collection<ClaimTicketDocument>('processClaims').deleteMany({ of: old._id });
    return inserted && toItem(inserted);
  }

  #remember(document: ProcessVersionDocument): void {
    if (this.#carried.size >= CARRIED_CACHE_SIZE) this.#carried.delete(this.#carried.keys().next().value!);
    this.#carried.set(document._id, { state: document.state, data: document.data, createdAt: document.createdAt, rememberedAt: performance.now() });
  }

  /**
   * What a claim of this version remembered, unless `historyRetention` may have deleted its
   * successor since: then the unique `_id` of that successor no longer stops a late transition,
   * and `readCarried` (which finds only a current version) must decide. A successor is deleted
   * only once it is `historyRetention` old, and it was inserted after this claim, so a claim
   * younger than half of that (margin for the two clocks) is safe to trust.
   */
  #rememberedFresh(id: string): Carried | undefined {
    const carried = this.#carried.get(id);
    const retention = this.historyRetention;
    if (carried && retention !== undefined && performance.now() - carried.rememberedAt >= retention / 2) return undefined;
    return carried;
  }
}

/**
 * The dialect's `insertVersion`; inside a transaction, an `_id` already taken is found by a read
 * first: a duplicate-key error would abort the caller's transaction, and in a transaction the
 * read is safe (a concurrent insert of the `_id` fails the transaction with a write conflict).
 */
async function insertVersion(ready: Ready, collection: Collection<ProcessVersionDocument>, version: NewProcessVersion): Promise<ProcessVersionDocument | null> {
  if (ready.session && (await collection.findOne({ _id: version._id }, { projection: { _id: 1 } }))) return null;
  return ready.dialect.insertVersion(collection, version);
}

/** The version, refused with `E_INVALID_VALUE` when its document would be over MongoDB's 16 MiB (its `data` is the item's JSON). */
function checkedSize(version: NewProcessVersion): NewProcessVersion {
  assertDocumentSize({ ...version, createdAt: new Date(0), at: new Date(0) }, `item ${JSON.stringify(version.itemId)}`);
  return version;
}

function current(collection: Collection<ProcessVersionDocument>, processName: string, itemId: string): Promise<ProcessVersionDocument | null> {
  return collection.findOne({ process: processName, itemId, current: true }, { sort: { version: -1 } });
}

async function readCarried(collection: Collection<ProcessVersionDocument>, version: VersionKey): Promise<Carried | null> {
  const document = await collection.findOne({ ...version, current: true }, { projection: { state: 1, data: 1, createdAt: 1 } });
  return document && { state: document.state, data: document.data, createdAt: document.createdAt, rememberedAt: performance.now() };
}

/** The highest current version of each listed item (a second query, by ids, that normally finds nothing more). */
async function latestVersions(
  collection: Collection<ProcessVersionDocument>,
  processName: string,
  documents: ProcessVersionDocument[],
): Promise<Map<string, number>> {
  const latest = new Map<string, number>();
  for (const document of documents) latest.set(document.itemId, Math.max(latest.get(document.itemId) ?? 0, document.version));
  if (documents.length === 0) return latest;
  const others = await collection
    .find(
      { process: processName, current: true, itemId: { $in: [...latest.keys()] }, version: { $gt: Math.min(...latest.values()) } },
      { projection: { itemId: 1, version: 1 } },
    )
    .toArray();
  for (const other of others) latest.set(other.itemId, Math.max(latest.get(other.itemId) ?? 0, other.version));
  return latest;
}
