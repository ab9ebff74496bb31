import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import { StowageError, describeType } from '@stowage/core';
import { sqlState, toStowageError } from './errors.js';

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

/** `pg.Pool` settings for a pool stowage creates (passed through to `new pg.Pool`). */
export interface PostgresPoolOptions {
  /** Most connections open at once (pg default 10). */
  max?: number;
  min?: number;
  idleTimeoutMillis?: number;
  connectionTimeoutMillis?: number;
  /** Server-side limit per statement, in ms (sets `statement_timeout` on each connection). */
  statement_timeout?: number;
  /** Client-side limit per query, in ms. */
  query_timeout?: number;
  ssl?: unknown;
  allowExitOnIdle?: boolean;
  maxLifetimeSeconds?: number;
  [option: string]: unknown;
}

/**
 * Where the connections come from. Give a URL (`url` or `connectionString`), the individual
 * fields, or a pool of your own (`pool` / `existingPool`), which stowage never ends.
 */
export interface PostgresConnectionOptions {
  /** `postgresql://user:password@host:port/database` */
  url?: string;
  /** Same as `url` (seed 002 spelling). */
  connectionString?: string;
  host?: string;
  port?: number;
  database?: string;
  user?: string;
  password?: string;
  /** A `pg.Pool` to use (never ended by stowage), or settings for the pool stowage creates. */
  pool?: PostgresPool | PostgresPoolOptions;
  /** A `pg.Pool` to use; never ended by stowage. */
  existingPool?: PostgresPool;
  /** `application_name` of the connections stowage opens (default `"stowage"`). */
  applicationName?: string;
  /**
   * Run statements as named prepared statements, parsed and planned once per connection
   * (default true). Turn off behind a pooler that swaps server sessions under a client
   * without tracking prepared statements (PgBouncer < 1.21 in transaction mode); stowage also
   * adapts by itself when the server reports such a mix-up (see `PreparedStatementMode`).
   */
  preparedStatements?: boolean;
}

export const DEFAULT_APPLICATION_NAME = 'stowage';

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

function isPool(value: unknown): value is PostgresPool {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as PostgresPool).query === 'function' &&
    typeof (value as PostgresPool).connect === 'function'
  );
}

/**
 * One pool and whether stowage owns it. Every store object created by one factory call shares
 * one `PostgresConnection`; `end()` ends the pool only when stowage created it.
 */
export class PostgresConnection {
  readonly pool: PostgresPool;
  readonly ownsPool: boolean;
  #prepared: PreparedStatementMode;
  readonly #statementNames = new Map<string, string>();
  /** Per-client name suffixes (`per-client` mode), and how many clients got one. */
  readonly #clientSuffixes = new WeakMap<object, string>();
  #namingClients = 0;
  #ending: Promise<void> | undefined;

  constructor(pool: PostgresPool, ownsPool: boolean, preparedStatements = true) {
    this.pool = pool;
    this.ownsPool = ownsPool;
    this.#prepared = preparedStatements ? 'shared' : 'off';
  }

  /** Builds the connection described by `options`; throws `E_INVALID_OPTION` for bad settings. */
  static from(options: PostgresConnectionOptions | string): PostgresConnection {
    if (typeof options === 'string') options = { url: options };
    if (options === null || typeof options !== 'object') {
      throw new StowageError('E_INVALID_OPTION', `options must be a URL or an object, got ${describeType(options)}`);
    }
    const prepare = options.preparedStatements ?? true;
    if (typeof prepare !== 'boolean') {
      throw new StowageError('E_INVALID_OPTION', `preparedStatements must be a boolean, got ${describeType(prepare)}`);
    }
    const given = options.existingPool ?? (isPool(options.pool) ? options.pool : undefined);
    if (options.existingPool !== undefined && !isPool(options.existingPool)) {
      throw new StowageError('E_INVALID_OPTION', 'existingPool must be a pg.Pool');
    }
    if (given) return new PostgresConnection(given, false, prepare);

    const poolOptions = options.pool ?? {};
    if (typeof poolOptions !== 'object' || poolOptions === null) {
      throw new StowageError('E_INVALID_OPTION', 'pool must be a pg.Pool or an object of pool settings');
    }
    const connectionString = options.url ?? options.connectionString;
    if (connectionString !== undefined && (typeof connectionString !== 'string' || connectionString === '')) {
      throw new StowageError('E_INVALID_OPTION', 'url must be a non-empty string');
    }
    const hasFields = ['host', 'port', 'database', 'user', 'password'].some(
      (field) => options[field as keyof PostgresConnectionOptions] !== undefined,
    );
    if (connectionString === undefined && !hasFields) {
      throw new StowageError(
        'E_INVALID_OPTION',
        'no database given: pass url/connectionString, host/port/database/user/password, or a pg.Pool',
      );
    }
    const applicationName = options.applicationName ?? DEFAULT_APPLICATION_NAME;
    const pool = new pg.Pool({
      application_name: applicationName,
      // Our own PostgresPoolOptions mirrors pg's settings loosely; pg validates them.
      ...(poolOptions as PostgresPoolOptions),
      ...(connectionString !== undefined ? { connectionString } : {}),
      ...pick(options, ['host', 'port', 'database', 'user', 'password']),
    } as pg.PoolConfig);
    // An idle client that loses its server (restart, failover) emits 'error' on the pool;
    // without a listener Node would crash. The next query gets a fresh client.
    pool.on('error', () => undefined);
    return new PostgresConnection(pool as unknown as PostgresPool, true, prepare);
  }

  /**
   * Runs one statement (one round trip), turning driver errors into `StowageError`s. A statement
   * with parameters runs as a named prepared statement, so the server parses and plans it once
   * per connection instead of on every call (see {@link PreparedStatementMode}).
   */
  async query(text: string, values?: unknown[]): Promise<PostgresQueryResult> {
    const name = values === undefined || this.#prepared === 'off' ? undefined : this.#statementName(text);
    const mode = name === undefined ? 'off' : this.#prepared;
    try {
      if (mode === 'off') return await this.pool.query(text, values);
      if (mode === 'shared') return await this.pool.query({ name, text, values });
      return await this.#queryWithClientName(name!, text, values);
    } catch (error) {
      const state = sqlState(error);
      if (mode !== 'off' && (state === DUPLICATE_PREPARED_STATEMENT || state === UNKNOWN_PREPARED_STATEMENT)) {
        // The statement did not run (Parse or Bind failed), so it is safe to run it again.
        this.#prepared = mode === 'shared' && state === DUPLICATE_PREPARED_STATEMENT ? 'per-client' : 'off';
        return this.query(text, values);
      }
      throw toStowageError(error);
    }
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

  /** Runs the statement under a name only this pg client uses (see `per-client`). */
  async #queryWithClientName(name: string, text: string, values: unknown[] | undefined): Promise<PostgresQueryResult> {
    const client = await this.pool.connect();
    let suffix = this.#clientSuffixes.get(client);
    if (suffix === undefined && this.#namingClients < MAX_NAMING_CLIENTS) {
      this.#namingClients++;
      suffix = `${PROCESS_TAG}${++clientSerial}`;
      this.#clientSuffixes.set(client, suffix);
    }
    const statement = suffix === undefined ? { text, values } : { name: `${name}_${suffix}`, text, values };
    // As pool.query does: while the client is checked out, an error its connection raises
    // outside the query (a reset socket) fails the call instead of crashing the process, and a
    // client that failed is not reused.
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

  /** Ends the pool if stowage created it; a pool passed in is left open. */
  end(): Promise<void> {
    this.#ending ??= this.ownsPool ? this.pool.end().catch(() => undefined) : Promise.resolve();
    return this.#ending;
  }
}

function pick<T extends object, K extends keyof T>(source: T, keys: K[]): Partial<Pick<T, K>> {
  const result: Partial<Pick<T, K>> = {};
  for (const key of keys) if (source[key] !== undefined) result[key] = source[key];
  return result;
}

/**
 * The configuration to open one extra connection like the pool's (for LISTEN), or `undefined`
 * when the pool does not expose one.
 */
export function clientConfigOf(pool: PostgresPool): pg.ClientConfig | undefined {
  const options = pool.options;
  return options && typeof options === 'object' ? (options as pg.ClientConfig) : undefined;
}
