import { StowageError } from '@stowage/core';
import { booleanOption, cleanupIntervalOf, describeType, describeValue, utf8ByteLength, type StoreIdentity } from '@stowage/core/adapter';
import type { ConnectionSource, PostgresPool } from './connection/types.js';
import { DEFAULT_TABLE_NAMES, TableName, type TableKind } from './schema/names.js';

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
  /** Same as `url` (the spelling of awaitly's Postgres persistence). */
  connectionString?: string;
  host?: string;
  port?: number;
  database?: string;
  user?: string;
  password?: string;
  /** A `pg.Pool` to use (never ended by stowage), or settings for the pool stowage creates. */
  pool?: PostgresPool | PostgresPoolOptions;
  /** A `pg.Pool` to use; never ended by stowage. Same as `pool: aPgPool`. */
  existingPool?: PostgresPool;
  /** `application_name` of the connections stowage opens (default `"stowage"`; at most 63 bytes). */
  applicationName?: string;
  /**
   * Where the one LISTEN connection goes, when `url` (or the pool) is a pooler such as
   * PgBouncer in transaction mode, through which LISTEN cannot work: a URL of the PostgreSQL
   * server itself. Default: the pool's own settings (wake-ups are then off behind a pooler).
   */
  listenUrl?: string;
  /**
   * Run statements as named prepared statements, parsed and planned once per connection
   * (default true). Turn off behind a pooler that swaps server sessions under a client
   * without tracking prepared statements (PgBouncer < 1.21 in transaction mode); stowage also
   * adapts by itself when the server reports such a mix-up.
   */
  preparedStatements?: boolean;
  /**
   * Past saturation, fail fast instead of queueing: when this many calls already wait for a
   * connection of the pool (all of its connections busy), a new call of this store fails at
   * once with `E_UNAVAILABLE` (retryable) instead of joining the queue. Default: no bound, as
   * `pg.Pool`. A bound keeps the latency of the calls let in near the pool's service time when
   * more arrive than the database can serve (they would otherwise all wait seconds), at the
   * price of refusing the excess: set it where a caller can retry, shed or degrade (an HTTP
   * 503 with Retry-After), and leave it off where every call must go through eventually.
   */
  maxWaiting?: number;
}

/** Options every Postgres store takes, besides where to connect. */
export interface PostgresStoreOptions extends PostgresConnectionOptions {
  /** Schema of the tables (created if missing). Default: the connection's `search_path`. */
  schema?: string;
  /** Table name (letters, digits, `_`; quoted in SQL). Each store has its own default. */
  table?: string;
  /** Same as `table` (the spelling of awaitly's Postgres persistence). */
  tableName?: string;
  /** Create the tables and indexes on first use (default true). Off: run `schemaSql()` yourself. */
  autoCreate?: boolean;
  /** Same as `autoCreate` (the spelling of awaitly's Postgres snapshot store). */
  autoCreateTable?: boolean;
  /**
   * Ms between runs of the background sweeper, which deletes expired rows in batches (default
   * one minute; `false` or `0`: off, call `clearExpired()`
   * yourself). One sweeper per table, however many stores use it; its timer never keeps the
   * process alive and stops with the last store's `close()`.
   */
  cleanupInterval?: number | false;
}

export const DEFAULT_APPLICATION_NAME = 'stowage';

/** PostgreSQL keeps `application_name` in a 64-byte name, terminator included. */
const MAX_APPLICATION_NAME_BYTES = 63;

/** A store's options after {@link postgresSettings}: validated, aliases resolved. */
export interface PostgresSettings {
  readonly connection: ConnectionSource;
  readonly autoCreate: boolean;
  /** Ms between background sweeps; `undefined`: no sweeper (`cleanupInterval: false` or `0`). */
  readonly cleanupInterval: number | undefined;
  /** The store's own table: the `table` option (or `tableName`), else the default of `kind`. */
  mainTable(kind: TableKind): TableName;
  /** Another table of the store, named by an option of its own (`lock.lockTableName`, `itemsTable`). */
  table(kind: TableKind, name: unknown): TableName;
}

/**
 * The one reader of Postgres options, used by every store and factory: a URL string or an
 * options object, the awaitly spellings (`connectionString`, `existingPool`, `tableName`,
 * `autoCreateTable`) as aliases, every setting checked (`E_INVALID_OPTION`) before anything
 * is opened. Returns the options in object form and what the store is built on.
 */
export function postgresSettings<T extends PostgresStoreOptions>(options: T | string): { options: T; settings: PostgresSettings } {
  const given = (typeof options === 'string' ? { url: options } : options) as T;
  if (given === null || typeof given !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `options must be a URL or an object, got ${describeType(given)}`);
  }
  const schema = given.schema;
  const mainTable = alias(given, 'table', 'tableName');
  const autoCreate = booleanOption(alias(given, 'autoCreate', 'autoCreateTable'), 'autoCreate', true);
  const cleanupInterval = cleanupIntervalOf(given.cleanupInterval);
  // TableName checks the names (E_INVALID_OPTION unless plain identifiers).
  const table = (kind: TableKind, name: unknown) => new TableName((name ?? DEFAULT_TABLE_NAMES[kind]) as string, schema);
  const settings: PostgresSettings = {
    connection: connectionSource(given),
    autoCreate,
    cleanupInterval,
    mainTable: (kind) => table(kind, mainTable),
    table,
  };
  return { options: given, settings };
}

/** What a store tells the kit about itself: its name in errors and, for telemetry, the database and its main table. */
export function storeIdentity(name: string, table: TableName, settings: PostgresSettings): StoreIdentity {
  return { name, system: 'postgresql', collection: table.qualifiedName, ...serverOf(settings.connection) };
}

/**
 * The database and server the settings name, for telemetry (`db.namespace`, `server.address`,
 * `server.port`): from the URL, which `pg` lets win over the fields, else the fields; a pool
 * passed in, from its options. What the settings leave to `pg`'s defaults or the environment
 * (`PGHOST`…) is left out rather than guessed. Never the user or the password.
 */
function serverOf(source: ConnectionSource): Pick<StoreIdentity, 'namespace' | 'server'> {
  const config = ('pool' in source ? (source.pool as { options?: Record<string, unknown> }).options : source.config) ?? {};
  const url = typeof config.connectionString === 'string' ? parseUrl(config.connectionString, 'postgresql://localhost') : null;
  const text = (value: unknown) => (typeof value === 'string' && value !== '' ? value : undefined);
  const database = text(url && decodeURIComponent(url.pathname.slice(1))) ?? text(config.database);
  const host = text(url?.hostname) ?? text(config.host);
  const port = Number(text(url?.port) ?? config.port);
  return {
    ...(database !== undefined && { namespace: database }),
    ...(host !== undefined && { server: { address: host, ...(Number.isInteger(port) && { port }) } }),
  };
}

function connectionSource(options: PostgresConnectionOptions): ConnectionSource {
  const preparedStatements = booleanOption(options.preparedStatements, 'preparedStatements', true);
  const maxWaiting = options.maxWaiting;
  if (maxWaiting !== undefined && !(Number.isSafeInteger(maxWaiting) && maxWaiting >= 0)) {
    throw new StowageError('E_INVALID_OPTION', `maxWaiting must be a whole number of calls (0 or more), got ${describeValue(maxWaiting)}`);
  }
  const pool = alias(options, 'pool', 'existingPool');
  if (options.existingPool !== undefined && !isPool(options.existingPool)) {
    throw new StowageError('E_INVALID_OPTION', 'existingPool must be a pg.Pool');
  }
  const applicationName = options.applicationName ?? DEFAULT_APPLICATION_NAME;
  assertApplicationName(applicationName);
  const listenUrl = options.listenUrl;
  if (listenUrl !== undefined && (typeof listenUrl !== 'string' || listenUrl === '')) {
    throw new StowageError('E_INVALID_OPTION', 'listenUrl must be a non-empty string');
  }
  const listen = listenUrl === undefined ? {} : { listen: checkedConfig({ connectionString: listenUrl, application_name: applicationName }, 'listenUrl') };
  const shared = { preparedStatements, ...(maxWaiting === undefined ? {} : { maxWaiting }), ...listen };
  if (isPool(pool)) return { pool, ...shared };

  if (pool !== undefined && (pool === null || typeof pool !== 'object')) {
    throw new StowageError('E_INVALID_OPTION', 'pool must be a pg.Pool or an object of pool settings');
  }
  const url = alias(options, 'url', 'connectionString');
  if (url !== undefined && (typeof url !== 'string' || url === '')) {
    throw new StowageError('E_INVALID_OPTION', 'url must be a non-empty string');
  }
  const fields = Object.fromEntries(
    (['host', 'port', 'database', 'user', 'password'] as const).filter((field) => options[field] !== undefined).map((field) => [field, options[field]]),
  );
  if (url === undefined && Object.keys(fields).length === 0) {
    throw new StowageError('E_INVALID_OPTION', 'no database given: pass url/connectionString, host/port/database/user/password, or a pg.Pool');
  }
  // pg validates its other pool settings; those that reach the startup packet or the socket are checked here.
  const config = checkedConfig({ application_name: applicationName, ...pool, ...(url === undefined ? {} : { connectionString: url }), ...fields }, 'url');
  return { config, ...shared };
}

/**
 * The settings pg sends in the startup packet, each as a NUL-terminated string (`pg.Client`'s
 * `getStartupConf`): a U+0000 inside one would end it there and make the rest server settings
 * of their own (`x\u0000default_transaction_read_only\u0000on`). Numeric ones (timeouts) are
 * sent as pg formats them.
 */
const STARTUP_PARAMETERS = ['user', 'database', 'application_name', 'fallback_application_name', 'options', 'replication'] as const;

/**
 * Throws `E_INVALID_OPTION` unless pg opens the connections `config` describes (settings for
 * `new pg.Pool` or `pg.Client`) as they are meant; returns `config`. The one check of the
 * pool's settings and of the LISTEN connection's (`listenUrl`). pg reads the URL
 * (`connectionString`) over the other settings, so both are checked: the URL is one pg can
 * read, no value of the startup packet holds U+0000 (from a field, a pool setting or the URL),
 * every port is one a socket can connect to (pg would throw at connect time, and pg-pool then
 * never ends), and the application name that wins fits in the server's 63 bytes.
 */
function checkedConfig(config: Record<string, unknown>, what: string): Record<string, unknown> {
  const url = typeof config.connectionString === 'string' && config.connectionString !== '' ? config.connectionString : undefined;
  const fromUrl = url === undefined ? {} : urlSettings(url, what);
  for (const key of STARTUP_PARAMETERS) {
    const value = config[key];
    if (value !== undefined && value !== null && String(value).includes('\u0000')) {
      throw new StowageError('E_INVALID_OPTION', `the connection setting ${key} contains U+0000, which would end it early in the startup packet`);
    }
  }
  assertPort(config.port, 'port');
  assertPort(fromUrl.port, `the port of ${what}`);
  // As pg picks it: the URL's parameter over the setting; the fallback when the name is empty.
  const name = (fromUrl.application_name ?? config.application_name) || (fromUrl.fallback_application_name ?? config.fallback_application_name);
  if (typeof name === 'string' && utf8ByteLength(name) > MAX_APPLICATION_NAME_BYTES) {
    throw new StowageError('E_INVALID_OPTION', `the application name of the connections (applicationName, or application_name of the pool settings or ${what}) is longer than ${MAX_APPLICATION_NAME_BYTES} UTF-8 bytes`);
  }
  return config;
}

/**
 * What pg reads from a connection URL besides where to connect: its query parameters (any
 * pg setting: `application_name`, `options`, …) and its port, found as pg-connection-string
 * (pg's parser) finds them. `E_INVALID_OPTION` for a URL it cannot read, and for U+0000
 * anywhere in the URL, raw or as `%00`: no part of a connection URL can hold one, and the
 * user, database and parameters would carry it into the startup packet. The message never
 * quotes the URL (it may hold a password).
 */
function urlSettings(url: string, what: string): Record<string, string> {
  if (url.includes('\u0000') || url.includes('%00')) {
    throw new StowageError('E_INVALID_OPTION', `${what} contains U+0000 (or %00), which would end a value of the startup packet early`);
  }
  // pg's form for a socket directory and a database: `/var/run/postgresql mydb`.
  if (url.startsWith('/')) return {};
  const invalid = (why: string) => new StowageError('E_INVALID_OPTION', `${what} is not a connection URL pg can read (${why})`);
  // As pg-connection-string reads it: stray spaces and `%` encoded first, and a URL without a
  // host (`postgresql://user@/db`) read with a placeholder one.
  const text = / |%[^a-f0-9]|%[a-f0-9][^a-f0-9]/i.test(url) ? encodeURI(url).replace(/%25(\d\d)/g, '%$1') : url;
  const parsed = parseUrl(text, 'postgres://base') ?? parseUrl(text.replace('@/', '@___DUMMY___/'), 'postgres://base');
  if (parsed === null) throw invalid('malformed, or a port outside 1..65535');
  // pg reads anything as a URL: `localhost:5432/test` has the scheme `localhost:` and connects to
  // the default host as the default user (then reported as refused credentials), and a misspelt
  // `postgress://` is taken silently. Only PostgreSQL's schemes (and pg's `socket:`) are URLs here.
  if (!POSTGRES_SCHEMES.has(parsed.protocol) || (parsed.protocol !== 'socket:' && !/^[a-z]+:\/\//i.test(text))) {
    throw invalid('it must start with postgresql:// or postgres://');
  }
  try {
    // pg decodes these when it connects, and throws on a malformed %-escape.
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
    decodeURI(parsed.pathname);
  } catch {
    throw invalid('a malformed %-escape');
  }
  return { ...Object.fromEntries(parsed.searchParams), port: parsed.searchParams.get('port') || parsed.port };
}

const POSTGRES_SCHEMES: ReadonlySet<string> = new Set(['postgresql:', 'postgres:', 'socket:']);

/** `URL.parse(text, base)`, which Node.js has only from 22.1: `null` for what `new URL` refuses. */
function parseUrl(text: string, base: string): URL | null {
  try {
    return new URL(text, base);
  } catch {
    return null;
  }
}

/** Throws `E_INVALID_OPTION` unless `value` (a setting, or the text of a URL) is absent or a TCP port: an integer from 1 to 65535. */
function assertPort(value: unknown, what: string): void {
  if (value === undefined || value === null || value === '') return;
  const port = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65_535) {
    throw new StowageError('E_INVALID_OPTION', `${what} must be an integer from 1 to 65535, got ${describeValue(value)}`);
  }
}

/**
 * Throws `E_INVALID_OPTION` unless `name` can be an `application_name`: a string without
 * U+0000, of at most 63 UTF-8 bytes (the server would cut a longer one short, so two
 * names that differ only at the end would look the same in `pg_stat_activity`).
 */
function assertApplicationName(name: unknown): asserts name is string {
  if (typeof name !== 'string') throw new StowageError('E_INVALID_OPTION', `applicationName must be a string, got ${describeType(name)}`);
  if (name.includes('\u0000')) throw new StowageError('E_INVALID_OPTION', 'applicationName contains U+0000');
  if (utf8ByteLength(name) > MAX_APPLICATION_NAME_BYTES) {
    throw new StowageError('E_INVALID_OPTION', `applicationName is longer than ${MAX_APPLICATION_NAME_BYTES} UTF-8 bytes`);
  }
}

/** The value of an option that has two spellings; `E_INVALID_OPTION` when both are given and differ. */
function alias<T extends object, A extends keyof T, B extends keyof T>(options: T, name: A, other: B): T[A] | T[B] {
  const value = options[name];
  const otherValue = options[other];
  if (value !== undefined && otherValue !== undefined && (value as unknown) !== otherValue) {
    throw new StowageError('E_INVALID_OPTION', `${String(name)} and ${String(other)} are the same option: give one`);
  }
  return value ?? otherValue;
}

/**
 * A `pg.Pool` (or a pool like it: `query` and `connect`) rather than options or pool settings:
 * how `pool`/`existingPool`, `connect(pool)` and `goGoScopePersistence(pool)` tell the two apart.
 */
export function isPool(value: unknown): value is PostgresPool {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as PostgresPool).query === 'function' &&
    typeof (value as PostgresPool).connect === 'function'
  );
}
