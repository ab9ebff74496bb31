import { createHash, randomBytes } from 'node:crypto';
import { StowageError } from '@stowage/core';
import pg from 'pg';
import { driverError, sqlState } from './errors.js';
import type { ConnectionSource } from './options.js';
import { Sweepers, type SweepJob, type SweepRegistration } from './sweeper.js';
import { Listener, type ReleaseWakeups } from './wakeups.js';

/**
 * The slice of a `pg.Pool` stowage uses. Any `pg.Pool` fits; the interface is structural so
 * the published types do not depend on `@types/pg`.
 */
export interface PostgresPool {
  query(statement: string | PostgresStatement, values?: unknown[]): Promise<PostgresQueryResult>;
  connect(): Promise<PostgresPoolClient>;
  end(): Promise<void>;
  /** `pg.Pool` keeps its configuration here; stowage reads it to open its LISTEN connection. */
  readonly options?: object;
}

/** A statement as `pg` takes it; `name` makes it a prepared statement. */
export interface PostgresStatement {
  text: string;
  values?: unknown[];
  name?: string;
}

export interface PostgresPoolClient {
  query(statement: string | PostgresStatement, values?: unknown[]): Promise<PostgresQueryResult>;
  release(error?: Error | boolean): void;
  on(event: 'error', listener: (error: Error) => void): unknown;
  removeListener(event: 'error', listener: (error: Error) => void): unknown;
}

export interface PostgresQueryResult {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- row shapes are per statement
  rows: any[];
  rowCount: number | null;
}

/**
 * How statements with parameters are sent:
 * - `shared`: named after their text, the same name on every connection (the default);
 * - `per-client`: named after their text and the pg client, when the server answers a Parse
 *   with "already exists" (42P05): several clients share one server session, as with PGlite's
 *   socket server, so a name one client prepared is there for the others, unknown to their pg;
 * - `off`: unnamed, parsed and planned on every call: `preparedStatements: false`, or the server
 *   did not know a statement the client had prepared (26000: a pooler swapped the session).
 */
type PreparedStatementMode = 'shared' | 'per-client' | 'off';

/** Texts of statements that always go out unnamed (see {@link plannedEachCall}). */
const plannedEachCallTexts = new Set<string>();

/**
 * Marks a statement's text as one to send unnamed, so the server plans it for each call's
 * parameters and never switches to a generic plan: for statements whose best plan depends on
 * them (a key range that holds a few rows or nearly the whole table). Returns the text.
 */
export function plannedEachCall(text: string): string {
  plannedEachCallTexts.add(text);
  return text;
}

const DUPLICATE_PREPARED_STATEMENT = '42P05';
const UNKNOWN_PREPARED_STATEMENT = '26000';
/** Stores send a fixed set of texts; this bounds the cache should that ever change. */
const MAX_PREPARED_STATEMENTS = 500;
/**
 * In `per-client` mode, clients beyond this many run unnamed: prepared statements live as long
 * as the shared session, not the client, so the count of names must stay bounded.
 */
const MAX_NAMING_CLIENTS = 64;
/** Keeps per-client names of different processes on one shared session apart. */
const PROCESS_TAG = randomBytes(4).toString('hex');
let clientSerial = 0;

/**
 * One `pg.Pool` and what stowage knows about it, shared by every store of the process on it:
 * the stores created from the same connection settings (URL, fields, pool settings,
 * `applicationName`) use one pool stowage creates, and the stores given the same `pg.Pool` use
 * that one. Each also has at most one LISTEN connection ({@link Listener}) for all of them.
 *
 * The pool is counted by its users: a pool stowage created ends when the last store using it
 * closes; a pool passed in is never ended. The pool lives in a private field: `pg.Pool` keeps
 * the connection string (password included) in a property that `util.inspect` would print.
 */
class SharedPool {
  readonly #pool: PostgresPool;
  readonly #owned: boolean;
  readonly #registryKey: string | undefined;
  #prepared: PreparedStatementMode = 'shared';
  readonly #statementNames = new Map<string, string>();
  /** Per-client name suffixes (`per-client` mode), and how many clients got one. */
  readonly #clientSuffixes = new WeakMap<object, string>();
  #namingClients = 0;
  #users = 0;
  #listener: Listener | undefined;
  /** Settings of the LISTEN connection (`listenUrl`), or the pool's own when absent. */
  readonly #listenConfig: object | undefined;
  /** Aborts when the owner of a pool passed in ends it: calls waiting for a client then fail at once. */
  readonly #ended = new AbortController();
  /** Calls waiting for a connection of the pool while the server is full (see {@link #checkout}), first come first. */
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
  #ending: Promise<void> | undefined;
  /** Checkouts of a pool passed in that are waiting for pg-pool (see {@link #watchEnding}). */
  #pendingCheckouts = 0;
  #endingTimer: ReturnType<typeof setInterval> | undefined;
  /**
   * A `pool.connect()` threw at once (a port out of range, from `PGPORT`): pg-pool counts the
   * client it was opening for good, so the pool's `end()` would wait for it forever.
   */
  #phantomClient = false;
  /** The background sweepers of the tables the pool's stores use: one per table, however many stores. */
  readonly sweepers = new Sweepers();

  constructor(pool: PostgresPool, owned: boolean, registryKey: string | undefined, listenConfig: object | undefined) {
    this.#pool = pool;
    this.#owned = owned;
    this.#registryKey = registryKey;
    this.#listenConfig = listenConfig;
    // A client let go gives a call waiting while the server is full its turn. pg.Pool has no
    // 'end' event; once the owner of a pool passed in called end(), every client it lets go is
    // 'release'd and 'remove'd with `ending` set.
    for (const event of POOL_EVENTS) events(pool)?.on?.(event, this.#onPoolEvent);
  }

  get pool(): PostgresPool {
    return this.#pool;
  }

  /** Whether `listenConfig` (of another store on this pool) is the LISTEN connection this one has. */
  listensLike(listenConfig: object | undefined): boolean {
    return (listenConfig === undefined ? undefined : settingsDigest(listenConfig as Record<string, unknown>)) ===
      (this.#listenConfig === undefined ? undefined : settingsDigest(this.#listenConfig as Record<string, unknown>));
  }

  /** The one LISTEN connection of the pool, opened on first need. */
  get listener(): Listener {
    // Its probe's client: a pool ended by its owner fails it at once. It does not wait for room
    // on a full server (as #checkout does) while its own LISTEN connection holds a slot there.
    this.#listener ??= new Listener(() => this.#connect(), this.#listenConfig ?? this.#pool.options);
    return this.#listener;
  }

  addUser(): void {
    this.#users++;
  }

  /** The last user gone: closes the listener and ends the pool if stowage created it. */
  removeUser(): Promise<void> {
    if (--this.#users > 0) return Promise.resolve();
    if (this.#registryKey !== undefined && ownedPools.get(this.#registryKey) === this) ownedPools.delete(this.#registryKey);
    if (!this.#owned && givenPools.get(this.#pool) === this) givenPools.delete(this.#pool);
    for (const event of POOL_EVENTS) events(this.#pool)?.removeListener?.(event, this.#onPoolEvent);
    this.#ending ??= (async () => {
      await this.#listener?.close();
      if (!this.#owned) return;
      const ended = this.#pool.end().catch(() => undefined);
      // A pool with a phantom client never ends; it holds no connection to wait for either.
      if (!this.#phantomClient) await ended;
    })();
    return this.#ending;
  }

  /** Runs one statement; retries once unnamed or with client names when the session says so. */
  async query(text: string, values: unknown[] | undefined, prepare: boolean): Promise<PostgresQueryResult> {
    const name = values === undefined || !prepare || this.#prepared === 'off' || plannedEachCallTexts.has(text) ? undefined : this.#statementName(text);
    const mode = name === undefined ? 'off' : this.#prepared;
    try {
      const client = await this.#checkout();
      if (mode === 'off') return await runOn(client, { text, values });
      if (mode === 'shared') return await runOn(client, { name, text, values });
      return await runOn(client, this.#clientStatement(client, name!, text, values));
    } catch (error) {
      const state = sqlState(error);
      if (mode !== 'off' && (state === DUPLICATE_PREPARED_STATEMENT || state === UNKNOWN_PREPARED_STATEMENT)) {
        // The statement did not run (Parse or Bind failed), so it is safe to run it again.
        if (this.#prepared === mode) this.#prepared = mode === 'shared' && state === DUPLICATE_PREPARED_STATEMENT ? 'per-client' : 'off';
        return this.query(text, values, prepare);
      }
      throw driverError(error);
    }
  }

  /**
   * Runs `fn` with one client of the pool to itself (a transaction), and releases it; a client
   * whose connection failed (an 'error' event, or `fn` reporting it broken) is not reused.
   */
  async withClient<T>(fn: (client: PostgresPoolClient, broken: (error: Error) => void) => Promise<T>): Promise<T> {
    let client: PostgresPoolClient;
    try {
      client = await this.#checkout();
    } catch (error) {
      throw driverError(error);
    }
    let failure: Error | undefined;
    const broken = (error: Error) => (failure ??= error);
    client.on('error', broken);
    try {
      return await fn(client, broken);
    } finally {
      client.removeListener('error', broken);
      client.release(failure);
    }
  }

  /**
   * A client of the pool, the one place every statement and transaction gets theirs. The server
   * refusing a new connection because it is full (53300 too_many_connections: `max_connections`,
   * or the role's or database's `CONNECTION LIMIT`) does not fail the call: it waits for one of
   * the pool's connections, as if the pool's `max` were what the server granted, or for another
   * process to free room (the pool's probe; see {@link #waitForRoom}), up to
   * {@link #serverFullWait}, and then fails with `E_UNAVAILABLE`.
   */
  async #checkout(): Promise<PostgresPoolClient> {
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
        const client = await this.#connect();
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

  /** One `pool.connect()`; a pool passed in that its owner ended fails at once, never hangs. */
  #connect(): Promise<PostgresPoolClient> {
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
    void this.#listener?.close();
  }

  /** A name derived from the text, so every connection and process uses the same one. */
  #statementName(text: string): string | undefined {
    let name = this.#statementNames.get(text);
    if (name === undefined && this.#statementNames.size < MAX_PREPARED_STATEMENTS) {
      name = `stowage_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
      this.#statementNames.set(text, name);
    }
    return name;
  }

  /** The statement under a name only this pg client uses (see `per-client`). */
  #clientStatement(client: object, name: string, text: string, values: unknown[] | undefined): PostgresStatement {
    let suffix = this.#clientSuffixes.get(client);
    if (suffix === undefined && this.#namingClients < MAX_NAMING_CLIENTS) {
      this.#namingClients++;
      suffix = `${PROCESS_TAG}${++clientSerial}`;
      this.#clientSuffixes.set(client, suffix);
    }
    return suffix === undefined ? { text, values } : { name: `${name}_${suffix}`, text, values };
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

/**
 * One statement on a checked-out client, released afterwards. As `pool.query` does: while the
 * client is checked out, an error its connection raises outside the query (a reset socket)
 * fails the call instead of crashing the process, and a client that failed is not reused.
 */
function runOn(client: PostgresPoolClient, statement: PostgresStatement): Promise<PostgresQueryResult> {
  return new Promise<PostgresQueryResult>((resolve, reject) => {
    let settled = false;
    const settle = (error: Error | undefined, result?: PostgresQueryResult) => {
      if (settled) return;
      settled = true;
      client.removeListener('error', settle);
      client.release(error);
      if (error) reject(error);
      else resolve(result!);
    };
    client.on('error', settle);
    client.query(statement).then(
      (result) => settle(undefined, result),
      (error: unknown) => settle(error instanceof Error ? error : new Error(String(error))),
    );
  });
}

/** Pools stowage created, by a digest of their settings (never the settings themselves: they hold the password). */
const ownedPools = new Map<string, SharedPool>();
/** What stowage keeps about the pools passed in. */
const givenPools = new WeakMap<PostgresPool, SharedPool>();

/** The shared pool for `source`: the one already open for the same settings or pool, or a new one. */
function sharedPoolFor(source: ConnectionSource): SharedPool {
  if ('pool' in source) {
    let shared = givenPools.get(source.pool);
    if (!shared) givenPools.set(source.pool, (shared = new SharedPool(source.pool, false, undefined, source.listen)));
    else if (!shared.listensLike(source.listen)) {
      throw new StowageError('E_INVALID_OPTION', 'listenUrl: the stores on one pool share one LISTEN connection; give them the same listenUrl');
    }
    return shared;
  }
  const key = settingsDigest({ pool: source.config, listen: source.listen ?? null });
  let shared = ownedPools.get(key);
  if (!shared) {
    const pool = new pg.Pool(source.config as pg.PoolConfig);
    // An idle client that loses its server (restart, failover) emits 'error' on the pool;
    // without a listener Node would crash. The next query gets a fresh client.
    pool.on('error', () => undefined);
    ownedPools.set(key, (shared = new SharedPool(pool as unknown as PostgresPool, true, key, source.listen)));
  }
  return shared;
}

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
   * (see {@link PreparedStatementMode}). Driver errors pass unchanged: the store maps them.
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

/** Identities of values that have no text form (functions, class instances) in {@link settingsDigest}. */
const identities = new WeakMap<object, number>();
let nextIdentity = 0;

/**
 * A digest of pool settings: equal for settings that would open the same pool. Plain objects
 * compare by content, whatever their key order; functions and other objects by identity.
 */
function settingsDigest(config: Record<string, unknown>): string {
  const text = JSON.stringify(config, (_key, value: unknown) => {
    if (typeof value === 'function' || (typeof value === 'object' && value !== null && !isPlain(value))) {
      if (ArrayBuffer.isView(value)) return `bytes:${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex')}`;
      let id = identities.get(value);
      if (id === undefined) identities.set(value, (id = ++nextIdentity));
      return `object:${id}`;
    }
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      return Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return typeof value === 'bigint' ? `bigint:${value}` : value;
  });
  return createHash('sha256').update(text).digest('hex');
}

function isPlain(value: object): boolean {
  const prototype = Object.getPrototypeOf(value);
  return Array.isArray(value) || prototype === Object.prototype || prototype === null;
}
