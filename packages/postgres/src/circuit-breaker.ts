import {
  StowageError,
  assertCircuitState,
  assertMaxFailures,
  assertOptionalDuration,
  type CircuitBreakerPersistedState,
  type CircuitBreakerStore,
  type RecordFailureOptions,
} from '@stowage/core';
import { storedKey } from './key-encoding.js';
import { DEFAULT_TABLE_NAMES } from './schema.js';
import {
  PostgresStoreBase,
  epochMs,
  msInterval,
  storeSetup,
  timestampFromMs,
  type PostgresStoreOptions,
} from './store.js';

export type PostgresCircuitBreakerStoreOptions = PostgresStoreOptions;

/** `failure_count` is an INTEGER column. */
const MAX_COUNT = 2_147_483_647;

/**
 * {@link CircuitBreakerStore} on one table (default `stowage_circuit_breakers`), one row per
 * breaker. `recordFailure` is one atomic upsert: the increment, the transition to `open` and
 * the cool-down end (`open_until`, server clock) are decided by the server, so concurrent
 * processes never lose a failure and exactly one of them sees the count reach `maxFailures`.
 */
export class PostgresCircuitBreakerStore extends PostgresStoreBase implements CircuitBreakerStore {
  readonly #table: string;

  constructor(options: PostgresCircuitBreakerStoreOptions | string) {
    const setup = storeSetup('circuitBreaker', options, DEFAULT_TABLE_NAMES.circuitBreaker);
    super('PostgresCircuitBreakerStore', setup);
    this.#table = setup.tables[0]![1].sql;
  }

  async getState(key: string): Promise<CircuitBreakerPersistedState | null> {
    this.assertOpen();
    key = storedKey(key);
    const { rows } = await this.run(
      `SELECT CASE WHEN state = 'open' AND open_until <= now() THEN 'half-open' ELSE state END AS state,
              failure_count,
              ${epochMs('last_failure_time')} AS last_failure_time,
              ${epochMs('last_success_time')} AS last_success_time,
              ${epochMs('open_until')} AS open_until
       FROM ${this.#table} WHERE key = $1`,
      [key],
    );
    if (rows.length === 0) return null;
    const row = rows[0];
    const state: CircuitBreakerPersistedState = { state: row.state, failureCount: row.failure_count };
    if (row.last_failure_time !== null) state.lastFailureTime = Math.floor(row.last_failure_time);
    if (row.last_success_time !== null) state.lastSuccessTime = Math.floor(row.last_success_time);
    if (row.open_until !== null) state.openUntil = Math.floor(row.open_until);
    return state;
  }

  async setState(key: string, state: CircuitBreakerPersistedState): Promise<void> {
    this.assertOpen();
    key = storedKey(key);
    assertCircuitState(state);
    if (state.failureCount > MAX_COUNT) throw new StowageError('E_INVALID_VALUE', 'failureCount is too large');
    await this.run(
      `INSERT INTO ${this.#table} AS c (key, state, failure_count, last_failure_time, last_success_time, open_until, updated_at)
       VALUES ($1, $2, $3, ${timestampFromMs('$4')}, ${timestampFromMs('$5')}, ${timestampFromMs('$6')}, now())
       ON CONFLICT (key) DO UPDATE SET state = EXCLUDED.state, failure_count = EXCLUDED.failure_count,
         last_failure_time = EXCLUDED.last_failure_time, last_success_time = EXCLUDED.last_success_time,
         open_until = EXCLUDED.open_until, updated_at = EXCLUDED.updated_at`,
      [
        key,
        state.state,
        state.failureCount,
        state.lastFailureTime ?? null,
        state.lastSuccessTime ?? null,
        state.openUntil ?? null,
      ],
    );
  }

  /**
   * One statement. The failure that brings the count to `maxFailures` opens the circuit (and
   * starts the cool-down); a failure while the circuit reads `half-open` opens it again.
   */
  async recordFailure(key: string, maxFailures: number, options?: RecordFailureOptions): Promise<number> {
    this.assertOpen();
    key = storedKey(key);
    assertMaxFailures(maxFailures);
    const threshold = Math.min(maxFailures, MAX_COUNT);
    if (options !== undefined && (options === null || typeof options !== 'object')) {
      throw new StowageError('E_INVALID_OPTION', 'recordFailure options must be an object');
    }
    assertOptionalDuration(options?.cooldown, 'cooldown');
    const openUntil = `now() + ${msInterval('$3')}`;
    const { rows } = await this.run(
      `INSERT INTO ${this.#table} AS c (key, state, failure_count, last_failure_time, open_until, updated_at)
       VALUES ($1, CASE WHEN 1 >= $2::int THEN 'open' ELSE 'closed' END, 1, now(),
               CASE WHEN 1 >= $2::int THEN ${openUntil} END, now())
       ON CONFLICT (key) DO UPDATE SET
         failure_count = c.failure_count + 1,
         last_failure_time = now(),
         updated_at = now(),
         state = CASE WHEN c.failure_count + 1 >= $2::int THEN 'open' ELSE c.state END,
         open_until = CASE
           WHEN c.failure_count + 1 >= $2::int AND (c.state <> 'open' OR c.open_until <= now()) THEN ${openUntil}
           ELSE c.open_until END
       RETURNING failure_count`,
      [key, threshold, options?.cooldown ?? null],
    );
    return rows[0].failure_count;
  }

  async recordSuccess(key: string): Promise<void> {
    this.assertOpen();
    key = storedKey(key);
    await this.run(
      `INSERT INTO ${this.#table} AS c (key, state, failure_count, last_success_time, updated_at)
       VALUES ($1, 'closed', 0, now(), now())
       ON CONFLICT (key) DO UPDATE SET state = 'closed', failure_count = 0, last_success_time = now(),
         open_until = NULL, updated_at = now()`,
      [key],
    );
  }

  async delete(key: string): Promise<void> {
    this.assertOpen();
    key = storedKey(key);
    await this.run(`DELETE FROM ${this.#table} WHERE key = $1`, [key]);
  }
}
