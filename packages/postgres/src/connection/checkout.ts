import { StowageError } from '@stowage/core';
import pg from 'pg';
import { sqlState } from '../errors.js';
import type { PostgresPool, PostgresPoolClient } from './types.js';

/** How a client of the pool is handed over: an error, or the client (callback form of `pool.connect`). */
export type ClientCallback = (error: unknown, client?: PostgresPoolClient) => void;

/**
 * Where every statement and transaction of a pool gets its client: waits for room while the
 * server is full (see {@link PoolCheckout.take}), and fails at once, never hangs, on a pool
 * passed in that its owner ended (see {@link PoolCheckout.connect}). One per `SharedPool`
 * (pool.ts), listening to the pool's 'release' and 'remove' events until {@link PoolCheckout.detach}.
 *
 * Every statement passes here, so a checkout costs what `pool.query` pays for its own: one
 * callback to pg-pool, and on a pool passed in one entry in {@link #pending}. Watching for the
 * owner's `end()` is per pool (its events, and a timer only while calls queue in pg-pool).
 */
export class PoolCheckout {
  readonly #pool: PostgresPool;
  /** The pool when it is pg's own `pg.Pool`, which takes a callback (as `pool.query` uses it) rather than making a promise per checkout. */
  readonly #pgPool: pg.Pool | undefined;
  readonly #owned: boolean;
  /** Called once when the owner of a pool passed in ends it (the pool closes its LISTEN connection). */
  readonly #onEnded: () => void;
  /** The owner of a pool passed in ended it: every checkout fails at once. */
  #ended = false;
  /**
   * Checkouts of a pool passed in that pg-pool has not answered yet. pg-pool keeps the calls
   * queued for a client forever once its owner called `end()`: {@link #poolEnded} fails them.
   */
  readonly #pending = new Set<ClientCallback>();
  /** Calls waiting for a connection of the pool while the server is full (see {@link #takeWhenFull}), first come first. */
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
  /** Looks at `pool.ending` while checkouts of a pool passed in queue in pg-pool (see {@link #watchQueue}). */
  #endingTimer: ReturnType<typeof setInterval> | undefined;
  /**
   * A `pool.connect()` threw at once (a port out of range, from `PGPORT`): pg-pool counts the
   * client it was opening for good, so the pool's `end()` would wait for it forever.
   */
  #phantomClient = false;

  constructor(pool: PostgresPool, owned: boolean, onEnded: () => void) {
    this.#pool = pool;
    this.#pgPool = pool instanceof pg.Pool ? pool : undefined;
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
    clearInterval(this.#endingTimer);
    this.#endingTimer = undefined;
  }

  /** {@link take} as a promise (transactions). */
  checkout(): Promise<PostgresPoolClient> {
    return new Promise((resolve, reject) => this.take((error, client) => (error === undefined ? resolve(client!) : reject(error))));
  }

  /**
   * Hands `done` a client of the pool, the one place every statement and transaction gets
   * theirs. The server refusing a new connection because it is full (53300
   * too_many_connections: `max_connections`, or the role's or database's `CONNECTION LIMIT`)
   * does not fail the call: it waits for one of the pool's connections, as if the pool's `max`
   * were what the server granted, or for another process to free room (the pool's probe; see
   * {@link #waitForRoom}), up to {@link #serverFullWait}, and then fails with `E_UNAVAILABLE`.
   */
  take(done: ClientCallback): void {
    // While calls wait for a connection of the pool, a new call takes its turn behind them.
    if (this.#roomWaiters.length > 0) return this.#takeWhenFull(undefined, done);
    this.#connect((error, client) => {
      if (error !== undefined && sqlState(error) === TOO_MANY_CONNECTIONS) this.#takeWhenFull(error, done);
      else done(error, client);
    });
  }

  /** {@link take} once the server refused a connection (`refusal`), or while others wait for room. */
  #takeWhenFull(refusal: unknown, done: ClientCallback): void {
    this.#checkoutWhenFull(refusal).then(
      (client) => done(undefined, client),
      (error: unknown) => done(error),
    );
  }

  /** Waits for its turn (see {@link #waitForRoom}) and asks again, until a client or the deadline; `refusal`: the server's last 53300. */
  async #checkoutWhenFull(refusal: unknown): Promise<PostgresPoolClient> {
    const patience = this.#serverFullWait();
    const deadline = Date.now() + patience;
    while (true) {
      const left = deadline - Date.now();
      if (left <= 0 && refusal !== undefined) throw serverFullError(refusal, patience);
      await this.#waitForRoom(Math.max(0, left), refusal !== undefined);
      try {
        const client = await this.connect();
        // Nobody waits any more: the next time the server is full starts with short probes.
        if (this.#roomWaiters.length === 0) this.#probeAttempt = 0;
        return client;
      } catch (error) {
        if (sqlState(error) !== TOO_MANY_CONNECTIONS) throw error;
        refusal = error;
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
    return new Promise((resolve, reject) => this.#connect((error, client) => (error === undefined ? resolve(client!) : reject(error))));
  }

  /** {@link connect} in pg-pool's callback form, as `pool.query` uses it; `done` is a new function per call. */
  #connect(done: ClientCallback): void {
    if (this.#ended || this.#isEnding()) return done(poolEndedError());
    // pg-pool keeps calls that wait for a client queued forever once end() was called: on a
    // pool passed in, the call stays in #pending until pg-pool answers, and #poolEnded fails it first.
    const watched = !this.#owned;
    if (watched) this.#pending.add(done);
    const answered = (error: unknown, client?: PostgresPoolClient) => {
      if (watched && !this.#pending.delete(done)) client?.release();
      else if (error) done(error);
      else done(undefined, client);
    };
    try {
      if (this.#pgPool) this.#pgPool.connect(answered);
      // A pool like pg's (a wrapper that counts or traces statements) may only have the promise form.
      else this.#pool.connect().then((client) => answered(undefined, client), answered);
    } catch (error) {
      this.#phantomClient = true;
      if (watched) this.#pending.delete(done);
      return done(error);
    }
    if (watched && this.#pending.has(done)) this.#watchQueue();
  }

  /** Whether the owner of a pool passed in called its `end()` (pg-pool sets `ending` at once). */
  #isEnding(): boolean {
    if (this.#owned || (this.#pool as { ending?: unknown }).ending !== true) return false;
    this.#poolEnded();
    return true;
  }

  /**
   * A checkout of a pool passed in is waiting for pg-pool. pg-pool says nothing when its owner
   * calls `end()` while holding every client (no 'release' or 'remove' until they come back),
   * and keeps the calls queued for one for good. While a call may wait for a release so (the
   * pool at its `max`, fewer idle clients than calls queued), one unref'd timer per pool looks
   * at `pool.ending`, so they fail with E_UNAVAILABLE without waiting for the owner; it stops
   * once no checkout is pending. (A call an idle client serves needs none: `end()` removes the
   * idle client, and the 'remove' event fails the call. A pool without pg-pool's counts is
   * always watched.)
   */
  #watchQueue(): void {
    if (this.#endingTimer !== undefined || this.#ended) return;
    const pool = this.#pool as { idleCount?: number; totalCount?: number; waitingCount?: number; options?: { max?: number } };
    const full = !((pool.totalCount ?? 0) < (pool.options?.max ?? 0));
    const short = !((pool.idleCount ?? 0) >= (pool.waitingCount ?? 1));
    if (!full || !short) return;
    this.#endingTimer = setInterval(() => {
      if (this.#isEnding() || this.#pending.size > 0) return;
      clearInterval(this.#endingTimer);
      this.#endingTimer = undefined;
    }, ENDING_CHECK_INTERVAL);
    this.#endingTimer.unref();
  }

  #poolEnded(): void {
    if (this.#ended) return;
    this.#ended = true;
    clearInterval(this.#endingTimer);
    this.#endingTimer = undefined;
    // The checkouts still waiting for pg-pool fail now (a client it hands them later goes
    // straight back), and none waits after this.
    const pending = [...this.#pending];
    this.#pending.clear();
    for (const done of pending) done(poolEndedError());
    // Their next attempt fails at once with the pool ended.
    for (const wake of [...this.#roomWaiters]) wake();
    this.#onEnded();
  }
}

const POOL_EVENTS = ['release', 'remove'] as const;
/** How often a pool passed in is looked at for its owner's `end()` while checkouts queue (see `#watchQueue`). */
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
