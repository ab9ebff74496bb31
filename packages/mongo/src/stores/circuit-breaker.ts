import type { Capabilities, CircuitBreakerPersistedState } from '@stowage/core';
import { CircuitBreakerStoreBase } from '@stowage/core/adapter';
import type { Collection } from 'mongodb';
import { StoreConnection } from '../connection.js';
import type { MongoDialect, MongoDialectName } from '../dialects/dialect.js';
import type { CircuitDocument } from '../documents.js';
import { upsertById } from '../errors.js';
import { parseStoreOptions, type MongoStoreOptions } from '../options.js';

export type MongoCircuitBreakerStoreOptions = MongoStoreOptions;

/**
 * {@link CircuitBreakerStore} on one collection (default `stowage_circuit`). `recordFailure`
 * counts on the server, so concurrent failures never lose an increment and exactly one caller
 * gets the count that opened the circuit; cool-downs and the half-open transition are decided
 * on the server's clock, so every process agrees.
 */
export class MongoCircuitBreakerStore extends CircuitBreakerStoreBase {
  readonly #connection: StoreConnection;
  readonly #collectionName: string;

  constructor(options: MongoCircuitBreakerStoreOptions) {
    const settings = parseStoreOptions(options, 'circuitBreaker', 'MongoCircuitBreakerStore');
    super(settings.identity);
    this.#collectionName = settings.collection;
    this.#connection = new StoreConnection(settings, [{ kind: 'circuitBreaker', name: settings.collection, writeConcern: settings.writeConcern }]);
  }

  get capabilities(): Capabilities {
    return this.#connection.capabilities();
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
    await this.call('circuitBreaker.ready', () => this.#connection.ready());
    return this;
  }

  protected override toStowageError(error: unknown): unknown {
    return this.#connection.toStowageError(error);
  }

  protected override _close(): Promise<void> {
    return this.#connection.close();
  }

  protected async _getState(key: string): Promise<CircuitBreakerPersistedState | null> {
    const { collection, dialect } = await this.#use();
    return dialect.readCircuit(collection, key);
  }

  protected async _setState(key: string, state: CircuitBreakerPersistedState): Promise<void> {
    const { collection } = await this.#use();
    const document: Omit<CircuitDocument, '_id'> = { state: state.state, failureCount: state.failureCount };
    if (state.lastFailureTime !== undefined) document.lastFailureTime = new Date(state.lastFailureTime);
    if (state.lastSuccessTime !== undefined) document.lastSuccessTime = new Date(state.lastSuccessTime);
    if (state.openUntil !== undefined) document.openUntil = new Date(state.openUntil);
    await upsertById(() => collection.replaceOne({ _id: key }, document, { upsert: true }));
  }

  protected async _recordFailure(key: string, maxFailures: number, cooldown: number | undefined): Promise<number> {
    const { collection, dialect } = await this.#use();
    return dialect.recordFailure(collection, key, maxFailures, cooldown);
  }

  protected async _recordSuccess(key: string): Promise<void> {
    const { collection, dialect } = await this.#use();
    const update = dialect.recordSuccess();
    await upsertById(() => collection.updateOne({ _id: key }, update, { upsert: true }));
  }

  protected async _delete(key: string): Promise<void> {
    const { collection } = await this.#use();
    await collection.deleteOne({ _id: key });
  }

  async #use(): Promise<{ collection: Collection<CircuitDocument>; dialect: MongoDialect }> {
    const ready = await this.#connection.ready();
    return { collection: ready.collection<CircuitDocument>('circuitBreaker'), dialect: ready.dialect };
  }
}
