import { StowageError } from '@stowage/core';
import type { SweepJob, SweepRegistration } from '@stowage/core/adapter';
import type { ReleaseWakeups } from '../wakeups.js';
import { sharedPoolFor, type SharedPool } from './pool.js';
import type { ConnectionSource, PostgresPool, PostgresPoolClient, PostgresQueryResult } from './types.js';

/**
 * The connection of one store: its share of a {@link SharedPool}, and how it sends statements.
 * Stores on the same settings share the pool (and its LISTEN connection); `end()` gives the
 * store's share back.
 */
export class PostgresConnection {
  readonly #shared: SharedPool;
  readonly #prepare: boolean;
  readonly #maxWaiting: number | undefined;
  #ended = false;

  /** Uses the pool the options name, or the one stowage keeps for these settings (creating it if needed). */
  constructor(source: ConnectionSource) {
    this.#shared = sharedPoolFor(source);
    this.#shared.addUser();
    this.#prepare = source.preparedStatements;
    this.#maxWaiting = source.maxWaiting;
  }

  /** The pool itself (schema creation is remembered per pool). */
  get pool(): PostgresPool {
    return this.#shared.pool;
  }

  /**
   * Runs one statement (one round trip). A statement with parameters runs as a named prepared
   * statement, so the server parses and plans it once per connection instead of on every call
   * (see prepared-statements.ts). Driver errors pass unchanged: the store maps them.
   */
  query(text: string, values?: unknown[]): Promise<PostgresQueryResult> {
    const full = this.#queueFull();
    return full ? Promise.reject(full) : this.#shared.query(text, values, this.#prepare);
  }

  /** Runs `fn` with a client of the pool to itself (see `SharedPool.withClient`). */
  withClient<T>(fn: (client: PostgresPoolClient, broken: (error: Error) => void) => Promise<T>): Promise<T> {
    const full = this.#queueFull();
    return full ? Promise.reject(full) : this.#shared.withClient(fn);
  }

  /** The error of a call that would wait behind `maxWaiting` others for a connection, if it would. */
  #queueFull(): StowageError | undefined {
    if (this.#maxWaiting === undefined) return undefined;
    const waiting = (this.#shared.pool as { waitingCount?: number }).waitingCount ?? 0;
    if (waiting < this.#maxWaiting) return undefined;
    return new StowageError(
      'E_UNAVAILABLE',
      `every connection of the pool is busy and ${waiting} calls already wait for one (maxWaiting ${this.#maxWaiting}): retry later`,
    );
  }

  /** Wake-ups on `channel`, through the pool's one LISTEN connection. */
  listen(channel: string): ReleaseWakeups {
    return this.#shared.listener.subscribe(channel);
  }

  /**
   * Adds `job` to the one background sweeper of `table` (`TableName.key`) on this pool, run
   * every `interval` ms at most (see sweeper.ts); the registration ends the store's part.
   */
  sweep(table: string, job: SweepJob, interval: number): SweepRegistration {
    return this.#shared.sweepers.register(table, job, interval);
  }

  /** Gives the store's share back: the last one ends a pool stowage created; a pool passed in is left open. */
  end(): Promise<void> {
    if (this.#ended) return Promise.resolve();
    this.#ended = true;
    return this.#shared.removeUser();
  }
}
