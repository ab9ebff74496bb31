import type { StowageResource } from './common.js';

export type CircuitState = 'closed' | 'open' | 'half-open';

/** The shape go-go-scope persists, plus the store-decided cool-down. */
export interface CircuitBreakerPersistedState {
  state: CircuitState;
  failureCount: number;
  /** Epoch ms on the store's clock. */
  lastFailureTime?: number;
  lastSuccessTime?: number;
  /**
   * While `state` is `open`: the epoch ms (store clock) from which the circuit reports
   * `half-open`. Set by `recordFailure` with a `cooldown`.
   */
  openUntil?: number;
}

export interface RecordFailureOptions {
  /** When this failure opens the circuit, keep it open this many ms before it reads `half-open`. */
  cooldown?: number;
}

/**
 * Circuit-breaker state shared by every process. Counters are atomic on the server:
 * concurrent failures never lose an increment, and exactly one caller sees the count reach
 * `maxFailures` (the one that opened the circuit).
 */
export interface CircuitBreakerStore extends StowageResource {
  /** `null` when nothing was recorded. An `open` circuit past `openUntil` reads `half-open`. */
  getState(key: string): Promise<CircuitBreakerPersistedState | null>;
  setState(key: string, state: CircuitBreakerPersistedState): Promise<void>;
  /**
   * Adds one failure; opens the circuit when the count reaches `maxFailures`.
   * Resolves to the failure count after this failure.
   */
  recordFailure(key: string, maxFailures: number, options?: RecordFailureOptions): Promise<number>;
  /** Closes the circuit and resets the count. */
  recordSuccess(key: string): Promise<void>;
  delete(key: string): Promise<void>;
}
