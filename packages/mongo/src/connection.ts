import { StowageError, type Capabilities } from '@stowage/core';
import { MongoClient, type ClientSession, type Collection, type Db, type Document, type MongoClientOptions, type WriteConcernSettings } from 'mongodb';
import { adoptRegistered } from './adopt.js';
import { hasLabel, toStowageError } from './errors.js';
import type { MongoDialect, MongoDialectName } from './dialects/dialect.js';
import { dialectFor, serverFeatures, type ServerFeatures } from './dialects/detect.js';
import { MAJORITY, assertValidDatabaseName, type MongoSettings } from './options.js';
import { collectionSpec, ensureCollection, inspectCollection, type MongoCollectionKind } from './schema.js';
import { assertInTransaction, assertSessionOf, inNewTransaction, noTransactionsError, sessionBound } from './transactions.js';

/** The client and database a store works with. */
export class MongoConnection {
  readonly client: MongoClient;
  readonly db: Db;
  /** True when stowage created the client and so closes it. */
  readonly ownsClient: boolean;
  readonly #release: () => Promise<void>;
  #closing: Promise<void> | undefined;

  constructor(client: MongoClient, db: Db, release?: () => Promise<void>) {
    this.client = client;
    this.db = db;
    this.ownsClient = release !== undefined;
    this.#release = release ?? (() => Promise.resolve());
  }

  /** Connects the client (a no-op while it is connected): see {@link connectClient}. */
  connect(): Promise<void> {
    return connectClient(this.client);
  }

  /** Lets go of a client stowage created (closed with its last store); a client or Db passed in is left open. */
  close(): Promise<void> {
    this.#closing ??= this.#release();
    return this.#closing;
  }
}

/** Connects in progress, per client: stores that share a client and start together wait for one. */
const connecting = new WeakMap<MongoClient, Promise<void>>();

/**
 * Connects `client` explicitly, at every start-up attempt of a store (`MongoClient.connect()` is
 * a no-op while the client is connected). The driver's own connect on first use is not enough:
 * when it fails (the server is down), drivers 6 and 7 leave the client's topology closed for
 * good, and every later operation fails with MongoTopologyClosedError, also once the server is
 * back; an explicit `connect()` opens a new topology. So a store, and any store sharing its
 * client, recovers by itself once the server is reachable. A client its owner closed is not
 * opened again (the driver's internal `hasBeenClosed`; drivers without it reopen a closed client
 * on its next operation anyway): its operations fail (MongoNotConnectedError, `E_UNAVAILABLE`).
 */
function connectClient(client: MongoClient): Promise<void> {
  if ((client as unknown as { s?: { hasBeenClosed?: unknown } }).s?.hasBeenClosed === true) return Promise.resolve();
  let pending = connecting.get(client);
  if (pending === undefined) {
    pending = client.connect().then(() => undefined);
    connecting.set(client, pending);
    const done = () => void connecting.delete(client);
    pending.then(done, done);
  }
  return pending;
}

/**
 * The clients stowage created, by connection string and client options, with how many stores
 * use each: stores created from one URL share one client and its pool, as every Postgres store
 * of a URL shares one pool (each client has its own monitoring sockets and a pool of up to
 * `maxPoolSize` connections, so six stores used to hold six of each).
 */
const sharedClients = new Map<string, { client: MongoClient; stores: number }>();

/** The connection the settings describe (a store connects it at start-up: see {@link connectClient}). */
export function openConnection({ source, database }: Pick<MongoSettings, 'source' | 'database'>): MongoConnection {
  if ('db' in source) return new MongoConnection(source.db.client, source.db);
  if ('client' in source) return new MongoConnection(source.client, source.client.db(databaseName(source.client, database)));
  const key = sharingKey(source.url, source.clientOptions);
  const shared = key === undefined ? undefined : sharedClients.get(key);
  const client = shared?.client ?? newClient(source.url, source.clientOptions);
  const db = client.db(databaseName(client, database)); // before the client is shared: a bad name leaves nothing open
  const entry = shared ?? { client, stores: 0 };
  if (key !== undefined && shared === undefined) sharedClients.set(key, entry);
  entry.stores++;
  const release = async () => {
    if (--entry.stores > 0) return;
    if (key !== undefined && sharedClients.get(key) === entry) sharedClients.delete(key);
    await entry.client.close();
  };
  return new MongoConnection(client, db, release);
}

/**
 * The `database` option, else the client's default database (the path of the connection
 * string, or `clientOptions.dbName`), which is checked as the option is: the driver takes it
 * unchecked, and the server would refuse a name such as `a$b` only at the first command.
 */
function databaseName(client: MongoClient, database: string | undefined): string {
  if (database !== undefined) return database; // checked by parseStoreOptions
  const name = (client.options as { dbName?: unknown } | undefined)?.dbName ?? 'test';
  assertValidDatabaseName(name, 'the database named in the connection string (or clientOptions.dbName)');
  return name;
}

function newClient(url: string, options: MongoClientOptions): MongoClient {
  try {
    return new MongoClient(url, options);
  } catch (error) {
    // Not kept as the cause: a parse error can carry the connection string, password included.
    const message = redactPassword(error instanceof Error ? error.message : String(error), url);
    throw new StowageError('E_INVALID_OPTION', `invalid MongoDB connection string or client options: ${message}`);
  }
}

/**
 * What identifies a client that stores may share: the URL and the client options, when those
 * are plain data. Options holding anything else (a function, a certificate `Buffer`, a class
 * instance) are not compared: such a store gets a client of its own.
 */
function sharingKey(url: string, options: MongoClientOptions): string | undefined {
  const plain = (value: unknown): unknown => {
    if (value === null || typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return value;
    if (Array.isArray(value)) return value.map(plain);
    const prototype: unknown = typeof value === 'object' ? Object.getPrototypeOf(value) : undefined;
    if (prototype !== Object.prototype && prototype !== null) throw new TypeError('not plain data');
    const entries = Object.entries(value as object).filter(([, v]) => v !== undefined);
    return Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => [k, plain(v)]));
  };
  try {
    return JSON.stringify([url, plain(options ?? {})]);
  } catch {
    return undefined;
  }
}

/** `text` without the password of `url` (as written and percent-decoded). */
export function redactPassword(text: string, url: string): string {
  const password = /^mongodb(?:\+srv)?:\/\/[^:@/]*:([^@/]*)@/.exec(url)?.[1];
  if (!password) return text;
  let decoded = password;
  try {
    decoded = decodeURIComponent(password);
  } catch {
    // a malformed escape: only the text as written can appear
  }
  return text.replaceAll(password, '***').replaceAll(decoded, '***');
}

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

/** What a store uses of its database: a {@link StoreConnection}, or its view inside a transaction. */
export interface StoreDatabase {
  /** True for the view inside a transaction. */
  readonly inTransaction: boolean;
  readonly dialect: MongoDialectName | undefined;
  ready(): Promise<Ready>;
  capabilities(options?: { fencing?: boolean; wakeups?: boolean }): Capabilities;
  atomically<T>(operation: (session?: ClientSession) => Promise<T>): Promise<T>;
  /** The same collections inside the transaction of `session` (a `ClientSession` of this store's client). */
  bind(session: object): StoreDatabase;
  /** Runs `fn` in a new transaction on the store's client (see {@link StoreConnection.transaction}). */
  transaction<T>(fn: (session: ClientSession) => Promise<T>): Promise<T>;
  /** The error the caller gets for what an operation on this database threw (every store's `toStowageError`). */
  toStowageError(error: unknown): unknown;
  close(): Promise<void>;
}

/** Where a store's view inside a transaction finds its database (see {@link viewOptions}). */
const VIEW_DATABASE = Symbol('stowage.viewDatabase');

/**
 * The database of a store being constructed: the bound one when the store is a view inside a
 * transaction (built from {@link viewOptions}), else a new {@link StoreConnection}.
 */
export function storeDatabase(options: object, settings: MongoSettings, collections: readonly StoreCollection[]): StoreDatabase {
  return (options as { [VIEW_DATABASE]?: StoreDatabase })[VIEW_DATABASE] ?? new StoreConnection(settings, collections);
}

/**
 * The options of a store's view inside the transaction of `session` (`withTransaction`): the
 * store's own options, on `db` bound to it, each call sent on its own (no coalescing).
 */
export function viewOptions<T extends object>(options: T, db: StoreDatabase, session: object): T {
  return { ...options, coalesce: false, [VIEW_DATABASE]: db.bind(session) };
}

/**
 * A store's collections inside the caller's transaction: every command carries the session
 * (see `sessionBound`), and is refused with `E_INVALID_OPTION` once the session has no
 * transaction in progress, or where the server runs no transactions at all. Start-up (feature
 * detection, the collections and indexes) runs on the store's own connection, outside it.
 */
class TransactionConnection implements StoreDatabase {
  readonly inTransaction = true;
  readonly #parent: StoreConnection;
  readonly #session: ClientSession;

  constructor(parent: StoreConnection, session: ClientSession) {
    this.#parent = parent;
    this.#session = session;
  }

  get dialect(): MongoDialectName | undefined {
    return this.#parent.dialect;
  }

  capabilities(options?: { fencing?: boolean; wakeups?: boolean }): Capabilities {
    return this.#parent.capabilities(options);
  }

  async ready(): Promise<Ready> {
    const ready = await this.#parent.ready();
    if (!ready.features.runsTransactions) throw noTransactionsError();
    const session = this.#session;
    const check = () => assertInTransaction(session);
    check();
    return { ...ready, session, collection: (kind) => sessionBound(ready.collection(kind), session, check) };
  }

  /** Already all or nothing: the caller's transaction. */
  async atomically<T>(operation: (session?: ClientSession) => Promise<T>): Promise<T> {
    await this.ready();
    return operation(this.#session);
  }

  bind(session: object): StoreDatabase {
    return this.#parent.bind(session);
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

  /** The view opened nothing: closing it closes nothing. */
  async close(): Promise<void> {}
}

/** What a store reports before it knows its server: the guarantees that hold everywhere. */
const BEFORE_CONNECT = { serverClock: false, ttlIndex: false, changeFeed: false, wakeups: false, transactions: false, crossProcess: true };

/**
 * The MongoDB side of one store, whatever its contract: the connection (closed only if
 * stowage opened it), the one-time start-up (feature detection and the schema of the store's
 * collections, run by the first call or `connect()`, tried again after a failure) and the
 * ready state. Each store holds one in a private field: it reaches the client, whose options
 * hold the password of the connection string.
 *
 * The kit's `StoreBase` refuses calls after `close()` and waits for the calls in flight before
 * the store's `_close()` calls {@link close}, so nothing here checks state.
 */
export class StoreConnection implements StoreDatabase {
  readonly inTransaction = false;
  readonly #connection: MongoConnection;
  readonly #collections: readonly StoreCollection[];
  readonly #settings: Pick<MongoSettings, 'autoCreate' | 'dialect' | 'writeConcern'>;
  #starting: Promise<Ready> | undefined;
  #ready: Ready | undefined;
  #ttlIndex = false;

  constructor(settings: MongoSettings, collections: readonly StoreCollection[]) {
    for (const { kind, name } of collections) collectionSpec(kind, name); // validates the names
    this.#collections = collections;
    this.#settings = { autoCreate: settings.autoCreate, dialect: settings.dialect, writeConcern: settings.writeConcern };
    this.#connection = openConnection(settings);
  }

  /** The dialect, once connected. */
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

  /**
   * What the store can do on its server (conservative until connected). `fencing`: the store
   * hands out fencing tokens; `wakeups`: its waits are woken by change streams where there are some.
   */
  capabilities({ fencing = true, wakeups = false }: { fencing?: boolean; wakeups?: boolean } = {}): Capabilities {
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

  bind(session: object): StoreDatabase {
    assertSessionOf(session, this.#connection.client);
    return new TransactionConnection(this, session);
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

  /** Closes the client if stowage created it. */
  close(): Promise<void> {
    return this.#connection.close();
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
      collection: <TDocument extends Document>(kind: MongoCollectionKind) => {
        const collection = collections.get(kind);
        if (!collection) throw new Error(`stowage: no ${kind} collection on this server`);
        return collection as unknown as Collection<TDocument>;
      },
    };
    return this.#ready;
  }
}
