import type { Checkpoint } from './contracts/checkpoints.js';
import type { CircuitBreakerPersistedState, CircuitState } from './contracts/circuit-breaker.js';
import { StowageError } from './errors.js';
import { assertValidKey, describeType, describeValue } from './keys.js';

/**
 * Validation and decisions shared by every circuit-breaker, checkpoint and idempotency store,
 * so that all adapters reject the same inputs with the same codes.
 */

const CIRCUIT_STATES: readonly CircuitState[] = ['closed', 'open', 'half-open'];

/** Throws `E_INVALID_VALUE` unless `state` is a well-formed persisted circuit state. */
export function assertCircuitState(state: unknown): asserts state is CircuitBreakerPersistedState {
  if (state === null || typeof state !== 'object' || Array.isArray(state)) {
    throw new StowageError('E_INVALID_VALUE', `circuit state must be an object, got ${describeType(state)}`);
  }
  const { state: name, failureCount, lastFailureTime, lastSuccessTime, openUntil } =
    state as CircuitBreakerPersistedState;
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

/** Throws `E_INVALID_KEY` / `E_INVALID_VALUE` unless `checkpoint` has the documented shape (data is checked by the codec). */
export function assertCheckpoint(checkpoint: unknown): asserts checkpoint is Checkpoint<unknown> {
  if (checkpoint === null || typeof checkpoint !== 'object' || Array.isArray(checkpoint)) {
    throw new StowageError('E_INVALID_VALUE', `checkpoint must be an object, got ${describeType(checkpoint)}`);
  }
  const { id, taskId, sequence, timestamp, progress, estimatedTimeRemaining } = checkpoint as Checkpoint<unknown>;
  assertValidKey(id, 'checkpoint id');
  assertValidKey(taskId, 'taskId');
  if (!Number.isSafeInteger(sequence) || sequence < 0) {
    throw new StowageError('E_INVALID_VALUE', `sequence must be a non-negative integer, got ${describeValue(sequence)}`);
  }
  for (const [field, value] of Object.entries({ timestamp, progress })) {
    if (!Number.isFinite(value)) {
      throw new StowageError('E_INVALID_VALUE', `${field} must be a finite number, got ${describeValue(value)}`);
    }
  }
  if (estimatedTimeRemaining !== undefined && !Number.isFinite(estimatedTimeRemaining)) {
    throw new StowageError(
      'E_INVALID_VALUE',
      `estimatedTimeRemaining must be a finite number or absent, got ${describeValue(estimatedTimeRemaining)}`,
    );
  }
}

/** Throws `E_INVALID_OPTION` unless `keepCount` is a non-negative integer. */
export function assertKeepCount(keepCount: unknown): asserts keepCount is number {
  if (!Number.isSafeInteger(keepCount) || (keepCount as number) < 0) {
    throw new StowageError('E_INVALID_OPTION', `keepCount must be a non-negative integer, got ${describeValue(keepCount)}`);
  }
}

/** Throws `E_INVALID_OPTION` unless `token` looks like a reservation token. */
export function assertReservationToken(token: unknown): asserts token is string {
  if (typeof token !== 'string' || token.length === 0 || token.length > 256) {
    throw new StowageError('E_INVALID_OPTION', 'token must be the non-empty string returned by reserve()');
  }
}
