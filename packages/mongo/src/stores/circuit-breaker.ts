import type { CircuitBreakerPersistedState } from '@stowage/core';
import { CircuitBreakerStoreBase } from '@stowage/core/adapter';
import { mongoStore, storeDatabase, type StoreDatabase } from '../database.js';
import type { CircuitDocument } from '../documents.js';
import { upsertById } from '../errors.js';
import type { MongoStoreOptions } from '../options.js';

export type MongoCircuitBreakerStoreOptions = MongoStoreOptions;

/**
 * {@link CircuitBreakerStore} on one collection (default `stowage_circuit`). `recordFailure`
 * counts on the server, so concurrent failures never lose an increment and exactly one caller
 * gets the count that opened the circuit; cool-downs and the half-open transition are decided
 * on the server's clock, so every process agrees.
 */
export class MongoCircuitBreakerStore extends mongoStore(CircuitBreakerStoreBase) {
  readonly #db: StoreDatabase<CircuitDocument>;

  constructor(options: MongoCircuitBreakerStoreOptions) {
    const db = storeDatabase<CircuitDocument>(options, { kind: 'circuitBreaker', name: 'MongoCircuitBreakerStore' });
    super(db.identity, db);
    this.#db = db;
  }

  protected async _getState(key: string): Promise<CircuitBreakerPersistedState | null> {
    const { collection, dialect } = await this.#db.use();
    return dialect.readCircuit(collection, key);
  }

  protected async _setState(key: string, state: CircuitBreakerPersistedState): Promise<void> {
    const { collection } = await this.#db.use();
    const document: Omit<CircuitDocument, '_id'> = { state: state.state, failureCount: state.failureCount };
    if (state.lastFailureTime !== undefined) document.lastFailureTime = new Date(state.lastFailureTime);
    if (state.lastSuccessTime !== undefined) document.lastSuccessTime = new Date(state.lastSuccessTime);
    if (state.openUntil !== undefined) document.openUntil = new Date(state.openUntil);
    await upsertById(() => collection.replaceOne({ _id: key }, document, { upsert: true }));
  }

  protected async _recordFailure(key: string, maxFailures: number, cooldown: number | undefined): Promise<number> {
    const { collection, dialect } = await this.#db.use();
    return dialect.recordFailure(collection, key, maxFailures, cooldown);
  }

  protected async _recordSuccess(key: string): Promise<void> {
    const { collection, dialect } = await this.#db.use();
    const update = dialect.recordSuccess();
    await upsertById(() => collection.updateOne({ _id: key }, update, { upsert: true }));
  }

  protected async _delete(key: string): Promise<void> {
    const { collection } = await this.#db.use();
    await collection.deleteOne({ _id: key });
  }
}
