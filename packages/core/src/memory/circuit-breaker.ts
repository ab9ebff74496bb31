import type { Capabilities } from '../capabilities.js';
import type { Clock } from '../clock.js';
import type {
  CircuitBreakerPersistedState,
  CircuitBreakerStore,
  RecordFailureOptions,
} from '../contracts/circuit-breaker.js';
import { assertOptionalDuration, assertValidKey } from '../keys.js';
import { Lifecycle } from '../lifecycle.js';
import {
  assertCircuitState,
  assertMaxFailures,
  effectiveCircuitState,
  nextCircuitOnFailure,
} from '../resilience-support.js';
import { MEMORY_CAPABILITIES, resolveMemoryOptions, type MemoryOptions, type MemoryStorage } from './storage.js';

export type MemoryCircuitBreakerStoreOptions = MemoryOptions;

/** Circuit-breaker state in process memory; each call is one atomic step on the event loop. */
export class MemoryCircuitBreakerStore implements CircuitBreakerStore {
  readonly capabilities: Capabilities = MEMORY_CAPABILITIES;
  readonly #storage: MemoryStorage;
  readonly #clock: Clock;
  readonly #lifecycle = new Lifecycle('MemoryCircuitBreakerStore');

  constructor(options?: MemoryCircuitBreakerStoreOptions) {
    const { storage, clock } = resolveMemoryOptions(options);
    this.#storage = storage;
    this.#clock = clock;
  }

  async getState(key: string): Promise<CircuitBreakerPersistedState | null> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    const record = this.#storage.circuits.get(key);
    if (!record) return null;
    return { ...record, state: effectiveCircuitState(record.state, record.openUntil, this.#clock.now()) };
  }

  async setState(key: string, state: CircuitBreakerPersistedState): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertCircuitState(state);
    const { state: name, failureCount, lastFailureTime, lastSuccessTime, openUntil } = state;
    this.#storage.circuits.set(
      key,
      withoutUndefined({ state: name, failureCount, lastFailureTime, lastSuccessTime, openUntil }),
    );
  }

  async recordFailure(key: string, maxFailures: number, options?: RecordFailureOptions): Promise<number> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    assertMaxFailures(maxFailures);
    assertOptionalDuration(options?.cooldown, 'cooldown');
    const next = nextCircuitOnFailure(
      this.#storage.circuits.get(key) ?? null,
      maxFailures,
      options?.cooldown,
      this.#clock.now(),
    );
    this.#storage.circuits.set(key, next);
    return next.failureCount;
  }

  async recordSuccess(key: string): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    const current = this.#storage.circuits.get(key);
    this.#storage.circuits.set(
      key,
      withoutUndefined({
        state: 'closed',
        failureCount: 0,
        lastFailureTime: current?.lastFailureTime,
        lastSuccessTime: this.#clock.now(),
      }),
    );
  }

  async delete(key: string): Promise<void> {
    this.#lifecycle.assertOpen();
    assertValidKey(key);
    this.#storage.circuits.delete(key);
  }

  close(): Promise<void> {
    return this.#lifecycle.close();
  }
}

function withoutUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, field]) => field !== undefined)) as T;
}
