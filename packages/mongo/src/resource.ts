import { Lifecycle, StowageError, describeType, type Capabilities } from '@stowage/core';
import type { Collection, Document, WriteConcernSettings } from 'mongodb';
import { ServerTime } from './clock.js';
import { openConnection, type MongoConnection, type MongoConnectionOptions } from './connection.js';
import { toStowageError } from './errors.js';
import {
  collectionSpec,
  ensureCollection,
  inspectCollection,
  type MongoCollectionKind,
  type MongoCollectionSpec,
  type SchemaState,
} from './schema.js';
import { serverFeatures, type MongoDialect, type MongoDialectOption, type ServerFeatures } from './server-features.js';

/** Options every Mongo store accepts, besides where to connect. */
export interface MongoStoreOptions extends MongoConnectionOptions {
  /** The collection (each store has its own default, see `DEFAULT_COLLECTIONS`). */
  collection?: string;
  /** Create the collection and its indexes on first use, once per process (default `true`). */
  autoCreate?: boolean;
  /**
   * `auto` (default) detects whether the server runs update pipelines, `$expr` and `$$NOW`
   * (`pipeline`) or not (`classic`). Forcing a dialect skips the detection probes.
   */
  dialect?: MongoDialectOption;
}

/** What an operation runs with once the store is connected. */
export interface ReadyStore<TDocument extends Document> {
  collection: Collection<TDocument>;
  time: ServerTime;
  features: ServerFeatures;
  schema: SchemaState;
}

/** Internal: lets one store share another's connection (e.g. a snapshot store and its lock). */
export interface SharedConnection {
  connection?: MongoConnection;
}

interface InternalOptions extends SharedConnection {
  /** Write concern of the store's collection (locks: majority). Default: the client's. */
  writeConcern?: WriteConcernSettings;
}

const BEFORE_CONNECT: Capabilities = Object.freeze({
  serverClock: true,
  fencing: true,
  ttlIndex: false,
  changeFeed: false,
  wakeups: false,
  transactions: false,
  crossProcess: true,
});

/**
 * The parts every Mongo store shares: the connection (closed only if stowage opened it), the
 * one-time start-up (feature detection and schema, run at the first call or `connect()`),
 * close semantics, and driver-error mapping.
 */
export abstract class MongoResource<TDocument extends Document> {
  protected readonly lifecycle: Lifecycle;
  protected readonly connection: MongoConnection;
  readonly #ownsConnection: boolean;
  readonly #name: string;
  readonly #spec: MongoCollectionSpec;
  readonly #autoCreate: boolean;
  readonly #dialect: MongoDialectOption;
  readonly #writeConcern: WriteConcernSettings | undefined;
  #starting: Promise<ReadyStore<TDocument>> | undefined;
  #ready: ReadyStore<TDocument> | undefined;

  protected constructor(
    name: string,
    kind: MongoCollectionKind,
    options: MongoStoreOptions,
    internal?: InternalOptions,
  ) {
    if (options === null || typeof options !== 'object') {
      throw new StowageError('E_INVALID_OPTION', `${name} options must be an object, got ${describeType(options)}`);
    }
    const autoCreate = options.autoCreate ?? true;
    if (typeof autoCreate !== 'boolean') throw new StowageError('E_INVALID_OPTION', 'autoCreate must be a boolean');
    const dialect = options.dialect ?? 'auto';
    if (dialect !== 'auto' && dialect !== 'pipeline' && dialect !== 'classic') {
      throw new StowageError('E_INVALID_OPTION', 'dialect must be "auto", "pipeline" or "classic"');
    }
    this.#spec = collectionSpec(kind, options.collection);
    this.#autoCreate = autoCreate;
    this.#dialect = dialect;
    this.#writeConcern = internal?.writeConcern;
    this.#name = name;
    this.lifecycle = new Lifecycle(name);
    this.connection = internal?.connection ?? openConnection(options);
    this.#ownsConnection = internal?.connection === undefined;
  }

  /** The collection's name. */
  get collectionName(): string {
    return this.#spec.collection;
  }

  /** How this store writes time-dependent documents, once connected (see `MongoStoreOptions.dialect`). */
  get dialect(): MongoDialect | undefined {
    return this.#ready?.features.dialect;
  }

  /** What this store can do on the server it talks to (conservative until connected). */
  get capabilities(): Capabilities {
    const ready = this.#ready;
    if (!ready) return BEFORE_CONNECT;
    return Object.freeze({
      serverClock: true,
      fencing: true,
      ttlIndex: ready.schema.ttlIndex,
      changeFeed: ready.features.changeStreams,
      wakeups: this.hasWakeups && ready.features.changeStreams,
      transactions: ready.features.transactions,
      crossProcess: true,
      atomicUpdates: ready.features.atomicUpdates,
    });
  }

  /** True for stores whose waiting operations are woken by change streams where available. */
  protected get hasWakeups(): boolean {
    return false;
  }

  /**
   * Connects, detects the server's features and creates the collection and indexes (unless
   * `autoCreate: false`). Optional: the first operation does the same. Resolves to the store.
   */
  async connect(): Promise<this> {
    this.lifecycle.assertOpen();
    await this.start();
    return this;
  }

  /** Closes the client if stowage created it. Idempotent; afterwards every call rejects with `E_CLOSED`. */
  close(): Promise<void> {
    return this.lifecycle.close(async () => {
      await this.beforeClose();
      if (this.#ownsConnection) await this.connection.close();
    });
  }

  /** Runs before the connection closes (stop change streams, background timers…). */
  protected async beforeClose(): Promise<void> {}

  /** Runs one operation: after start-up, with driver errors mapped to `StowageError`s. */
  protected async run<T>(operation: (ready: ReadyStore<TDocument>) => Promise<T>): Promise<T> {
    this.lifecycle.assertOpen();
    try {
      return await operation(this.#ready ?? (await this.start()));
    } catch (error) {
      // An operation cut short by close() reports the close, not the driver's "client closed".
      if (this.lifecycle.isClosed && !(error instanceof StowageError)) {
        throw new StowageError('E_CLOSED', `${this.#name} is closed`, { cause: error });
      }
      throw toStowageError(error);
    }
  }

  protected start(): Promise<ReadyStore<TDocument>> {
    this.#starting ??= this.#start().catch((error: unknown) => {
      this.#starting = undefined; // a failed start (e.g. server down) is retried by the next call
      throw toStowageError(error);
    });
    return this.#starting;
  }

  async #start(): Promise<ReadyStore<TDocument>> {
    const { db } = this.connection;
    const [features, schema] = await Promise.all([
      serverFeatures(db, this.#spec.collection, this.#dialect),
      this.#autoCreate ? ensureCollection(db, this.#spec) : inspectCollection(db, this.#spec),
    ]);
    const collection = db.collection<TDocument>(this.#spec.collection, {
      readPreference: 'primary',
      ...(this.#writeConcern ? { writeConcern: this.#writeConcern } : {}),
    });
    this.#ready = { collection, time: new ServerTime(features), features, schema };
    return this.#ready;
  }
}
