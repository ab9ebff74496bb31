import type {
  CircuitBreakerPersistedState,
  CircuitBreakerStore,
  CircuitState,
  RecordFailureOptions,
} from '../contracts/circuit-breaker.js';
import { StowageError } from '../errors.js';
import { assertOptionalDuration, assertValidKey, describeType, describeValue } from '../keys.js';
import { assertOptionsObject } from './options.js';
import type { StoreIdentity } from '../diagnostics.js';
import { StoreBase, type StoreHandle } from './store.js';

/**
 * The whole {@link CircuitBreakerStore} behaviour over a few backend operations. Counters are
 * the backend's job, atomically on the server (no read-modify-write in JavaScript): of
 * concurrent failures none is lost and exactly one sees the count reach `maxFailures`. The
 * rule the backend applies is {@link nextCircuitOnFailure}.
 */
export abstract class CircuitBreakerStoreBase extends StoreBase implements CircuitBreakerStore {
  protected constructor(identity: string | StoreIdentity, handle: StoreHandle) {
    super(identity, handle, 'circuitBreaker');
  }

  getState(key: string): Promise<CircuitBreakerPersistedState | null> {
    return this.call('circuitBreaker.getState', () => {
      assertValidKey(key);
      return this._getState(key);
    }, key);
  }

  setState(key: string, state: CircuitBreakerPersistedState): Promise<void> {
    return this.call('circuitBreaker.setState', () => {
      assertValidKey(key);
      assertCircuitState(state);
      const { state: name, failureCount, lastFailureTime, lastSuccessTime, openUntil } = state;
      return this._setState(key, withoutUndefined({ state: name, failureCount, lastFailureTime, lastSuccessTime, openUntil }));
    }, key);
  }

  recordFailure(key: string, maxFailures: number, options?: RecordFailureOptions): Promise<number> {
    return this.call('circuitBreaker.recordFailure', () => {
      assertValidKey(key);
      assertMaxFailures(maxFailures);
      assertOptionsObject(options);
      assertOptionalDuration(options?.cooldown, 'cooldown');
      return this._recordFailure(key, maxFailures, options?.cooldown);
    }, key);
  }

  recordSuccess(key: string): Promise<void> {
    return this.call('circuitBreaker.recordSuccess', () => {
      assertValidKey(key);
      return this._recordSuccess(key);
    }, key);
  }

  delete(key: string): Promise<void> {
    return this.call('circuitBreaker.delete', () => {
      assertValidKey(key);
      return this._delete(key);
    }, key);
  }

  // --- backend operations -------------------------------------------------------------

  /** The stored state, `null` when none; an `open` circuit past `openUntil` (store clock) reads `half-open`. */
  protected abstract _getState(key: string): Promise<CircuitBreakerPersistedState | null>;
  /** Stores exactly the fields given (absent ones are cleared). */
  protected abstract _setState(key: string, state: CircuitBreakerPersistedState): Promise<void>;
  /** {@link nextCircuitOnFailure} in one atomic step on the store clock; the new count. */
  protected abstract _recordFailure(key: string, maxFailures: number, cooldown: number | undefined): Promise<number>;
  /** Closes the circuit: count 0, `lastSuccessTime` now, `lastFailureTime` kept, `openUntil` cleared. */
  protected abstract _recordSuccess(key: string): Promise<void>;
  protected abstract _delete(key: string): Promise<void>;
}

const CIRCUIT_STATES: readonly CircuitState[] = ['closed', 'open', 'half-open'];

/** Throws `E_INVALID_VALUE` unless `state` is a well-formed persisted circuit state. */
export function assertCircuitState(state: unknown): asserts state is CircuitBreakerPersistedState {
  if (state === null || typeof state !== 'object' || Array.isArray(state)) {
    throw new StowageError('E_INVALID_VALUE', `circuit state must be an object, got ${describeType(state)}`);
  }
  const { state: name, failureCount, lastFailureTime, lastSuccessTime, openUntil } = state as CircuitBreakerPersistedState;
  if (!CIRCUIT_STATES.includes(name)) {
    throw new StowageError('E_INVALID_VALUE', `state must be one of ${CIRCUIT_STATES.join(', ')}, got ${describeValue(name)}`);
  }
  if (!Number.isSafeInteger(failureCount) || failureCount < 0) {
    throw new StowageError('E_INVALID_VALUE', `failureCount must be a non-negative integer, got ${describeValue(failureCount)}`);
  }
  for (const [field, value] of Object.entries({ lastFailureTime, lastSuccessTime, openUntil })) {
    if (value !== undefined && !Number.isFinite(value)) {
      throw new StowageError('E_INVALID_VALUE', `${field} must be epoch milliseconds, got ${describeValue(value)}`);
    }
  }
}

/** Throws `E_INVALID_OPTION` unless `maxFailures` is a positive integer. */
export function assertMaxFailures(maxFailures: unknown): asserts maxFailures is number {
  if (!Number.isSafeInteger(maxFailures) || (maxFailures as number) < 1) {
    throw new StowageError('E_INVALID_OPTION', `maxFailures must be a positive integer, got ${describeValue(maxFailures)}`);
  }
}

/** What a stored circuit reads as at `now` (store clock): an `open` circuit past `openUntil` is `half-open`. */
export function effectiveCircuitState(state: CircuitState, openUntil: number | undefined, now: number): CircuitState {
  return state === 'open' && openUntil !== undefined && openUntil <= now ? 'half-open' : state;
}

/**
 * The one rule for `recordFailure`, which database adapters express in a single statement:
 * the count goes up by one; when it reaches `maxFailures` while the circuit does not read
 * `open` (it is closed, or half-open after its cool-down) the circuit opens, until
 * `now + cooldown` when a cool-down is given.
 */
export function nextCircuitOnFailure(
  current: CircuitBreakerPersistedState | null,
  maxFailures: number,
  cooldown: number | undefined,
  now: number,
): CircuitBreakerPersistedState {
  const failureCount = (current?.failureCount ?? 0) + 1;
  const reads = current ? effectiveCircuitState(current.state, current.openUntil, now) : 'closed';
  const next: CircuitBreakerPersistedState = { ...current, state: current?.state ?? 'closed', failureCount, lastFailureTime: now };
  if (failureCount >= maxFailures && reads !== 'open') {
    next.state = 'open';
    if (cooldown === undefined) delete next.openUntil;
    else next.openUntil = now + cooldown;
  }
  return next;
}

function withoutUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, field]) => field !== undefined)) as T;
}
