import {
  Lifecycle,
  StowageError,
  assertClaimRequest,
  assertCreateItemRequest,
  assertFindClaimableRequest,
  assertItemId,
  assertListItemsRequest,
  assertProcessName,
  assertReleaseRequest,
  assertStateName,
  assertTransitionRequest,
  describeType,
  sleep,
  type Capabilities,
  type ClaimRequest,
  type CreateItemRequest,
  type ExtendLeaseRequest,
  type FindClaimableRequest,
  type JsonObject,
  type ListItemsRequest,
  type ProcessBackend,
  type ProcessChange,
  type ProcessFeed,
  type ProcessFeedReadOptions,
  type ProcessItem,
  type ReleaseRequest,
  type TransitionKind,
  type TransitionRecord,
  type TransitionRequest,
} from '@stowage/core';
import { BSON, type ChangeStream, type Collection, type Document, type Filter, type UpdateFilter } from 'mongodb';
import { EPOCH, ServerTime, literal } from './clock.js';
import { assertValidCollectionName, openConnection, type MongoConnection, type MongoConnectionOptions } from './connection.js';
import { isDuplicateKeyError, toStowageError } from './errors.js';
import { ensureCollection, type MongoCollectionKind, type MongoCollectionSpec, type MongoIndexSpec } from './schema.js';
import { serverFeatures, type MongoDialectOption, type ServerFeatures } from './server-features.js';

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
 * clock (`$$NOW` where the server has it, else a measured offset). On a server whose updates
 * are not atomic (`atomicUpdates: false`, FerretDB 1.x) two claimers could both "win" such an
 * update, so there a claim first inserts a ticket naming the lease it takes over (its owner and
 * end, or "unclaimed") into `<collection>_claims`: of the workers that saw the same free
 * lease, only one can insert that ticket.
 *
 * Feeds: a change stream of inserted versions, resumable with `resumeAfter`, on replica sets
 * and sharded clusters; elsewhere a polling reader of the indexed set of current versions
 * nobody has claimed yet.
 */

export const DEFAULT_PROCESS_COLLECTION = 'stowage_process';

/** One version of one item: the item as it was from `at` on, and the transition that made it. */
export interface ProcessVersionDocument {
  /** `${process}:${version}:${itemId}`: unique, so inserting a version is a compare-and-set. */
  _id: string;
  process: string;
  itemId: string;
  version: number;
  state: string;
  /** The state the item left (null for version 1). */
  from: string | null;
  kind: TransitionKind;
  /** The idempotency key of the handler whose result made this version. */
  key: string | null;
  /** JSON text: any JSON object round-trips exactly, whatever its keys. */
  data: string;
  createdAt: Date;
  /** When the item entered this version (server clock). */
  at: Date;
  /** False once a later version exists. */
  current: boolean;
  attempts: number;
  lastError: string | null;
  /** The error of a dead-letter transition (kept apart from `lastError`, which retries overwrite). */
  error: string | null;
  leaseOwner: string | null;
  leaseUntil: Date | null;
}

export interface MongoProcessBackendOptions extends MongoConnectionOptions {
  /** The collection (default `stowage_process`). */
  collection?: string;
  /** Create the collection and its indexes on first use (default true). Off: see {@link processIndexSpec}. */
  autoCreate?: boolean;
  /** `auto` (default), `pipeline` ($$NOW in the command) or `classic` (measured server clock). */
  dialect?: MongoDialectOption;
}

const PROCESS_INDEXES: MongoIndexSpec[] = [
  { key: { process: 1, itemId: 1, version: 1 }, name: 'process_1_itemId_1_version_1', unique: true },
  { key: { process: 1, current: 1, state: 1, leaseUntil: 1, at: 1 }, name: 'process_1_current_1_state_1_leaseUntil_1_at_1' },
  { key: { process: 1, current: 1, itemId: 1 }, name: 'process_1_current_1_itemId_1' },
];

const CLAIM_TICKET_INDEXES: MongoIndexSpec[] = [{ key: { of: 1, previous: 1, generation: -1 }, name: 'of_1_previous_1_generation_-1' }];

/**
 * The collections and indexes the backend creates (for `autoCreate: false` and your own
 * migrations). The claims collection is used only on servers without atomic updates.
 */
export function processIndexSpec(collection: string = DEFAULT_PROCESS_COLLECTION): {
  collection: string;
  indexes: MongoIndexSpec[];
  claims: { collection: string; indexes: MongoIndexSpec[] };
} {
  assertValidCollectionName(collection);
  const claims = `${collection}_claims`;
  assertValidCollectionName(claims);
  return {
    collection,
    indexes: PROCESS_INDEXES.map((index) => ({ ...index, key: { ...index.key } })),
    claims: { collection: claims, indexes: CLAIM_TICKET_INDEXES.map((index) => ({ ...index, key: { ...index.key } })) },
  };
}

/** A claim on a server without atomic updates: the free lease it takes over, named in `_id`. */
export interface ClaimTicketDocument {
  /** `${of}#${previous}#${generation}`. */
  _id: string;
  /** The version `_id` (tickets are deleted when the version is retired). */
  of: string;
  /** The lease taken over: `${owner}@${end in epoch ms}`, or `unclaimed`. */
  previous: string;
  /** 0, or one more than a ticket whose claimer did not finish taking the lease in time. */
  generation: number;
  owner: string;
  at: Date;
  /** Until when this ticket blocks other claimers of the same lease. */
  until: Date;
}

/** Creates a {@link ProcessBackend} on MongoDB. */
export function createMongoProcessBackend(options: MongoProcessBackendOptions): MongoProcessBackend {
  return new MongoProcessBackend(options);
}

interface Ready {
  collection: Collection<ProcessVersionDocument>;
  /** Only on servers without atomic updates. */
  tickets: Collection<ClaimTicketDocument> | null;
  time: ServerTime;
  features: ServerFeatures;
}

const ITEM_ID_SEPARATOR = ':';
const versionId = (process: string, version: number, itemId: string) => `${process}${ITEM_ID_SEPARATOR}${version}${ITEM_ID_SEPARATOR}${itemId}`;

interface VersionKey {
  _id: string;
  process: string;
  itemId: string;
}

/** The filter for one version: its `_id`, plus the fields of a `{ process, itemId }` shard key. */
function byVersion(request: { process: string; itemId: string; version: number }): VersionKey {
  return { _id: versionId(request.process, request.version, request.itemId), process: request.process, itemId: request.itemId };
}

/** Versions are immutable but for their lease and `current` flag: what a transition copies from the old one. */
interface Carried {
  state: string;
  data: string;
  createdAt: Date;
}

const CARRIED_CACHE_SIZE = 10_000;

/**
 * {@link ProcessBackend} on MongoDB. Claims, lease updates and reads are one command each; a
 * transition is two (insert the next version, retire the old one).
 */
export class MongoProcessBackend implements ProcessBackend {
  readonly #lifecycle = new Lifecycle('MongoProcessBackend');
  readonly #connection: MongoConnection;
  readonly #collectionName: string;
  readonly #autoCreate: boolean;
  readonly #dialect: MongoDialectOption;
  readonly #feeds = new Set<ProcessFeed>();
  /** What the last claims returned, so a transition does not read the old version again. */
  readonly #carried = new Map<string, Carried>();
  #starting: Promise<Ready> | undefined;
  #ready: Ready | undefined;

  constructor(options: MongoProcessBackendOptions) {
    if (options === null || typeof options !== 'object') {
      throw new StowageError('E_INVALID_OPTION', `options must be an object, got ${describeType(options)}`);
    }
    const { collection } = processIndexSpec(options.collection);
    const autoCreate = options.autoCreate ?? true;
    if (typeof autoCreate !== 'boolean') throw new StowageError('E_INVALID_OPTION', 'autoCreate must be a boolean');
    const dialect = options.dialect ?? 'auto';
    if (dialect !== 'auto' && dialect !== 'pipeline' && dialect !== 'classic') {
      throw new StowageError('E_INVALID_OPTION', 'dialect must be "auto", "pipeline" or "classic"');
    }
    this.#collectionName = collection;
    this.#autoCreate = autoCreate;
    this.#dialect = dialect;
    this.#connection = openConnection(options);
  }

  /** Conservative until connected; then what the server supports (`changeFeed`: change streams). */
  get capabilities(): Capabilities {
    const features = this.#ready?.features;
    return Object.freeze({
      serverClock: true,
      fencing: false,
      ttlIndex: false,
      changeFeed: features?.changeStreams ?? false,
      wakeups: features?.changeStreams ?? false,
      transactions: features?.transactions ?? false,
      crossProcess: true,
      atomicUpdates: features?.atomicUpdates ?? true,
    });
  }

  /** Connects, detects the server's features and creates the indexes (unless `autoCreate: false`). */
  async connect(): Promise<this> {
    await this.#run(async () => undefined);
    return this;
  }

  async createItem(request: CreateItemRequest): Promise<{ item: ProcessItem; created: boolean }> {
    this.#lifecycle.assertOpen();
    assertCreateItemRequest(request);
    return this.#run(async ({ collection, time }) => {
      const now = time.now();
      const document: ProcessVersionDocument = {
        _id: versionId(request.process, 1, request.id),
        process: request.process,
        itemId: request.id,
        version: 1,
        state: request.state,
        from: null,
        kind: 'create',
        key: null,
        data: JSON.stringify(request.data),
        createdAt: now,
        at: now,
        current: true,
        attempts: 0,
        lastError: null,
        error: null,
        leaseOwner: null,
        leaseUntil: null,
      };
      try {
        await collection.insertOne(document);
        return { item: toItem(document), created: true };
      } catch (error) {
        if (!isDuplicateKeyError(error)) throw error;
      }
      const existing = await this.#current(collection, request.process, request.id);
      if (!existing) throw new StowageError('E_UNAVAILABLE', `item ${JSON.stringify(request.id)} exists but its current version was not found`);
      return { item: toItem(existing), created: false };
    });
  }

  async getItem(process: string, id: string): Promise<ProcessItem | null> {
    this.#lifecycle.assertOpen();
    assertProcessName(process);
    assertItemId(id);
    return this.#run(async ({ collection }) => {
      const document = await this.#current(collection, process, id);
      return document && toItem(document);
    });
  }

  async listItems(request: ListItemsRequest): Promise<ProcessItem[]> {
    this.#lifecycle.assertOpen();
    assertListItemsRequest(request);
    return this.#run(async ({ collection }) => {
      const items: ProcessItem[] = [];
      let after = request.after;
      // A worker that died between inserting a version and retiring the old one leaves two
      // "current" versions; the older is dropped here (the next worker to touch the item
      // retires it), and the page is topped up.
      for (;;) {
        const wanted = request.limit - items.length;
        const filter: Filter<ProcessVersionDocument> = { process: request.process, current: true };
        if (request.state !== undefined) filter.state = request.state;
        if (after !== undefined) filter.itemId = { $gt: after };
        const documents = await collection.find(filter).sort({ itemId: 1, version: -1 }).limit(wanted).toArray();
        const latest = await this.#latestVersions(collection, request.process, documents);
        for (const document of documents) {
          if (latest.get(document.itemId) === document.version && items.at(-1)?.id !== document.itemId) items.push(toItem(document));
        }
        if (documents.length < wanted || items.length >= request.limit) return items;
        after = documents.at(-1)!.itemId;
      }
    });
  }

  /** The highest current version of each listed item (a second query, by ids, that normally finds nothing more). */
  async #latestVersions(
    collection: Collection<ProcessVersionDocument>,
    process: string,
    documents: ProcessVersionDocument[],
  ): Promise<Map<string, number>> {
    const latest = new Map<string, number>();
    for (const document of documents) latest.set(document.itemId, Math.max(latest.get(document.itemId) ?? 0, document.version));
    if (documents.length === 0) return latest;
    const others = await collection
      .find(
        { process, current: true, itemId: { $in: [...latest.keys()] }, version: { $gt: Math.min(...latest.values()) } },
        { projection: { itemId: 1, version: 1 } },
      )
      .toArray();
    for (const other of others) latest.set(other.itemId, Math.max(latest.get(other.itemId) ?? 0, other.version));
    return latest;
  }

  async history(process: string, id: string): Promise<TransitionRecord[]> {
    this.#lifecycle.assertOpen();
    assertProcessName(process);
    assertItemId(id);
    return this.#run(async ({ collection }) => {
      const documents = await collection.find({ process, itemId: id }).sort({ version: 1 }).toArray();
      return documents.map(
        (document): TransitionRecord => ({
          itemId: document.itemId,
          from: document.from,
          to: document.state,
          version: document.version,
          kind: document.kind,
          key: document.key,
          error: document.error,
          at: document.at,
        }),
      );
    });
  }

  async openFeed(process: string, state: string, position: string | null): Promise<ProcessFeed> {
    this.#lifecycle.assertOpen();
    assertProcessName(process);
    assertStateName(state);
    const token = position === null ? null : parsePosition(position);
    return this.#run(async (ready) => {
      const feed = ready.features.changeStreams
        ? await ChangeStreamFeed.open(ready.collection, process, state, token, () => this.#lifecycle.assertOpen())
        : new PollingFeed(ready.collection, process, state, () => this.#lifecycle.assertOpen(), (operation) => this.#run(operation));
      this.#feeds.add(feed);
      return feed;
    });
  }

  async findClaimable(request: FindClaimableRequest): Promise<ProcessChange[]> {
    this.#lifecycle.assertOpen();
    assertFindClaimableRequest(request);
    return this.#run(async ({ collection, time }) => {
      const expired: Filter<ProcessVersionDocument> =
        time.dialect === 'pipeline'
          ? { leaseUntil: { $type: 'date' }, $expr: { $lte: ['$leaseUntil', '$$NOW'] } }
          : { leaseUntil: { $lte: time.now() } };
      const unclaimed: Filter<ProcessVersionDocument> | null = request.includeUnclaimed
        ? { leaseOwner: null }
        : request.unclaimedFor === undefined
          ? null
          : { leaseOwner: null, at: { $lte: ServerTime.after(time.now(), -request.unclaimedFor) } };
      const filter: Filter<ProcessVersionDocument> = {
        process: request.process,
        current: true,
        state: request.state,
        ...(unclaimed ? { $or: [unclaimed, expired] } : expired),
      };
      const documents = await collection
        .find(filter, { projection: { itemId: 1, state: 1, version: 1 } })
        .sort({ leaseUntil: 1, at: 1 })
        .limit(request.limit)
        .toArray();
      return documents.map((document) => ({ itemId: document.itemId, state: document.state, version: document.version, position: '' }));
    });
  }

  async claim(request: ClaimRequest): Promise<ProcessItem | null> {
    this.#lifecycle.assertOpen();
    assertClaimRequest(request);
    return this.#run(async (ready) => {
      const { collection, time } = ready;
      const filter = { ...byVersion(request), state: request.state, current: true as const };
      let document: ProcessVersionDocument | null;
      if (ready.tickets) {
        document = await claimWithTicket(collection, ready.tickets, time, filter, request);
      } else if (time.dialect === 'pipeline') {
        document = await collection.findOneAndUpdate(
          { ...filter, $expr: { $lte: [{ $ifNull: ['$leaseUntil', EPOCH] }, '$$NOW'] } },
          [{ $set: { leaseOwner: literal(request.owner), leaseUntil: { $add: ['$$NOW', request.lease] }, attempts: { $add: ['$attempts', 1] } } }],
          { returnDocument: 'after' },
        );
      } else {
        const now = time.now();
        document = await collection.findOneAndUpdate(
          { ...filter, $or: [{ leaseUntil: null }, { leaseUntil: { $lte: now } }] },
          { $set: { leaseOwner: request.owner, leaseUntil: ServerTime.after(now, request.lease) }, $inc: { attempts: 1 } },
          { returnDocument: 'after' },
        );
      }
      if (!document) return null;
      this.#remember(document);
      return toItem(document);
    });
  }

  async extendLease(request: ExtendLeaseRequest): Promise<boolean> {
    this.#lifecycle.assertOpen();
    assertClaimRequest(request);
    return this.#run(async ({ collection, time }) => {
      const filter = { ...byVersion(request), leaseOwner: request.owner, current: true };
      const update =
        time.dialect === 'pipeline'
          ? [{ $set: { leaseUntil: { $add: ['$$NOW', request.lease] } } }]
          : { $set: { leaseUntil: ServerTime.after(time.now(), request.lease) } };
      return (await collection.updateOne(filter, update)).matchedCount === 1;
    });
  }

  async release(request: ReleaseRequest): Promise<boolean> {
    this.#lifecycle.assertOpen();
    assertReleaseRequest(request);
    return this.#run(async ({ collection, time }) => {
      const filter = { ...byVersion(request), leaseOwner: request.owner, current: true };
      const error = request.error === undefined ? {} : { lastError: request.error };
      const refund = request.refundAttempt ? -1 : 0;
      const update: Document[] | UpdateFilter<ProcessVersionDocument> =
        time.dialect === 'pipeline'
          ? [{ $set: { leaseUntil: { $add: ['$$NOW', request.delay] }, attempts: { $max: [0, { $add: ['$attempts', refund] }] }, ...literalFields(error) } }]
          : { $set: { leaseUntil: ServerTime.after(time.now(), request.delay), ...error }, $inc: { attempts: refund } };
      return (await collection.updateOne(filter, update)).matchedCount === 1;
    });
  }

  async transition(request: TransitionRequest): Promise<ProcessItem | null> {
    this.#lifecycle.assertOpen();
    assertTransitionRequest(request);
    return this.#run(async ({ collection, tickets, time }) => {
      const old = byVersion(request);
      const oldId = old._id;
      const carried = this.#carried.get(oldId) ?? (await this.#readCarried(collection, old));
      if (!carried || carried.state !== request.from) return null;
      const next: ProcessVersionDocument = {
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
        at: time.now(),
        current: true,
        attempts: 0,
        lastError: request.error ?? null,
        error: request.error ?? null,
        leaseOwner: null,
        leaseUntil: null,
      };
      let applied = true;
      try {
        await collection.insertOne(next);
      } catch (error) {
        if (!isDuplicateKeyError(error)) throw error;
        applied = false; // another worker advanced it first
      }
      this.#carried.delete(oldId);
      // Retire the old version (also when another worker won but may have died before doing so).
      await collection.updateOne(old, { $set: { current: false, leaseOwner: null, leaseUntil: null } });
      await tickets?.deleteMany({ of: oldId });
      return applied ? toItem(next) : null;
    });
  }

  close(): Promise<void> {
    return this.#lifecycle.close(async () => {
      await Promise.all([...this.#feeds].map((feed) => feed.close().catch(() => undefined)));
      this.#carried.clear();
      await this.#connection.close();
    });
  }

  async #current(collection: Collection<ProcessVersionDocument>, process: string, itemId: string): Promise<ProcessVersionDocument | null> {
    return collection.findOne({ process, itemId, current: true }, { sort: { version: -1 } });
  }

  async #readCarried(collection: Collection<ProcessVersionDocument>, version: VersionKey): Promise<Carried | null> {
    const document = await collection.findOne({ ...version, current: true }, { projection: { state: 1, data: 1, createdAt: 1 } });
    return document && { state: document.state, data: document.data, createdAt: document.createdAt };
  }

  #remember(document: ProcessVersionDocument): void {
    if (this.#carried.size >= CARRIED_CACHE_SIZE) this.#carried.delete(this.#carried.keys().next().value!);
    this.#carried.set(document._id, { state: document.state, data: document.data, createdAt: document.createdAt });
  }

  /** Runs an operation after start-up, with driver errors mapped to `StowageError`s. */
  async #run<T>(operation: (ready: Ready) => Promise<T>): Promise<T> {
    this.#lifecycle.assertOpen();
    try {
      return await operation(this.#ready ?? (await this.#start()));
    } catch (error) {
      if (this.#lifecycle.isClosed && !(error instanceof StowageError)) {
        throw new StowageError('E_CLOSED', 'MongoProcessBackend is closed', { cause: error });
      }
      throw toStowageError(error);
    }
  }

  #start(): Promise<Ready> {
    this.#starting ??= (async () => {
      const { db } = this.#connection;
      const specs = processIndexSpec(this.#collectionName);
      // ensureCollection creates a collection and its indexes once per process, safely when many start at once.
      const ensure = (spec: { collection: string; indexes: MongoIndexSpec[] }) =>
        ensureCollection(db, { kind: 'process' as MongoCollectionKind, ...spec } satisfies MongoCollectionSpec);
      const [features] = await Promise.all([serverFeatures(db, this.#collectionName, this.#dialect), this.#autoCreate ? ensure(specs) : undefined]);
      if (!features.atomicUpdates && this.#autoCreate) await ensure(specs.claims);
      const options = { readPreference: 'primary' } as const;
      this.#ready = {
        collection: db.collection<ProcessVersionDocument>(this.#collectionName, options),
        tickets: features.atomicUpdates ? null : db.collection<ClaimTicketDocument>(specs.claims.collection, options),
        time: new ServerTime(features),
        features,
      };
      return this.#ready;
    })().catch((error: unknown) => {
      this.#starting = undefined; // retried by the next call
      throw error;
    });
    return this.#starting;
  }
}

/**
 * A claim where single-document updates are not atomic: read the version, insert a ticket
 * naming the free lease seen (only one worker can), then take the lease. Workers that saw the
 * same free lease race for one ticket `_id`; a lease extended or released since is a different
 * ticket. A ticket blocks for one lease length: if its claimer died before taking the lease,
 * the next claimer inserts the next generation. A claimer retrying after an error reuses its
 * own ticket.
 */
async function claimWithTicket(
  collection: Collection<ProcessVersionDocument>,
  tickets: Collection<ClaimTicketDocument>,
  time: ServerTime,
  filter: VersionKey & { state: string; current: true },
  request: ClaimRequest,
): Promise<ProcessVersionDocument | null> {
  const now = time.now();
  const seen = await collection.findOne(filter);
  if (!seen || (seen.leaseUntil !== null && seen.leaseUntil > now)) return null;
  const previous = seen.leaseOwner === null ? 'unclaimed' : `${seen.leaseOwner}@${seen.leaseUntil?.getTime() ?? ''}`;
  const last = await tickets.find({ of: filter._id, previous }).sort({ generation: -1 }).limit(1).next();
  const mine = last !== null && last.owner === request.owner;
  if (last !== null && !mine && last.until > now) return null;
  if (!mine) {
    const generation = last === null ? 0 : last.generation + 1;
    try {
      await tickets.insertOne({
        _id: `${filter._id}#${previous}#${generation}`,
        of: filter._id,
        previous,
        generation,
        owner: request.owner,
        at: now,
        until: ServerTime.after(now, request.lease),
      });
    } catch (error) {
      if (isDuplicateKeyError(error)) return null;
      throw error;
    }
  }
  return collection.findOneAndUpdate(
    { ...filter, leaseOwner: seen.leaseOwner, leaseUntil: seen.leaseUntil },
    { $set: { leaseOwner: request.owner, leaseUntil: ServerTime.after(now, request.lease), attempts: seen.attempts + 1 } },
    { returnDocument: 'after' },
  );
}

/** `$set` values inside an update pipeline, taken literally. */
function literalFields(fields: Record<string, unknown>): Record<string, Document> {
  return Object.fromEntries(Object.entries(fields).map(([name, value]) => [name, literal(value)]));
}

/**
 * Versions entering the state, from a change stream of inserts. The resume token of each
 * change is its position; a token the server no longer has (the oplog moved on) opens the
 * stream at "now" with `resumed: false`, and the engine scans what is waiting.
 */
class ChangeStreamFeed implements ProcessFeed {
  readonly durable = true;
  readonly resumed: boolean;
  readonly #stream: ChangeStream<ProcessVersionDocument>;
  readonly #assertBackendOpen: () => void;
  readonly #buffered: Document[];
  #closed = false;

  private constructor(stream: ChangeStream<ProcessVersionDocument>, resumed: boolean, buffered: Document[], assertBackendOpen: () => void) {
    this.#stream = stream;
    this.resumed = resumed;
    this.#buffered = buffered;
    this.#assertBackendOpen = assertBackendOpen;
  }

  static async open(
    collection: Collection<ProcessVersionDocument>,
    process: string,
    state: string,
    token: Document | null,
    assertBackendOpen: () => void,
  ): Promise<ChangeStreamFeed> {
    const pipeline = [
      { $match: { operationType: 'insert', 'fullDocument.process': process, 'fullDocument.state': state } },
      { $project: { 'fullDocument.itemId': 1, 'fullDocument.version': 1, 'fullDocument.state': 1 } },
    ];
    const watch = (resumeAfter: Document | null) =>
      collection.watch<ProcessVersionDocument>(pipeline, { maxAwaitTimeMS: 200, ...(resumeAfter ? { resumeAfter } : {}) });
    let stream = watch(token);
    let resumed = token !== null;
    let first: Document | null;
    try {
      // The first call runs the aggregate, so a lost token shows up here rather than mid-run.
      first = await stream.tryNext();
    } catch (error) {
      await stream.close().catch(() => undefined);
      if (token === null || !isLostToken(error)) throw error;
      stream = watch(null);
      resumed = false;
      first = await stream.tryNext();
    }
    return new ChangeStreamFeed(stream, resumed, first ? [first] : [], assertBackendOpen);
  }

  async read(options: ProcessFeedReadOptions): Promise<ProcessChange[]> {
    this.#assertOpen();
    const { limit, wait, signal } = options;
    const deadline = performance.now() + wait;
    const changes: ProcessChange[] = [];
    while (changes.length < limit) {
      let change: Document | null;
      try {
        change = this.#buffered.shift() ?? (await this.#stream.tryNext());
      } catch (error) {
        this.#assertOpen();
        throw toStowageError(error);
      }
      this.#assertOpen();
      if (change) {
        const document = change.fullDocument as Pick<ProcessVersionDocument, 'itemId' | 'version' | 'state'>;
        changes.push({ itemId: document.itemId, state: document.state, version: document.version, position: BSON.EJSON.stringify(change._id) });
        continue;
      }
      // tryNext waited up to maxAwaitTimeMS on the server; go on until something came or time is up.
      if (changes.length > 0 || performance.now() >= deadline || signal?.aborted) break;
    }
    return changes;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#stream.close().catch(() => undefined);
  }

  #assertOpen(): void {
    this.#assertBackendOpen();
    if (this.#closed) throw new StowageError('E_CLOSED', 'MongoProcessBackend feed is closed');
  }
}

/** A change the polling feed returned and that is still unclaimed this long after is returned again. */
const RETURN_AGAIN_AFTER = 10_000;

/**
 * For servers without change streams: re-reads the indexed set of current versions in the
 * state that nobody has claimed yet. A version stays in that set until it is claimed or
 * retired, so nothing is missed however late its insert becomes visible, and there is no
 * position to keep (`durable: false`). A version already returned is skipped while it still
 * waits, for {@link RETURN_AGAIN_AFTER} ms (so each change is returned once, unless its claim
 * failed and it is still waiting after that).
 */
class PollingFeed implements ProcessFeed {
  readonly durable = false;
  readonly resumed = true;
  readonly #collection: Collection<ProcessVersionDocument>;
  readonly #process: string;
  readonly #state: string;
  readonly #assertBackendOpen: () => void;
  readonly #run: <T>(operation: (ready: Ready) => Promise<T>) => Promise<T>;
  #closed = false;
  readonly #closing = new AbortController();
  /**
   * `_id`s returned, with when, that were still unclaimed at the last read. They are skipped
   * for a while (each change once); one still unclaimed after that (its claim failed) is
   * returned again.
   */
  #returned = new Map<string, number>();

  constructor(
    collection: Collection<ProcessVersionDocument>,
    process: string,
    state: string,
    assertBackendOpen: () => void,
    run: <T>(operation: (ready: Ready) => Promise<T>) => Promise<T>,
  ) {
    this.#collection = collection;
    this.#process = process;
    this.#state = state;
    this.#assertBackendOpen = assertBackendOpen;
    this.#run = run;
  }

  async read(options: ProcessFeedReadOptions): Promise<ProcessChange[]> {
    this.#assertOpen();
    let changes = await this.#scan(options.limit);
    if (changes.length === 0 && options.wait > 0 && !options.signal?.aborted) {
      const stop = options.signal ? AbortSignal.any([options.signal, this.#closing.signal]) : this.#closing.signal;
      await sleep(options.wait, stop).catch(() => undefined);
      this.#assertOpen();
      changes = await this.#scan(options.limit);
    }
    return changes;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort();
  }

  #scan(limit: number): Promise<ProcessChange[]> {
    return this.#run(async () => {
      const waiting = { process: this.#process, current: true, state: this.#state, leaseUntil: null };
      const now = performance.now();
      for (const [id, at] of this.#returned) if (now - at > RETURN_AGAIN_AFTER) this.#returned.delete(id);
      if (this.#returned.size > 0) {
        const still = await this.#collection.find({ ...waiting, _id: { $in: [...this.#returned.keys()] } }, { projection: { _id: 1 } }).toArray();
        const stillWaiting = new Set(still.map((document) => document._id));
        for (const id of this.#returned.keys()) if (!stillWaiting.has(id)) this.#returned.delete(id);
      }
      const skip = [...this.#returned.keys()];
      const documents = await this.#collection
        .find({ ...waiting, ...(skip.length > 0 && { _id: { $nin: skip } }) }, { projection: { itemId: 1, version: 1 } })
        .sort({ at: 1 })
        .limit(limit)
        .toArray();
      for (const document of documents) this.#returned.set(document._id, now);
      return documents.map((document) => ({ itemId: document.itemId, state: this.#state, version: document.version, position: '' }));
    });
  }

  #assertOpen(): void {
    this.#assertBackendOpen();
    if (this.#closed) throw new StowageError('E_CLOSED', 'MongoProcessBackend feed is closed');
  }
}

function parsePosition(position: string): Document {
  try {
    const token = BSON.EJSON.parse(position) as unknown;
    if (token !== null && typeof token === 'object' && !Array.isArray(token)) return token as Document;
  } catch {
    // reported below
  }
  throw new StowageError('E_INVALID_OPTION', `not a position of the Mongo process feed: ${JSON.stringify(position)}`);
}

/** The server no longer has the events after this token (ChangeStreamHistoryLost, or the token is not valid here). */
function isLostToken(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 286 || code === 280 || code === 260;
}

function toItem(document: ProcessVersionDocument): ProcessItem {
  return {
    id: document.itemId,
    state: document.state,
    data: JSON.parse(document.data) as JsonObject,
    version: document.version,
    attempts: document.attempts,
    lastError: document.lastError,
    leaseOwner: document.leaseOwner,
    leaseUntil: document.leaseUntil,
    createdAt: document.createdAt,
    updatedAt: document.at,
  };
}
