import { StowageError } from '@stowage/core';
import { assertOptionsObject, booleanOption, cleanupIntervalOf, describeType, type StoreIdentity } from '@stowage/core/adapter';
import type { Db, MongoClient, MongoClientOptions, WriteConcernSettings } from 'mongodb';
import type { MongoDialectOption } from './dialects/dialect.js';
import { DEFAULT_COLLECTIONS, assertValidCollectionName, assertValidDatabaseName, type MongoCollectionKind } from './schema.js';

/**
 * Where a store finds its database. Give one of `url` (alias `connectionString`), `client`
 * (alias `existingClient`) or `existingDb`; when several are given, `existingDb` wins over
 * `client`, which wins over `url`.
 */
export interface MongoConnectionOptions {
  /** A MongoDB connection string (`mongodb://…` or `mongodb+srv://…`); stowage opens and closes its own client. */
  url?: string;
  /** Same as `url` (the spelling of awaitly's Mongo persistence). */
  connectionString?: string;
  /**
   * The database. Default: the one named in the connection string (or the client's default),
   * else `test`, the driver's default. Must match `existingDb` when both are given.
   */
  database?: string;
  /** A `MongoClient` you own; stowage uses it and never closes it. */
  client?: MongoClient;
  /** Same as `client` (the spelling of awaitly's Mongo persistence). */
  existingClient?: MongoClient;
  /** A `Db` you own; stowage uses it (and its client) and never closes them. */
  existingDb?: Db;
  /** Options for the client stowage creates from `url` (pool size, timeouts, TLS…). `directConnection` is never forced. */
  clientOptions?: MongoClientOptions;
}

/** Options every Mongo store takes, besides where to connect. */
export interface MongoStoreOptions extends MongoConnectionOptions {
  /** The collection (each store has its own default, see `DEFAULT_COLLECTIONS`). */
  collection?: string;
  /** Create the collection and its indexes on first use, once per process (default `true`). */
  autoCreate?: boolean;
  /**
   * `auto` (default) detects whether the server runs update pipelines, `$expr` and `$$NOW`
   * (`pipeline`) or not (`classic`). Forcing a dialect skips the detection probes.
   */
  dialect?: MongoDialectOption;
  /**
   * Write concern of the store's writes. Default `{ w: 'majority' }` (a compare-and-set, a
   * lease, a claim or a counter that was acknowledged survives a failover); the cache's default
   * is the client's write concern.
   */
  writeConcern?: WriteConcernSettings;
  /**
   * Ms between runs of the store's background sweeper, which deletes what a retention option
   * (`snapshotRetention`, `historyRetention`) lets go, in batches (default
   * one minute; `false` or `0`: off, call `clearFinished()` or
   * `clearHistory()` yourself). Its timer never keeps the process alive and stops with the
   * store's `close()`. Expired documents need no sweeper: the TTL index removes them, or `clearExpired()`.
   */
  cleanupInterval?: number | false;
}

/** Where the client comes from. Held privately: a connection string may carry a password. */
export type ConnectionSource =
  | { url: string; clientOptions: MongoClientOptions }
  | { client: MongoClient }
  | { db: Db };

/** Every store's options, checked once. */
export interface MongoSettings {
  /** What the store tells the kit about itself: its name in errors and, for telemetry, the database and collection. */
  identity: StoreIdentity;
  source: ConnectionSource;
  database: string | undefined;
  collection: string;
  autoCreate: boolean;
  dialect: MongoDialectOption;
  /** `undefined`: the client's. */
  writeConcern: WriteConcernSettings | undefined;
  /** Ms between background sweeps; `undefined`: no sweeper (`cleanupInterval: false` or `0`). */
  cleanupInterval: number | undefined;
}

/** The write concern of every store's writes unless told otherwise (the cache: the client's). */
export const MAJORITY: WriteConcernSettings = Object.freeze({ w: 'majority' });

/** `writeConcern` as given, else `fallback`; `E_INVALID_OPTION` for anything but an object. */
export function writeConcernOption(writeConcern: unknown, fallback: WriteConcernSettings | undefined): WriteConcernSettings | undefined {
  if (writeConcern === undefined) return fallback;
  if (writeConcern === null || typeof writeConcern !== 'object') throw new StowageError('E_INVALID_OPTION', 'writeConcern must be an object');
  return writeConcern as WriteConcernSettings;
}

/**
 * The one reading of a store's options (every store, `mongo()`, `createMongoPersistence` and
 * the process backend): `E_INVALID_OPTION` for anything malformed, before anything connects.
 */
export function parseStoreOptions(options: unknown, kind: MongoCollectionKind, what: string): MongoSettings {
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `${what} options must be an object, got ${describeType(options)}`);
  }
  const given = options as MongoStoreOptions;
  const collection = given.collection ?? DEFAULT_COLLECTIONS[kind];
  assertValidCollectionName(collection);
  const dialect = given.dialect ?? 'auto';
  if (dialect !== 'auto' && dialect !== 'pipeline' && dialect !== 'classic') {
    throw new StowageError('E_INVALID_OPTION', 'dialect must be "auto", "pipeline" or "classic"');
  }
  const database = given.database;
  if (database !== undefined) assertValidDatabaseName(database);
  const source = connectionSource(given, database);
  return {
    identity: { name: what, system: 'mongodb', collection, ...serverOf(source, database) },
    source,
    database,
    collection,
    autoCreate: booleanOption(given.autoCreate, 'autoCreate', true),
    dialect,
    writeConcern: writeConcernOption(given.writeConcern, kind === 'cache' ? undefined : MAJORITY),
    cleanupInterval: cleanupIntervalOf(given.cleanupInterval),
  };
}

function connectionSource(options: MongoConnectionOptions, database: string | undefined): ConnectionSource {
  const db = options.existingDb;
  if (db !== undefined) {
    if (db === null || typeof db !== 'object' || typeof db.collection !== 'function' || typeof db.databaseName !== 'string') {
      throw new StowageError('E_INVALID_OPTION', 'existingDb must be a Db from the mongodb driver');
    }
    if (database !== undefined && database !== db.databaseName) {
      throw new StowageError('E_INVALID_OPTION', `database "${database}" does not match existingDb "${db.databaseName}"`);
    }
    return { db };
  }
  const client = options.client ?? options.existingClient;
  if (client !== undefined) {
    if (client === null || typeof client !== 'object' || typeof client.db !== 'function') {
      throw new StowageError('E_INVALID_OPTION', 'client must be a MongoClient from the mongodb driver');
    }
    return { client };
  }
  const url = options.url ?? options.connectionString;
  if (typeof url !== 'string' || !/^mongodb(\+srv)?:\/\//.test(url)) {
    throw new StowageError(
      'E_INVALID_OPTION',
      'give a MongoDB connection string as url (or connectionString), a client (existingClient) or an existingDb',
    );
  }
  const clientOptions = options.clientOptions ?? {};
  assertOptionsObject(clientOptions, 'clientOptions');
  return { url, clientOptions };
}

/**
 * The database and the (first) server the settings name, for telemetry (`db.namespace`,
 * `server.address`, `server.port`); never credentials. A database left to the driver's
 * default is left out rather than guessed.
 */
function serverOf(source: ConnectionSource, database: string | undefined): Pick<StoreIdentity, 'namespace' | 'server'> {
  let host: { host?: string; port?: number } | undefined;
  let named = database;
  if ('db' in source) named ??= source.db.databaseName;
  else if ('client' in source) {
    const options = source.client.options as { hosts?: { host?: string; port?: number }[]; dbName?: string } | undefined;
    host = options?.hosts?.[0];
    named ??= options?.dbName;
  } else {
    // mongodb://user:password@host1:27017,host2/database?options: the first host, and the path
    const match = /^mongodb(?:\+srv)?:\/\/(?:[^@/]*@)?([^,/?]+)(?:[^/?]*)(?:\/([^?]*))?/.exec(source.url);
    const [address, port] = (match?.[1] ?? '').split(/:(?=\d+$)/);
    if (address) host = { host: address, ...(port !== undefined && { port: Number(port) }) };
    named ??= match?.[2] ? decodeURIComponent(match[2]) : undefined;
  }
  return {
    ...(named !== undefined && named !== '' && { namespace: named }),
    ...(host?.host !== undefined && { server: { address: host.host, ...(host.port !== undefined && { port: host.port }) } }),
  };
}
