import { StowageError, type CircuitBreakerPersistedState } from '@stowage/core';
import { CircuitBreakerStoreBase } from '@stowage/core/adapter';
import { resolveStore, type StoreDatabase } from '../database.js';
import { encodeText } from '../key-encoding.js';
import type { PostgresStoreOptions } from '../options.js';
import { epochMs, msInterval, timestampFromMs } from '../sql.js';

export type PostgresCircuitBreakerStoreOptions = PostgresStoreOptions;

/** `failure_count` is an INTEGER column. */
const MAX_COUNT = 2_147_483_647;

/**
 * {@link CircuitBreakerStore} on one table (default `stowage_circuit_breakers`), one row per
 * breaker. `recordFailure` is one atomic upsert: the increment, the transition to `open` and
 * the cool-down end (`open_until`, server clock) are decided by the server, so concurrent
 * processes never lose a failure and exactly one of them sees the count reach `maxFailures`.
 */
export class PostgresCircuitBreakerStore extends CircuitBreakerStoreBase {
  readonly #db: StoreDatabase;
  readonly #sql: ReturnType<typeof circuitStatements>;

  constructor(options: PostgresCircuitBreakerStoreOptions | string) {
    const { table, identity, db } = resolveStore('PostgresCircuitBreakerStore', options, 'circuitBreaker');
    super(identity, db);
    this.#db = db;
    this.#sql = circuitStatements(table.sql);
  }

  /** The DDL this store runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return this.#db.schemaSql();
  }

  protected async _getState(key: string): Promise<CircuitBreakerPersistedState | null> {
    const { rows } = await this.#db.run(this.#sql.getState, [encodeText(key)]);
    if (rows.length === 0) return null;
    const row = rows[0];
    const state: CircuitBreakerPersistedState = { state: row.state, failureCount: row.failure_count };
    if (row.last_failure_time !== null) state.lastFailureTime = Math.floor(row.last_failure_time);
    if (row.last_success_time !== null) state.lastSuccessTime = Math.floor(row.last_success_time);
    if (row.open_until !== null) state.openUntil = Math.floor(row.open_until);
    return state;
  }

  protected async _setState(key: string, state: CircuitBreakerPersistedState): Promise<void> {
    if (state.failureCount > MAX_COUNT) throw new StowageError('E_INVALID_VALUE', `failureCount is larger than ${MAX_COUNT}`);
    const { lastFailureTime = null, lastSuccessTime = null, openUntil = null } = state;
    await this.#db.run(this.#sql.setState, [encodeText(key), state.state, state.failureCount, lastFailureTime, lastSuccessTime, openUntil]);
  }

  protected async _recordFailure(key: string, maxFailures: number, cooldown: number | undefined): Promise<number> {
    const { rows } = await this.#db.run(this.#sql.recordFailure, [encodeText(key), Math.min(maxFailures, MAX_COUNT), cooldown ?? null]);
    return rows[0].failure_count;
  }

  protected async _recordSuccess(key: string): Promise<void> {
    await this.#db.run(this.#sql.recordSuccess, [encodeText(key)]);
  }

  protected async _delete(key: string): Promise<void> {
    await this.#db.run(this.#sql.delete, [encodeText(key)]);
  }
}

/** The statements of a circuit-breaker table, built once (see `keyValueStatements` in kv.ts). */
export function circuitStatements(table: string) {
  const openUntil = `statement_timestamp() + ${msInterval('$3')}`;
  return {
    getState: `SELECT CASE WHEN state = 'open' AND open_until <= statement_timestamp() THEN 'half-open' ELSE state END AS state,
        failure_count,
        ${epochMs('last_failure_time')} AS last_failure_time,
        ${epochMs('last_success_time')} AS last_success_time,
        ${epochMs('open_until')} AS open_until
      FROM ${table} WHERE key = $1`,
    setState: `INSERT INTO ${table} AS c (key, state, failure_count, last_failure_time, last_success_time, open_until, updated_at)
      VALUES ($1, $2, $3, ${timestampFromMs('$4')}, ${timestampFromMs('$5')}, ${timestampFromMs('$6')}, statement_timestamp())
      ON CONFLICT (key) DO UPDATE SET state = EXCLUDED.state, failure_count = EXCLUDED.failure_count,
        last_failure_time = EXCLUDED.last_failure_time, last_success_time = EXCLUDED.last_success_time,
        open_until = EXCLUDED.open_until, updated_at = EXCLUDED.updated_at`,
    // `nextCircuitOnFailure` of the kit, in one statement: the failure that brings the count to
    // `maxFailures` opens the circuit (and starts the cool-down); a failure while it reads
    // half-open opens it again.
    recordFailure: `INSERT INTO ${table} AS c (key, state, failure_count, last_failure_time, open_until, updated_at)
      VALUES ($1, CASE WHEN 1 >= $2::int THEN 'open' ELSE 'closed' END, 1, statement_timestamp(),
              CASE WHEN 1 >= $2::int THEN ${openUntil} END, statement_timestamp())
      ON CONFLICT (key) DO UPDATE SET
        failure_count = c.failure_count + 1,
        last_failure_time = statement_timestamp(),
        updated_at = statement_timestamp(),
        state = CASE WHEN c.failure_count + 1 >= $2::int THEN 'open' ELSE c.state END,
        open_until = CASE
          WHEN c.failure_count + 1 >= $2::int AND (c.state <> 'open' OR c.open_until <= statement_timestamp()) THEN ${openUntil}
          ELSE c.open_until END
      RETURNING failure_count`,
    recordSuccess: `INSERT INTO ${table} AS c (key, state, failure_count, last_success_time, updated_at)
      VALUES ($1, 'closed', 0, statement_timestamp(), statement_timestamp())
      ON CONFLICT (key) DO UPDATE SET state = 'closed', failure_count = 0, last_success_time = statement_timestamp(),
        open_until = NULL, updated_at = statement_timestamp()`,
    delete: `DELETE FROM ${table} WHERE key = $1`,
  };
}
