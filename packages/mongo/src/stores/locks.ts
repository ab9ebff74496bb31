import type { Capabilities } from '@stowage/core';
import { LockProviderBase } from '@stowage/core/adapter';
import { StoreConnection } from '../connection.js';
import type { MongoDialectName } from '../dialects/dialect.js';
import { parseStoreOptions, type MongoStoreOptions } from '../options.js';
import { MongoLeases } from './leases.js';

/** `writeConcern` (every store has it) defaults to `{ w: 'majority' }`: a granted lease survives a failover. */
export type MongoLockProviderOptions = MongoStoreOptions;

/**
 * {@link LockProvider} on MongoDB (collection `stowage_locks`): leases with owner tokens and
 * fencing tokens that never go back, on the server's clock, with majority writes; waiting
 * acquisitions woken by change streams on replica sets and sharded clusters (polling
 * elsewhere). Handles, waiting and `withLock` are the kit's.
 */
export class MongoLockProvider extends LockProviderBase {
  readonly #connection: StoreConnection;
  readonly #leases: MongoLeases;
  readonly #collectionName: string;

  constructor(options: MongoLockProviderOptions) {
    const settings = parseStoreOptions(options, 'locks', 'MongoLockProvider');
    const connection = new StoreConnection(settings, [
      { kind: 'locks', name: settings.collection, writeConcern: settings.writeConcern },
    ]);
    const leases = new MongoLeases(connection, 'locks');
    super(settings.identity, leases);
    this.#connection = connection;
    this.#leases = leases;
    this.#collectionName = settings.collection;
  }

  get capabilities(): Capabilities {
    return this.#connection.capabilities({ wakeups: true });
  }

  /** How this store writes time-dependent documents, once connected. */
  get dialect(): MongoDialectName | undefined {
    return this.#connection.dialect;
  }

  get collectionName(): string {
    return this.#collectionName;
  }

  /** Connects, detects the server's features and creates the collection (optional: the first call does it). */
  async connect(): Promise<this> {
    await this.call('locks.ready', () => this.#connection.ready());
    return this;
  }

  protected override toStowageError(error: unknown): unknown {
    return this.#connection.toStowageError(error);
  }

  protected override async _close(): Promise<void> {
    await this.#leases.close();
    await this.#connection.close();
  }
}
