import { StowageError } from '@stowage/core';
import { sqlState } from '../errors.js';
import type { PostgresPool, PostgresPoolClient } from './types.js';

/**
 * Where every statement and transaction of a pool gets its client: waits for room while the
 * server is full (see {@link PoolCheckout.checkout}), and fails at once, never hangs, on a pool
 * passed in that its owner ended (see {@link PoolCheckout.connect}). One per `SharedPool`
 * (pool.ts), listening to the pool's 'release' and 'remove' events until {@link PoolCheckout.detach}.
 */
export class PoolCheckout {
  readonly #pool: PostgresPool;
  readonly #owned: boolean;
  /** Called once when the owner of a pool passed in ends it (the pool closes its LISTEN connection). */
  readonly #onEnded: () => void;
  /** Aborts when the owner of a pool passed in ends it: calls waiting for a client then fail at once. */
  readonly #ended = new AbortController();
  /** Calls waiting for a connection of the pool while the server is full (see {@link checkout}), first come first. */
  readonly #roomWaiters: Array<() => void> = [];
  /** Wakes the first of {@link #roomWaiters} to try a new connection, after a delay that grows while the server stays full. */
  #probeTimer: ReturnType<typeof setTimeout> | undefined;
  #probeAttempt = 0;
  readonly #onPoolEvent = () => {
    if (this.#isEnding()) return;
    // pg-pool emits 'release' before the client is idle again, and 'remove' before the next
    // connection can open: the woken call asks once the pool is done with it.
    const wake = this.#roomWaiters.shift();
    if (wake) setImmediate(wake);
  };
  /** Checkouts of a pool passed in that are waiting for pg-pool (see {@link #watchEnding}). */
  #pendingCheckouts = 0;
  #endingTimer: ReturnType<typeof setInterval> | undefined;
  /**
   * A `pool.connect()` threw at once (a port out of range, from `PGPORT`): pg-pool counts the
   * client it was opening for good, so the pool's `end()` would wait for it forever.
   */
  #phantomClient = false;

  constructor(pool: PostgresPool, owned: boolean, onEnded: () => void) {
    this.#pool = pool;
    this.#owned = owned;
    this.#onEnded = onEnded;
    // A client let go gives a call waiting while the server is full its turn. pg.Pool has no
    // 'end' event; once the owner of a pool passed in called end(), every client it lets go is
    // 'release'd and 'remove'd with `ending` set.
    for (const event of POOL_EVENTS) events(pool)?.on?.(event, this.#onPoolEvent);
  }

  /** Whether a `pool.connect()` threw at once (see {@link #phantomClient}): the pool's `end()` would never settle. */
  get phantomClient(): boolean {
    return this.#phantomClient;
  }

  /** Stops listening to the pool's events (its last store closed). */
  detach(): void {
    for (const event of POOL_EVENTS) events(this.#pool)?.removeListener?.(event, this.#onPoolEvent);
  }

  /**
   * A client of the pool, the one place every statement and transaction gets theirs. The server
   * refusing a new connection because it is full (53300 too_many_connections: `max_connections`,
   * or the role's or database's `CONNECTION LIMIT`) does not fail the call: it waits for one of
   * the pool's connections, as if the pool's `max` were what the server granted, or for another
   * process to free room (the pool's probe; see {@link #waitForRoom}), up to
   * {@link #serverFullWait}, and then fails with `E_UNAVAILABLE`.
   */
  async checkout(): Promise<PostgresPoolClient> {
    const patience = this.#serverFullWait();
    let deadline: number | undefined;
    let refusal: unknown;
    // While calls wait for a connection of the pool, a new call takes its turn behind them.
    let waiting = this.#roomWaiters.length > 0;
    while (true) {
      if (waiting) {
        deadline ??= Date.now() + patience;
        const left = deadline - Date.now();
        if (left <= 0 && refusal !== undefined) throw serverFullError(refusal, patience);
        await this.#waitForRoom(Math.max(0, left), refusal !== undefined);
      }
      try {
        const client = await this.connect();
        // Nobody waits any more: the next time the server is full starts with short probes.
        if (waiting && this.#roomWaiters.length === 0) this.#probeAttempt = 0;
        return client;
      } catch (error) {
        if (sqlState(error) !== TOO_MANY_CONNECTIONS) throw error;
        refusal = error;
        waiting = true;
      }
    }
  }

  /**
   * Resolves at the call's turn: when the pool lets a client go (one waiter per release, first
   * come first served, so a freed client is taken rather than raced for with new connections
   * the server would refuse), when the pool's one probe timer fires (another process may have
   * freed room on the server: one refused connection per probe, not one per waiting call), or
   * after `left` ms (the call's deadline). `again`: the call already had its turn, and keeps its
   * place at the head of the line.
   */
  #waitForRoom(left: number, again: boolean): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        const index = this.#roomWaiters.indexOf(wake);
        if (index >= 0) this.#roomWaiters.splice(index, 1);
        if (this.#roomWaiters.length === 0) {
          clearTimeout(this.#probeTimer);
          this.#probeTimer = undefined;
        }
        resolve();
      };
      const timer = setTimeout(wake, left);
      if (again) this.#roomWaiters.unshift(wake);
      else this.#roomWaiters.push(wake);
      this.#probeTimer ??= setTimeout(() => {
        this.#probeTimer = undefined;
        this.#probeAttempt++;
        this.#roomWaiters[0]?.();
      }, retryDelay(this.#probeAttempt));
    });
  }

  /** How long a call waits for a connection of the pool when the server is full: the pool's `connectionTimeoutMillis`, or {@link SERVER_FULL_WAIT}. */
  #serverFullWait(): number {
    const timeout = (this.#pool.options as { connectionTimeoutMillis?: unknown } | undefined)?.connectionTimeoutMillis;
    return typeof timeout === 'number' && timeout > 0 ? timeout : SERVER_FULL_WAIT;
  }

  /**
   * One `pool.connect()`; a pool passed in that its owner ended fails at once, never hangs.
   * (The LISTEN connection's probe takes its client here, not from {@link checkout}: it does
   * not wait for room on a full server while its own connection holds a slot there.)
   */
  connect(): Promise<PostgresPoolClient> {
    if (this.#ended.signal.aborted || this.#isEnding()) return Promise.reject(poolEndedError());
    let connecting: Promise<PostgresPoolClient>;
    try {
      connecting = this.#pool.connect();
    } catch (error) {
      this.#phantomClient = true;
      return Promise.reject(error);
    }
    if (this.#owned) return connecting;
    // pg-pool keeps calls that wait for a client queued forever once end() was called.
    const ended = this.#ended.signal;
    this.#watchEnding(+1);
    return new Promise<PostgresPoolClient>((resolve, reject) => {
      const onEnded = () => reject(poolEndedError());
      ended.addEventListener('abort', onEnded, { once: true });
      connecting
        .then(
          (client) => {
            if (ended.aborted) client.release();
            else resolve(client);
          },
          (error: unknown) => reject(error),
        )
        .finally(() => {
          ended.removeEventListener('abort', onEnded);
          this.#watchEnding(-1);
        });
    });
  }

  /** Whether the owner of a pool passed in called its `end()` (pg-pool sets `ending` at once). */
  #isEnding(): boolean {
    if (this.#owned || (this.#pool as { ending?: unknown }).ending !== true) return false;
    this.#poolEnded();
    return true;
  }

  /**
   * Counts the checkouts of a pool passed in that wait for pg-pool. pg-pool says nothing when
   * its owner calls `end()` while holding clients (no 'release' or 'remove' until they come
   * back), and keeps such checkouts queued for good: while any wait, an unref'd timer looks at
   * `pool.ending`, so they fail with E_UNAVAILABLE without waiting for the owner.
   */
  #watchEnding(change: 1 | -1): void {
    this.#pendingCheckouts += change;
    if (this.#pendingCheckouts > 0 && this.#endingTimer === undefined && !this.#ended.signal.aborted) {
      this.#endingTimer = setInterval(() => this.#isEnding(), ENDING_CHECK_INTERVAL);
      this.#endingTimer.unref();
    } else if (this.#pendingCheckouts === 0 && this.#endingTimer !== undefined) {
      clearInterval(this.#endingTimer);
      this.#endingTimer = undefined;
    }
  }

  #poolEnded(): void {
    if (this.#ended.signal.aborted) return;
    this.#ended.abort();
    // The checkouts still queued in pg-pool fail now, and none is queued after this.
    clearInterval(this.#endingTimer);
    this.#endingTimer = undefined;
    // Their next attempt fails at once with the pool ended.
    for (const wake of [...this.#roomWaiters]) wake();
    this.#onEnded();
  }
}

const POOL_EVENTS = ['release', 'remove'] as const;
/** How often a pool passed in is looked at for its owner's `end()` while checkouts wait (see `#watchEnding`). */
const ENDING_CHECK_INTERVAL = 50;

/** SQLSTATE too_many_connections: `max_connections`, or a role's or database's `CONNECTION LIMIT`, reached. */
const TOO_MANY_CONNECTIONS = '53300';
/** How long a call waits for a connection of its pool while the server is full, when the pool sets no `connectionTimeoutMillis`. */
const SERVER_FULL_WAIT = 10_000;
/** Between the probes of a pool while the server is full: the first delay, doubled per probe up to the last (then jittered). */
const FIRST_FULL_RETRY_DELAY = 10;
const MAX_FULL_RETRY_DELAY = 1000;

/** The delay before probe `attempt + 1`: exponential, with jitter so that the pools of many processes do not ask at once. */
function retryDelay(attempt: number): number {
  const ceiling = Math.min(FIRST_FULL_RETRY_DELAY * 2 ** attempt, MAX_FULL_RETRY_DELAY);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** The call waited `waited` ms for a connection of its pool while the server stayed full. */
function serverFullError(cause: unknown, waited: number): StowageError {
  return new StowageError(
    'E_UNAVAILABLE',
    `PostgreSQL is at max_connections (or the role's or database's connection limit) and no connection of the pool came free within ${waited} ms (connectionTimeoutMillis, default ${SERVER_FULL_WAIT}): use fewer connections per process (pool max) or raise the limit`,
    { cause },
  );
}

interface PoolEvents {
  on?(event: string, listener: () => void): unknown;
  removeListener?(event: string, listener: () => void): unknown;
}

function events(pool: PostgresPool): PoolEvents | undefined {
  return pool as unknown as PoolEvents;
}

function poolEndedError(): StowageError {
  return new StowageError('E_UNAVAILABLE', 'the pg.Pool was ended by its owner: stowage cannot run statements on it');
}
