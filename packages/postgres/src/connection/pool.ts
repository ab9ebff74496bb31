import { createHash } from 'node:crypto';
import { StowageError } from '@stowage/core';
import pg from 'pg';
import { driverError } from '../errors.js';
import { Sweepers } from '@stowage/core/adapter';
import { Listener } from '../wakeups.js';
import { PoolCheckout } from './checkout.js';
import { PreparedStatements } from './prepared-statements.js';
import type { ConnectionSource, PostgresPool, PostgresPoolClient, PostgresQueryResult } from './types.js';

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
export class SharedPool {
  readonly #pool: PostgresPool;
  readonly #owned: boolean;
  readonly #registryKey: string | undefined;
  /** How statements are sent on the pool (named, per client, unnamed). */
  readonly #statements = new PreparedStatements();
  /** Where statements and transactions get their clients (see checkout.ts). */
  readonly #clients: PoolCheckout;
  /** `PoolCheckout.take`, bound once: every statement hands it to {@link PreparedStatements.query}. */
  readonly #take: PoolCheckout['take'];
  #users = 0;
  #listener: Listener | undefined;
  /** Settings of the LISTEN connection (`listenUrl`), or the pool's own when absent. */
  readonly #listenConfig: object | undefined;
  #ending: Promise<void> | undefined;
  /** The background sweepers of the tables the pool's stores use: one per table, however many stores. */
  readonly sweepers = new Sweepers();

  constructor(pool: PostgresPool, owned: boolean, registryKey: string | undefined, listenConfig: object | undefined) {
    this.#pool = pool;
    this.#owned = owned;
    this.#registryKey = registryKey;
    this.#listenConfig = listenConfig;
    // The owner of a pool passed in ended it: its LISTEN connection goes too.
    this.#clients = new PoolCheckout(pool, owned, () => void this.#listener?.close());
    this.#take = (done) => this.#clients.take(done);
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
    // on a full server (as `checkout` does) while its own LISTEN connection holds a slot there.
    this.#listener ??= new Listener(() => this.#clients.connect(), this.#listenConfig ?? this.#pool.options);
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
    this.#clients.detach();
    this.#ending ??= (async () => {
      await this.#listener?.close();
      if (!this.#owned) return;
      const ended = this.#pool.end().catch(() => undefined);
      // A pool with a phantom client never ends; it holds no connection to wait for either.
      if (!this.#clients.phantomClient) await ended;
    })();
    return this.#ending;
  }

  /** Runs one statement; retries once unnamed or with client names when the session says so (see prepared-statements.ts). */
  query(text: string, values: unknown[] | undefined, prepare: boolean): Promise<PostgresQueryResult> {
    return this.#statements.query(this.#take, text, values, prepare);
  }

  /**
   * Runs `fn` with one client of the pool to itself (a transaction), and releases it; a client
   * whose connection failed (an 'error' event, or `fn` reporting it broken) is not reused.
   */
  async withClient<T>(fn: (client: PostgresPoolClient, broken: (error: Error) => void) => Promise<T>): Promise<T> {
    let client: PostgresPoolClient;
    try {
      client = await this.#clients.checkout();
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
}

/** Pools stowage created, by a digest of their settings (never the settings themselves: they hold the password). */
const ownedPools = new Map<string, SharedPool>();
/** What stowage keeps about the pools passed in. */
const givenPools = new WeakMap<PostgresPool, SharedPool>();

/** The shared pool for `source`: the one already open for the same settings or pool, or a new one. */
export function sharedPoolFor(source: ConnectionSource): SharedPool {
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
