import type { Clock } from '../clock.js';
import type { CircuitBreakerPersistedState } from '../contracts/circuit-breaker.js';
import { CircuitBreakerStoreBase, effectiveCircuitState, nextCircuitOnFailure } from '../adapter/circuit-breaker.js';
import { MEMORY_HANDLE, resolveMemoryOptions, type MemoryOptions, type MemoryStorage } from './storage.js';

export type MemoryCircuitBreakerStoreOptions = MemoryOptions;

/** Circuit-breaker state in process memory; each call is one atomic step on the event loop. */
export class MemoryCircuitBreakerStore extends CircuitBreakerStoreBase {
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;

  constructor(options?: MemoryCircuitBreakerStoreOptions) {
    super({ name: 'MemoryCircuitBreakerStore', system: 'memory' }, MEMORY_HANDLE);
    const { storage, clock } = resolveMemoryOptions(options);
    this.#storage = storage;
    this.#clock = clock;
  }

  protected async _getState(key: string): Promise<CircuitBreakerPersistedState | null> {
    const record = this.#storage.circuits.get(key);
    if (!record) return null;
    return { ...record, state: effectiveCircuitState(record.state, record.openUntil, this.#clock.now()) };
  }

  protected async _setState(key: string, state: CircuitBreakerPersistedState): Promise<void> {
    this.#storage.circuits.set(key, { ...state });
  }

  protected async _recordFailure(key: string, maxFailures: number, cooldown: number | undefined): Promise<number> {
    const next = nextCircuitOnFailure(this.#storage.circuits.get(key) ?? null, maxFailures, cooldown, this.#clock.now());
    this.#storage.circuits.set(key, next);
    return next.failureCount;
  }

  protected async _recordSuccess(key: string): Promise<void> {
    const lastFailureTime = this.#storage.circuits.get(key)?.lastFailureTime;
    this.#storage.circuits.set(key, {
      state: 'closed',
      failureCount: 0,
      ...(lastFailureTime !== undefined && { lastFailureTime }),
      lastSuccessTime: this.#clock.now(),
    });
  }

  protected async _delete(key: string): Promise<void> {
    this.#storage.circuits.delete(key);
  }
}
