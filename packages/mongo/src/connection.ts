import { StowageError } from '@stowage/core';
import { MongoClient, type Db, type MongoClientOptions } from 'mongodb';
import type { MongoSettings } from './options.js';
import { assertValidDatabaseName } from './schema.js';

/** The client and database a store works with. */
export class MongoConnection {
  readonly client: MongoClient;
  readonly db: Db;
  /** True when stowage created the client and so closes it. */
  readonly ownsClient: boolean;
  readonly #release: () => Promise<void>;
  #closing: Promise<void> | undefined;

  constructor(client: MongoClient, db: Db, release?: () => Promise<void>) {
    this.client = client;
    this.db = db;
    this.ownsClient = release !== undefined;
    this.#release = release ?? (() => Promise.resolve());
  }

  /** Connects the client (a no-op while it is connected): see {@link connectClient}. */
  connect(): Promise<void> {
    return connectClient(this.client);
  }

  /** Lets go of a client stowage created (closed with its last store); a client or Db passed in is left open. */
  close(): Promise<void> {
    this.#closing ??= this.#release();
    return this.#closing;
  }
}

/** Connects in progress, per client: stores that share a client and start together wait for one. */
const connecting = new WeakMap<MongoClient, Promise<void>>();

/**
 * Connects `client` explicitly, at every start-up attempt of a store (`MongoClient.connect()` is
 * a no-op while the client is connected). The driver's own connect on first use is not enough:
 * when it fails (the server is down), drivers 6 and 7 leave the client's topology closed for
 * good, and every later operation fails with MongoTopologyClosedError, also once the server is
 * back; an explicit `connect()` opens a new topology. So a store, and any store sharing its
 * client, recovers by itself once the server is reachable. A client its owner closed is not
 * opened again (the driver's internal `hasBeenClosed`; drivers without it reopen a closed client
 * on its next operation anyway): its operations fail (MongoNotConnectedError, `E_UNAVAILABLE`).
 */
function connectClient(client: MongoClient): Promise<void> {
  if ((client as unknown as { s?: { hasBeenClosed?: unknown } }).s?.hasBeenClosed === true) return Promise.resolve();
  let pending = connecting.get(client);
  if (pending === undefined) {
    pending = client.connect().then(() => undefined);
    connecting.set(client, pending);
    const done = () => void connecting.delete(client);
    pending.then(done, done);
  }
  return pending;
}

/**
 * The clients stowage created, by connection string and client options, with how many stores
 * use each: stores created from one URL share one client and its pool, as every Postgres store
 * of a URL shares one pool (each client has its own monitoring sockets and a pool of up to
 * `maxPoolSize` connections, so six stores used to hold six of each).
 */
const sharedClients = new Map<string, { client: MongoClient; stores: number }>();

/** The connection the settings describe (a store connects it at start-up: see {@link connectClient}). */
export function openConnection({ source, database }: Pick<MongoSettings, 'source' | 'database'>): MongoConnection {
  if ('db' in source) return new MongoConnection(source.db.client, source.db);
  if ('client' in source) return new MongoConnection(source.client, source.client.db(databaseName(source.client, database)));
  const key = sharingKey(source.url, source.clientOptions);
  const shared = key === undefined ? undefined : sharedClients.get(key);
  const client = shared?.client ?? newClient(source.url, source.clientOptions);
  const db = client.db(databaseName(client, database)); // before the client is shared: a bad name leaves nothing open
  const entry = shared ?? { client, stores: 0 };
  if (key !== undefined && shared === undefined) sharedClients.set(key, entry);
  entry.stores++;
  const release = async () => {
    if (--entry.stores > 0) return;
    if (key !== undefined && sharedClients.get(key) === entry) sharedClients.delete(key);
    await entry.client.close();
  };
  return new MongoConnection(client, db, release);
}

/**
 * The `database` option, else the client's default database (the path of the connection
 * string, or `clientOptions.dbName`), which is checked as the option is: the driver takes it
 * unchecked, and the server would refuse a name such as `a$b` only at the first command.
 */
function databaseName(client: MongoClient, database: string | undefined): string {
  if (database !== undefined) return database; // checked by parseStoreOptions
  const name = (client.options as { dbName?: unknown } | undefined)?.dbName ?? 'test';
  assertValidDatabaseName(name, 'the database named in the connection string (or clientOptions.dbName)');
  return name;
}

function newClient(url: string, options: MongoClientOptions): MongoClient {
  try {
    return new MongoClient(url, options);
  } catch (error) {
    // Not kept as the cause: a parse error can carry the connection string, password included.
    const message = redactPassword(error instanceof Error ? error.message : String(error), url);
    throw new StowageError('E_INVALID_OPTION', `invalid MongoDB connection string or client options: ${message}`);
  }
}

/**
 * What identifies a client that stores may share: the URL and the client options, when those
 * are plain data. Options holding anything else (a function, a certificate `Buffer`, a class
 * instance) are not compared: such a store gets a client of its own.
 */
function sharingKey(url: string, options: MongoClientOptions): string | undefined {
  const plain = (value: unknown): unknown => {
    if (value === null || typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return value;
    if (Array.isArray(value)) return value.map(plain);
    const prototype: unknown = typeof value === 'object' ? Object.getPrototypeOf(value) : undefined;
    if (prototype !== Object.prototype && prototype !== null) throw new TypeError('not plain data');
    const entries = Object.entries(value as object).filter(([, v]) => v !== undefined);
    return Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => [k, plain(v)]));
  };
  try {
    return JSON.stringify([url, plain(options ?? {})]);
  } catch {
    return undefined;
  }
}

/** `text` without the password of `url` (as written and percent-decoded). */
export function redactPassword(text: string, url: string): string {
  const password = /^mongodb(?:\+srv)?:\/\/[^:@/]*:([^@/]*)@/.exec(url)?.[1];
  if (!password) return text;
  let decoded = password;
  try {
    decoded = decodeURIComponent(password);
  } catch {
    // a malformed escape: only the text as written can appear
  }
  return text.replaceAll(password, '***').replaceAll(decoded, '***');
}

/** A driver `Db` (duck-typed: a `Db` of another copy of the driver works too). */
export function isDb(value: unknown): value is Db {
  return typeof value === 'object' && value !== null && typeof (value as Db).collection === 'function' && typeof (value as Db).databaseName === 'string';
}

/** A driver `MongoClient` (duck-typed, as {@link isDb}). */
export function isClient(value: unknown): value is MongoClient {
  return typeof value === 'object' && value !== null && typeof (value as MongoClient).db === 'function' && typeof (value as MongoClient).connect === 'function';
}
