import { StowageError, describeType } from '@stowage/core';
import { MongoClient, type Db, type MongoClientOptions } from 'mongodb';

/** Where a store finds its database. Give one of `url`/`connectionString`, `client`/`existingClient` or `existingDb`. */
export interface MongoConnectionOptions {
  /** A MongoDB connection string (`mongodb://…` or `mongodb+srv://…`); stowage opens and closes its own client. */
  url?: string;
  /** Alias of `url` (the name seed 000 uses). */
  connectionString?: string;
  /**
   * The database. Default: the one named in the connection string (or the client's default),
   * else `test`, the driver's default. Must match `existingDb` when both are given.
   */
  database?: string;
  /** A `MongoClient` you own; stowage uses it and never closes it. */
  client?: MongoClient;
  /** Alias of `client` (the name seed 000 uses). */
  existingClient?: MongoClient;
  /** A `Db` you own; stowage uses it (and its client) and never closes them. */
  existingDb?: Db;
  /** Options for the client stowage creates from `url` (pool size, timeouts, TLS…). `directConnection` is never forced. */
  clientOptions?: MongoClientOptions;
}

/** The client and database one store (or a family of stores made together) works with. */
export class MongoConnection {
  readonly client: MongoClient;
  readonly db: Db;
  /** True when stowage created the client and so closes it. */
  readonly ownsClient: boolean;
  #closing: Promise<void> | undefined;

  constructor(client: MongoClient, db: Db, ownsClient: boolean) {
    this.client = client;
    this.db = db;
    this.ownsClient = ownsClient;
  }

  /** Closes the client if stowage created it; a client or Db passed in is left open. */
  close(): Promise<void> {
    this.#closing ??= this.ownsClient ? this.client.close() : Promise.resolve();
    return this.#closing;
  }
}

/** Opens (without connecting yet: the driver connects on first use) the connection the options describe. */
export function openConnection(options: MongoConnectionOptions): MongoConnection {
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `options must be an object, got ${describeType(options)}`);
  }
  const database = options.database;
  if (database !== undefined) assertValidDatabaseName(database);

  if (options.existingDb !== undefined) {
    const db = options.existingDb;
    if (db === null || typeof db !== 'object' || typeof db.collection !== 'function' || typeof db.databaseName !== 'string') {
      throw new StowageError('E_INVALID_OPTION', 'existingDb must be a Db from the mongodb driver');
    }
    if (database !== undefined && database !== db.databaseName) {
      throw new StowageError('E_INVALID_OPTION', `database "${database}" does not match existingDb "${db.databaseName}"`);
    }
    return new MongoConnection(db.client, db, false);
  }

  const client = options.client ?? options.existingClient;
  if (client !== undefined) {
    if (client === null || typeof client !== 'object' || typeof client.db !== 'function') {
      throw new StowageError('E_INVALID_OPTION', 'client must be a MongoClient from the mongodb driver');
    }
    return new MongoConnection(client, client.db(database), false);
  }

  const url = options.url ?? options.connectionString;
  if (typeof url !== 'string' || !/^mongodb(\+srv)?:\/\//.test(url)) {
    throw new StowageError(
      'E_INVALID_OPTION',
      'give a MongoDB connection string as url (or connectionString), a client (existingClient) or an existingDb',
    );
  }
  const clientOptions = options.clientOptions ?? {};
  if (clientOptions === null || typeof clientOptions !== 'object') {
    throw new StowageError('E_INVALID_OPTION', 'clientOptions must be an object');
  }
  let owned: MongoClient;
  try {
    owned = new MongoClient(url, clientOptions);
  } catch (error) {
    throw new StowageError('E_INVALID_OPTION', `invalid MongoDB connection string or client options: ${(error as Error).message}`, {
      cause: error,
    });
  }
  return new MongoConnection(owned, owned.db(database), true);
}

const FORBIDDEN_IN_DATABASE_NAMES = /[/\\. "$*<>:|?]/;

/** MongoDB's rules for database names (the stricter Windows set, so a name works everywhere). */
export function assertValidDatabaseName(name: unknown): asserts name is string {
  if (
    typeof name !== 'string' ||
    name.length === 0 ||
    Buffer.byteLength(name) > 63 ||
    FORBIDDEN_IN_DATABASE_NAMES.test(name) ||
    name.includes('\u0000')
  ) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `database must be a name of 1 to 63 bytes without / \\ . " $ * < > : | ? spaces or NUL, got ${typeof name === 'string' ? JSON.stringify(name) : describeType(name)}`,
    );
  }
}

/** MongoDB's rules for collection names: no `$`, no NUL, not `system.*`, and short enough for a namespace. */
export function assertValidCollectionName(name: unknown, what = 'collection'): asserts name is string {
  if (
    typeof name !== 'string' ||
    name.length === 0 ||
    Buffer.byteLength(name) > 120 ||
    name.includes('$') ||
    name.includes('\u0000') ||
    name.startsWith('system.') ||
    name.startsWith('.') ||
    name.endsWith('.')
  ) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `${what} must be a collection name of 1 to 120 bytes without "$" or NUL, not starting with "system.", got ${typeof name === 'string' ? JSON.stringify(name) : describeType(name)}`,
    );
  }
}
