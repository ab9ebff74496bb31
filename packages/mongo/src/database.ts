import { StowageError, type Capabilities } from '@stowage/core';
import { Sweepers, type StoreBase, type StoreHandle, type StoreIdentity, type SweepJob } from '@stowage/core/adapter';
import type { ClientSession, Collection, Db, Document, MongoClient, WriteConcernSettings } from 'mongodb';
import { adoptRegistered } from './adopt.js';
import { openConnection, type MongoConnection } from './connection.js';
import type { MongoDialect, MongoDialectName } from './dialects/dialect.js';
import { dialectFor, serverFeatures, type ServerFeatures } from './dialects/detect.js';
import { hasLabel, toStowageError } from './errors.js';
import { MAJORITY, parseStoreOptions, type MongoSettings } from './options.js';
import { collectionSpec, ensureCollection, inspectCollection, type MongoCollectionKind } from './schema.js';
import { assertInTransaction, assertSessionOf, inNewTransaction, noTransactionsError, sessionBound } from './transactions.js';

/** The background sweepers of each client: one per collection, however many stores use it (the kit's `Sweepers`). */
const sweepersOf = new WeakMap<MongoClient, Sweepers>();

/** One collection of a store. */
export interface StoreCollection {
  kind: MongoCollectionKind;
  name: string;
  /** Write concern of every write to it (locks: majority). Default: the client's. */
  writeConcern?: WriteConcernSettings;
  /** Set up (and used) only on servers for which this says so. Default: always. */
  neededOn?: (features: ServerFeatures) => boolean;
}

/** A store once connected: the server's features, its dialect and the store's collections. */
export interface Ready {
  readonly features: ServerFeatures;
  /** The database (for commands that are not about one collection). */
  readonly db: Db;
  readonly dialect: MongoDialect;
  /** In a store's view inside a transaction: the transaction's session, which every command of `collection()` carries. */
  readonly session?: ClientSession;
  collection<TDocument extends Document>(kind: MongoCollectionKind): Collection<TDocument>;
}

/** What most operations need: the store's main collection, the dialect and, inside a transaction, its session. */
export interface InUse<TDocument extends Document> {
  readonly collection: Collection<TDocument>;
  readonly dialect: MongoDialect;
  readonly session: ClientSession | undefined;
}

/** What the store is besides its collections: see {@link StoreConnection.capabilities} and {@link StoreConnection.viewOptions}. */
export interface StoreTraits {
  /** The options the store was created with: its views inside transactions are created from them. */
  options?: object;
  /** The store hands out fencing tokens (default true). */
  fencing?: boolean;
  /** Its waits are woken by change streams where the server has them (default false). */
  wakeups?: boolean;
}

/**
 * What a store uses of its database, and the kit's {@link StoreHandle}: a {@link StoreConnection},
 * or its view inside a transaction. `TDocument` is the document of the store's main collection
 * (the first of its collections), which {@link use} returns.
 */
export interface StoreDatabase<TDocument extends Document = Document> extends StoreHandle {
  /** True for the view inside a transaction. */
  readonly inTransaction: boolean;
  /** What the store tells the kit about itself (its name in errors; database and collection for telemetry). */
  readonly identity: StoreIdentity;
  /** The store's main collection. */
  readonly collectionName: string;
  /** The dialect, once connected. */
  readonly dialect: MongoDialectName | undefined;
  ready(): Promise<Ready>;
  /** The main collection, the dialect and the session, once ready. */
  use(): Promise<InUse<TDocument>>;
  atomically<T>(operation: (session?: ClientSession) => Promise<T>): Promise<T>;
  /** The options of the store's view inside the transaction of `session` (`withTransaction`; see {@link StoreConnection.viewOptions}). */
  viewOptions<T extends object>(session: object, overrides?: Partial<T>): T;
  /** Runs `fn` in a new transaction on the store's client (see {@link StoreConnection.transaction}). */
  transaction<T>(fn: (session: ClientSession) => Promise<T>): Promise<T>;
  /**
   * Adds `job` (a store's own call) to the background sweeper of the store's collection on its
   * client (the kit's `Sweepers`: one per collection, however many stores), run every
   * `cleanupInterval` ms until the store closes; nothing in a view, or with the sweeper off.
   */
  sweep(job: SweepJob): void;
  /** Frees `free` (a change stream, a feed) when the store closes, before its share of the client. */
  onClose(free: () => Promise<unknown>): void;
}

/** Where a store's view inside a transaction finds its database (see {@link viewOptions}). */
const VIEW_DATABASE = Symbol('stowage.viewDatabase');

/**
 * The database of a store being constructed from its `options`: the bound one when the store is
 * a view inside a transaction (built by `viewOptions`), else a new {@link StoreConnection} on the
 * store's `kind` of collection (checked options, `E_INVALID_OPTION`), with `more` collections.
 */
export function storeDatabase<TDocument extends Document>(
  options: object,
  store: { kind: MongoCollectionKind; name: string; more?: (settings: MongoSettings) => StoreCollection[] } & StoreTraits,
): StoreDatabase<TDocument> {
  const view = (options as { [VIEW_DATABASE]?: StoreDatabase<TDocument> } | null | undefined)?.[VIEW_DATABASE];
  if (view) return view;
  const settings = parseStoreOptions(options, store.kind, store.name);
  const main: StoreCollection = { kind: store.kind, name: settings.collection, writeConcern: settings.writeConcern };
  return new StoreConnection(settings, [main, ...(store.more?.(settings) ?? [])], { ...store, options });
}

/** The getters every Mongo store has besides its contract (see {@link mongoStore}). */
export interface MongoStoreInfo {
  /** How this store writes time-dependent documents, once connected (`pipeline` or `classic`). */
  readonly dialect: MongoDialectName | undefined;
  /** The store's (main) collection. */
  readonly collectionName: string;
}

// `any[]`: the form TypeScript requires of a mixin's constructor type.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AbstractClass<T> = abstract new (...args: any[]) => T;

/**
 * `Base` (a kit base class: `KeyValueStoreBase`…) with the getters of {@link MongoStoreInfo},
 * read from the store's {@link StoreDatabase}: `class MongoKeyValueStore extends mongoStore(KeyValueStoreBase)`.
 * A mixin, as each store extends its contract's base class, so no shared class can sit between.
 */
export function mongoStore<TBase extends { prototype: StoreBase }>(Base: TBase): TBase & AbstractClass<MongoStoreInfo> {
  abstract class MongoStore extends (Base as unknown as AbstractClass<StoreBase>) {
    get dialect(): MongoDialectName | undefined {
      return (this.handle as StoreDatabase).dialect;
    }

    get collectionName(): string {
      return (this.handle as StoreDatabase).collectionName;
    }
  }
  return MongoStore as unknown as TBase & AbstractClass<MongoStoreInfo>;
}

/**
 * A store's collections inside the caller's transaction: every command carries the session
 * (see `sessionBound`), and is refused with `E_INVALID_OPTION` once the session has no
 * transaction in progress, or where the server runs no transactions at all. Start-up (feature
 * detection, the collections and indexes) runs on the store's own connection, outside it.
 */
export class TransactionConnection<TDocument extends Document = Document> implements StoreDatabase<TDocument> {
  readonly inTransaction = true;
  readonly #parent: StoreConnection<TDocument>;
  readonly #session: ClientSession;

  constructor(parent: StoreConnection<TDocument>, session: ClientSession) {
    this.#parent = parent;
    this.#session = session;
  }

  get identity(): StoreIdentity {
    return this.#parent.identity;
  }

  get collectionName(): string {
    return this.#parent.collectionName;
  }

  get dialect(): MongoDialectName | undefined {
    return this.#parent.dialect;
  }

  get capabilities(): Capabilities {
    return this.#parent.capabilities;
  }

  async ready(): Promise<Ready> {
    const ready = await this.#parent.ready();
    if (!ready.features.runsTransactions) throw noTransactionsError();
    const session = this.#session;
    const check = () => assertInTransaction(session);
    check();
    return { ...ready, session, collection: (kind) => sessionBound(ready.collection(kind), session, check) };
  }

  async use(): Promise<InUse<TDocument>> {
    const ready = await this.ready();
    return { collection: ready.collection<TDocument>(this.#parent.kind), dialect: ready.dialect, session: this.#session };
  }

  /** Already all or nothing: the caller's transaction. */
  async atomically<T>(operation: (session?: ClientSession) => Promise<T>): Promise<T> {
    await this.ready();
    return operation(this.#session);
  }

  viewOptions<T extends object>(session: object, overrides?: Partial<T>): T {
    return this.#parent.viewOptions(session, overrides);
  }

  transaction(): Promise<never> {
    return Promise.reject(new StowageError('E_INVALID_OPTION', 'this store is already inside a transaction'));
  }

  /**
   * As outside a transaction, but for an error that asks for the whole transaction to run
   * again (labelled TransientTransactionError: a write conflict, a network error): it reaches
   * the caller as the driver threw it, because the driver's `session.withTransaction` running
   * the caller's transaction retries only errors of its own classes that carry the label.
   */
  toStowageError(error: unknown): unknown {
    return hasLabel(error, 'TransientTransactionError') ? error : toStowageError(error);
  }

  /** A view sweeps nothing: the store it was bound from does. */
  sweep(): void {}

  /** The view opened nothing: closing it closes nothing. */
  onClose(): void {}

  async close(): Promise<void> {}
}

/** What a store reports before it knows its server: the guarantees that hold everywhere. */
const BEFORE_CONNECT = { serverClock: false, ttlIndex: false, changeFeed: false, wakeups: false, transactions: false, crossProcess: true };

/**
 * The MongoDB side of one store, whatever its contract, and its handle in the kit's
 * `StoreBase`: the connection (closed only if stowage opened it), the one-time start-up
 * (feature detection and the schema of the store's collections, run by the first call or
 * `ready()`, tried again after a failure), the capabilities and the error mapping. The store
 * holds it in the kit's `handle` and in a private field: it reaches the client, whose options
 * hold the password of the connection string, so everything here is private.
 *
 * The kit's `StoreBase` refuses calls after `close()` and waits for the calls in flight before
 * it calls {@link close}, so nothing here checks state.
 */
export class StoreConnection<TDocument extends Document = Document> implements StoreDatabase<TDocument> {
  readonly inTransaction = false;
  readonly identity: StoreIdentity;
  /** The kind and name of the store's main collection (its first). */
  readonly kind: MongoCollectionKind;
  readonly collectionName: string;
  readonly #connection: MongoConnection;
  readonly #collections: readonly StoreCollection[];
  readonly #settings: Pick<MongoSettings, 'autoCreate' | 'dialect' | 'writeConcern' | 'cleanupInterval'>;
  readonly #traits: { fencing: boolean; wakeups: boolean };
  readonly #options: object;
  /** What {@link close} frees first: change streams, feeds, sweep timers. */
  readonly #closers: (() => Promise<unknown>)[] = [];
  #starting: Promise<Ready> | undefined;
  #ready: Ready | undefined;
  #ttlIndex = false;

  constructor(settings: MongoSettings, collections: readonly StoreCollection[], { options = {}, fencing = true, wakeups = false }: StoreTraits = {}) {
    for (const { kind, name } of collections) collectionSpec(kind, name); // validates the names
    this.identity = settings.identity;
    this.kind = collections[0]!.kind;
    this.collectionName = collections[0]!.name;
    this.#collections = collections;
    const { autoCreate, dialect, writeConcern, cleanupInterval } = settings;
    this.#settings = { autoCreate, dialect, writeConcern, cleanupInterval };
    this.#traits = { fencing, wakeups };
    this.#options = options;
    this.#connection = openConnection(settings);
  }

  get dialect(): MongoDialectName | undefined {
    return this.#ready?.features.dialect;
  }

  /** Connects, detects the server's features and creates the collections (once); the ready state. */
  ready(): Promise<Ready> {
    if (this.#ready) return Promise.resolve(this.#ready);
    this.#starting ??= this.#start().catch((error: unknown) => {
      this.#starting = undefined; // a failed start (e.g. server down) is tried again by the next call
      throw error;
    });
    return this.#starting;
  }

  async use(): Promise<InUse<TDocument>> {
    const ready = await this.ready();
    return { collection: ready.collection<TDocument>(this.kind), dialect: ready.dialect, session: undefined };
  }

  /** What the store can do on its server (conservative until connected). */
  get capabilities(): Capabilities {
    const { fencing, wakeups } = this.#traits;
    const features = this.#ready?.features;
    if (!features) return { ...BEFORE_CONNECT, fencing };
    return {
      serverClock: features.serverClock,
      fencing,
      ttlIndex: this.#ttlIndex,
      changeFeed: features.changeStreams,
      wakeups: wakeups && features.changeStreams,
      transactions: features.transactions,
      crossProcess: true,
      atomicUpdates: features.atomicUpdates,
    };
  }

  /**
   * Runs `operation` (several documents' writes) all or nothing: in a transaction where the
   * server has them (see {@link transaction}); elsewhere as it is.
   */
  async atomically<T>(operation: (session?: ClientSession) => Promise<T>): Promise<T> {
    const ready = await this.ready();
    return ready.features.transactions ? this.#withTransaction(operation) : operation();
  }

  /** The same collections inside the transaction of `session` (a `ClientSession` of this store's client). */
  bind(session: object): TransactionConnection<TDocument> {
    assertSessionOf(session, this.#connection.client);
    return new TransactionConnection(this, session);
  }

  /**
   * The options of the store's view inside the transaction of `session`: the store's own
   * options (with `overrides`), on this database bound to it, each call sent on its own (no coalescing).
   */
  viewOptions<T extends object>(session: object, overrides?: Partial<T>): T {
    return { ...this.#options, ...overrides, coalesce: false, [VIEW_DATABASE]: this.bind(session) } as T;
  }

  /**
   * Runs `fn` in a new transaction on the store's client (`runOnce`, transactional process
   * states): committed when `fn` resolves, aborted when it rejects. The driver's
   * `withTransaction` runs `fn` again when the server labels an error TransientTransactionError
   * (a write conflict with a concurrent transaction) and retries a commit whose outcome is
   * unknown; nothing of a failed attempt was committed. `E_INVALID_OPTION` where the server
   * cannot run transactions, and on servers whose transactions do not isolate (jongodb).
   */
  async transaction<T>(fn: (session: ClientSession) => Promise<T>): Promise<T> {
    const { features } = await this.ready();
    if (!features.runsTransactions) throw noTransactionsError();
    if (!features.transactions) {
      throw new StowageError(
        'E_INVALID_OPTION',
        'this server runs transactions without isolating them (jongodb commits a transaction by writing back whole collections, losing concurrent writes to other documents): stowage begins none on it',
      );
    }
    return this.#withTransaction(fn);
  }

  /** `operation` in a transaction of a new session: see {@link inNewTransaction}. */
  #withTransaction<T>(operation: (session: ClientSession) => Promise<T>): Promise<T> {
    return inNewTransaction(this.#connection.client, this.#settings.writeConcern ?? MAJORITY, operation);
  }

  toStowageError(error: unknown): unknown {
    return toStowageError(error);
  }

  sweep(job: SweepJob): void {
    const interval = this.#settings.cleanupInterval;
    if (interval === undefined) return;
    const { client, db } = this.#connection;
    let sweepers = sweepersOf.get(client);
    if (!sweepers) sweepersOf.set(client, (sweepers = new Sweepers()));
    const leave = sweepers.register(`${db.databaseName}.${this.collectionName}`, job, interval);
    this.#closers.push(async () => leave());
  }

  onClose(free: () => Promise<unknown>): void {
    this.#closers.push(free);
  }

  /** Frees what the store opened (see {@link onClose}), then closes the client if stowage created it and no other store uses it. */
  async close(): Promise<void> {
    await Promise.all(this.#closers.map((free) => free().catch(() => undefined)));
    await this.#connection.close();
  }

  async #start(): Promise<Ready> {
    await this.#connection.connect();
    const { db } = this.#connection;
    const { autoCreate, dialect } = this.#settings;
    // Documents of go-go-scope's own adapters are rewritten first (goGoScopePersistence registers
    // that, see adopt.ts): the schema set-up below would refuse their indexes.
    if (autoCreate) await Promise.all(this.#collections.map((collection) => adoptRegistered(db, collection.name)));
    const setUp = (collection: StoreCollection) => {
      const spec = collectionSpec(collection.kind, collection.name);
      return autoCreate ? ensureCollection(db, spec) : inspectCollection(db, spec);
    };
    const always = this.#collections.filter((collection) => collection.neededOn === undefined);
    const [features, ...schemas] = await Promise.all([serverFeatures(db, this.#collections[0]!.name, dialect), ...always.map(setUp)]);
    const later = this.#collections.filter((collection) => collection.neededOn?.(features));
    schemas.push(...(await Promise.all(later.map(setUp))));
    const collections = new Map<MongoCollectionKind, Collection<Document>>();
    for (const { kind, name, writeConcern } of [...always, ...later]) {
      collections.set(kind, db.collection(name, { readPreference: 'primary', ...(writeConcern && { writeConcern }) }));
    }
    this.#ttlIndex = features.ttlMonitor && schemas.some((schema) => schema.ttlIndex);
    this.#ready = {
      features,
      db,
      dialect: dialectFor(features),
      collection: <T extends Document>(kind: MongoCollectionKind) => {
        const collection = collections.get(kind);
        if (!collection) throw new Error(`stowage: no ${kind} collection on this server`);
        return collection as unknown as Collection<T>;
      },
    };
    return this.#ready;
  }
}
