import { StowageError, type Capabilities } from '@stowage/core';
import type { StoreHandle } from '@stowage/core/adapter';
import { adoptTables, claimLegacySnapshots, snapshotIdColumn } from './adopt.js';
import { PostgresConnection } from './connection/store-connection.js';
import type { PostgresQueryResult, PostgresStatement } from './connection/types.js';
import { UNDEFINED_SCHEMA, UNDEFINED_TABLE, driverError, sqlState, toStowageError } from './errors.js';
import { postgresSettings, storeIdentity, type PostgresSettings, type PostgresStoreOptions } from './options.js';
import { storeDdl } from './schema/ddl.js';
import { ensureSchema, latestCreation, missingSequenceError, missingSequences } from './schema/ensure.js';
import type { TableKind, TableName } from './schema/names.js';
import type { SweepJob, SweepRegistration } from '@stowage/core/adapter';
import type { ReleaseWakeups } from './wakeups.js';

export const POSTGRES_CAPABILITIES: Capabilities = Object.freeze({
  serverClock: true,
  fencing: true,
  ttlIndex: false,
  changeFeed: false,
  wakeups: false,
  transactions: true,
  crossProcess: true,
  atomicUpdates: true,
});

/** The tables of one store, by kind. */
export type StoreTables = ReadonlyArray<readonly [TableKind, TableName]>;

/**
 * A transaction as a store's view runs statements in it: the caller's checked-out `pg` client
 * (a `PoolClient` or a `pg.Client`) between `BEGIN` and `COMMIT`, or the client of a
 * transaction the store began itself (`runOnce`, transactional process states).
 */
export interface TransactionClient {
  query(statement: PostgresStatement): Promise<PostgresQueryResult>;
}

/**
 * What a store uses of its database: a {@link PostgresDatabase}, or its view inside a
 * transaction. It is also the store's handle (the kit's `StoreHandle`): `StoreBase` takes its
 * capabilities, `ready()`, error mapping, `close()` and `transaction()` from it.
 */
export interface StoreDatabase extends StoreHandle {
  /** True for the view inside a transaction: nothing of the store's own connection is used. */
  readonly inTransaction: boolean;
  ready(): Promise<void>;
  run(text: string, values?: unknown[]): Promise<PostgresQueryResult>;
  schemaSql(): string;
  listen(channel: string): ReleaseWakeups;
  /** Adds `job` to the background sweeper of `table` (see {@link PostgresDatabase.sweep}). */
  sweep(table: TableName, job: SweepJob): void;
  /** The same tables inside `transaction` (see {@link TransactionClient}). */
  bind(transaction: object): StoreDatabase;
  /**
   * The options of the store's view inside `transaction` (`withTransaction`): the store's own
   * options and tables, on this database bound to the transaction, with nothing that needs a
   * connection of its own or a later statement (no coalescing, no LISTEN wake-ups, no cleanup
   * timer). `T`: the store's options type.
   */
  viewOptions<T>(transaction: object): T;
  /** Runs `fn` in a new transaction on a client of the store's pool (see {@link PostgresDatabase.transaction}). */
  transaction<T>(fn: (client: TransactionClient) => Promise<T>): Promise<T>;
  /** The id column of a snapshot table, once it is ready: `id`, or `snapshot_id` where adopted from awaitly-postgres. */
  snapshotIdColumn(table: TableName): Promise<string>;
  close(): Promise<void>;
}

/** Where a store's view inside a transaction finds its database (see {@link StoreDatabase.viewOptions}). */
const VIEW_DATABASE = Symbol('stowage.viewDatabase');

/**
 * The database of a store being constructed: the bound one when the store is a view inside a
 * transaction (built from {@link StoreDatabase.viewOptions}), else a new {@link PostgresDatabase}
 * that remembers `options` for the store's views. Nothing is opened yet (see PostgresDatabase).
 */
export function storeDatabase(options: object, settings: PostgresSettings, tables: StoreTables, extra?: { snapshotPrefix?: string }): StoreDatabase {
  return (options as { [VIEW_DATABASE]?: StoreDatabase })[VIEW_DATABASE] ?? new PostgresDatabase(settings, tables, { ...extra, options });
}

/**
 * What the constructor of a store on one table starts from: its options as given (checked,
 * see `postgresSettings`), its table of `kind`, its identity in errors and telemetry, and its
 * database (see {@link storeDatabase}), which is also its handle.
 */
export function resolveStore<T extends PostgresStoreOptions>(name: string, options: T | string, kind: TableKind) {
  const { options: given, settings } = postgresSettings(options);
  const table = settings.mainTable(kind);
  return { given, table, identity: storeIdentity(name, table, settings), db: storeDatabase(given, settings, [[kind, table]]) };
}

/**
 * The handle of a store whose waits LISTEN/NOTIFY wakes (the lock provider, the process
 * backend): `db`, but `ready()` also detects whether LISTEN works (opening the pool's LISTEN
 * connection), `capabilities` say `wakeups` and `changeFeed` once it was seen to work, and
 * `close()` runs `beforeClose` (the process backend's open feeds) before it closes `db`.
 */
export function listeningHandle(db: StoreDatabase, wakeups: ReleaseWakeups | undefined, beforeClose?: () => Promise<unknown>): StoreHandle {
  return {
    get capabilities(): Capabilities {
      const listening = wakeups?.supported ?? false;
      return { ...POSTGRES_CAPABILITIES, wakeups: listening, changeFeed: listening };
    },
    ready: async () => {
      await db.ready();
      await wakeups?.start();
    },
    toStowageError,
    close: async () => {
      await beforeClose?.();
      await db.close();
    },
    transaction: (fn) => db.transaction(fn),
  };
}

/** `pg`'s codes for a transaction the database asks to run again: serialization failure, deadlock. */
const RETRY_TRANSACTION = new Set(['40001', '40P01']);
/** How often a transaction the database asked to run again is tried in all. */
const TRANSACTION_ATTEMPTS = 3;

/** Throws `E_INVALID_OPTION` unless `transaction` can run statements: a pg client, not a pool. */
function assertTransactionClient(transaction: object): asserts transaction is TransactionClient {
  if (typeof (transaction as { query?: unknown }).query !== 'function') {
    throw new StowageError('E_INVALID_OPTION', 'withTransaction needs the pg client that holds the transaction (a PoolClient or pg.Client after BEGIN)');
  }
  // A pool would run each statement on whichever connection is free: outside the transaction.
  if ('totalCount' in transaction || 'idleCount' in transaction) {
    throw new StowageError('E_INVALID_OPTION', 'withTransaction needs the client checked out of the pool (const client = await pool.connect(); BEGIN …), not the pool');
  }
}

/**
 * Throws `E_INVALID_OPTION` when `client` says it is not in a transaction: a view's statement
 * there would commit on its own, and the caller's later `ROLLBACK` would undo nothing (a
 * forgotten `BEGIN`, or a client reused after its `COMMIT`). pg >= 8.21 reports the status the
 * server sent with its last answer (`getTransactionStatus()`, no round trip); a client that
 * cannot tell (older pg, pg-native) is trusted.
 */
function assertInTransaction(client: TransactionClient): void {
  const status = (client as { getTransactionStatus?: () => string | null }).getTransactionStatus?.();
  if (status === 'I') {
    throw new StowageError('E_INVALID_OPTION', 'withTransaction needs a client inside a transaction: this client has no open transaction (send BEGIN first; after COMMIT or ROLLBACK bind the view to the next transaction)');
  }
}

/**
 * A store's tables inside a transaction: statements go to the transaction's client, unnamed
 * (a pooler may give the transaction a session where a named statement of this pg client was
 * never prepared, and a failed statement would abort the caller's transaction). The tables are
 * created, where needed, before the first statement, outside the transaction.
 */
class TransactionDatabase implements StoreDatabase {
  readonly inTransaction = true;
  readonly capabilities = POSTGRES_CAPABILITIES;
  readonly #parent: PostgresDatabase;
  readonly #client: TransactionClient;

  constructor(parent: PostgresDatabase, client: TransactionClient) {
    this.#parent = parent;
    this.#client = client;
  }

  ready(): Promise<void> {
    return this.#parent.ready();
  }

  async run(text: string, values?: unknown[]): Promise<PostgresQueryResult> {
    await this.#parent.ready();
    assertInTransaction(this.#client);
    try {
      return await this.#client.query({ text, values });
    } catch (error) {
      throw driverError(error);
    }
  }

  schemaSql(): string {
    return this.#parent.schemaSql();
  }

  listen(): ReleaseWakeups {
    throw new StowageError('E_INVALID_OPTION', 'wake-ups need a connection of their own: they cannot live in a transaction');
  }

  /** A view inside a transaction sweeps nothing: its store's own database does. */
  sweep(): void {}

  bind(transaction: object): StoreDatabase {
    return this.#parent.bind(transaction);
  }

  viewOptions<T>(transaction: object): T {
    return this.#parent.viewOptions(transaction);
  }

  toStowageError(error: unknown): unknown {
    return toStowageError(error);
  }

  transaction(): Promise<never> {
    return Promise.reject(new StowageError('E_INVALID_OPTION', 'this store is already inside a transaction'));
  }

  snapshotIdColumn(table: TableName): Promise<string> {
    return this.#parent.snapshotIdColumn(table);
  }

  /** The view opened nothing: closing it closes nothing. */
  async close(): Promise<void> {}
}

/**
 * The Postgres side of one store, whatever its contract: its share of the connection (the
 * pool and the LISTEN connection, shared with the other stores on the same settings), the
 * store's tables and their once-per-pool creation, `run(sql, values)`, its jobs in the
 * tables' background sweepers, and `close`. Each store holds one (in a private field: it
 * reaches the pool, whose settings hold the password), passes it to the kit as its handle,
 * and adds only its statements.
 *
 * The share of the pool is taken on first need (a statement, a sweeper job, a listener), not
 * here: a store's constructor creates its database before its kit base checks the rest of its
 * options, and a store refused there leaves nothing open. The kit's `StoreBase` refuses calls
 * after `close()` and waits for the calls in flight before it calls {@link close}, so nothing
 * here checks state.
 */
export class PostgresDatabase implements StoreDatabase {
  readonly inTransaction = false;
  readonly capabilities = POSTGRES_CAPABILITIES;
  readonly #source: PostgresSettings['connection'];
  #opened: PostgresConnection | undefined;
  /** The options the store was created with: its views inside transactions are created from them. */
  readonly #options: object;
  readonly #tables: StoreTables;
  /** The DDL of `schemaSql()`, plain SQL. */
  readonly #ddl: string[];
  /** The same DDL as the store runs it: sequences only ever created together with their table. */
  readonly #creation: string[];
  readonly #autoCreate: boolean;
  readonly #cleanupInterval: number | undefined;
  readonly #snapshotPrefix: string;
  readonly #listeners: ReleaseWakeups[] = [];
  readonly #sweeps: SweepRegistration[] = [];
  #ready: Promise<void> | undefined;
  #schemaIsReady = false;

  /**
   * `options`: the store's options as given (see {@link viewOptions}). `snapshotPrefix`: the
   * prefix of a snapshot store, which takes its rows of an adopted awaitly-postgres snapshot
   * table at start-up (see `claimLegacySnapshots`).
   */
  constructor(settings: PostgresSettings, tables: StoreTables, { snapshotPrefix = '', options = {} }: { snapshotPrefix?: string; options?: object } = {}) {
    this.#source = settings.connection;
    this.#options = options;
    this.#tables = tables;
    this.#ddl = storeDdl(tables);
    this.#creation = storeDdl(tables, { creating: true });
    this.#autoCreate = settings.autoCreate;
    this.#cleanupInterval = settings.cleanupInterval;
    this.#snapshotPrefix = snapshotPrefix;
  }

  /** The store's share of the pool, taken on first need. */
  get #connection(): PostgresConnection {
    this.#opened ??= new PostgresConnection(this.#source);
    return this.#opened;
  }

  /** The DDL of the store's tables (what it runs on first use unless `autoCreate: false`). */
  schemaSql(): string {
    return this.#ddl.map((statement) => `${statement};\n`).join('\n');
  }

  /**
   * Resolves once the tables exist: on the first call, upgrades existing tables of
   * awaitly-postgres's layout in place and refuses unknown layouts (see adopt.ts), then creates
   * what is missing (in one round trip, safe when many processes start at once), and remembers
   * it; after a failure the next call tries again. With `autoCreate: false` it resolves at once
   * and checks nothing.
   */
  ready(): Promise<void> {
    if (!this.#ready) this.#create();
    return this.#ready!;
  }

  /**
   * One statement, one round trip, once the tables exist. Driver errors pass unchanged, but
   * for a missing table: with `autoCreate`, a table dropped under the live store is created
   * again (once, as the first time) and the statement retried once (it did not run: the server
   * refused it before executing it); without, the error says the table is missing. A sequence
   * dropped under its table is never created again (see `sequenceDdl`): `E_INVALID_OPTION`
   * naming it, from the creation or, without `autoCreate`, from a look at the catalog.
   */
  run(text: string, values?: unknown[]): Promise<PostgresQueryResult> {
    // Once the schema is there the statement goes out at once, without waiting a turn of the
    // microtask queue for the settled schema promise.
    const sentAfter = latestCreation();
    const running = this.#schemaIsReady ? this.#connection.query(text, values) : this.ready().then(() => this.#connection.query(text, values));
    return running.catch(async (error: unknown) => {
      if (!isMissingTable(error)) throw error;
      if (!this.#autoCreate) {
        const [sequence] = await missingSequences(this.#connection, this.#tables);
        if (sequence !== undefined) throw missingSequenceError(sequence, error);
        throw missingTableError(error, 'autoCreate is false: create the tables with schemaSql()');
      }
      return this.#create(sentAfter)
        .then(() => this.#connection.query(text, values))
        .catch((again: unknown) => {
          throw isMissingTable(again) ? missingTableError(again, 'it was created again and is still missing') : again;
        });
    });
  }

  bind(transaction: object): StoreDatabase {
    assertTransactionClient(transaction);
    return new TransactionDatabase(this, transaction);
  }

  viewOptions<T>(transaction: object): T {
    return { ...this.#options, coalesce: false, wakeups: false, cleanupInterval: undefined, [VIEW_DATABASE]: this.bind(transaction) } as T;
  }

  toStowageError(error: unknown): unknown {
    return toStowageError(error);
  }

  /**
   * Runs `fn` in a new transaction on a client of the pool: `BEGIN`, `fn`, `COMMIT`; on an error
   * `ROLLBACK` and the error. When the database asks for the transaction to be run again (a
   * serialization failure or deadlock, from any statement or the `COMMIT`) it is, up to
   * {@link TRANSACTION_ATTEMPTS} times in all: nothing of the failed attempt was committed.
   */
  async transaction<T>(fn: (client: TransactionClient) => Promise<T>): Promise<T> {
    await this.ready();
    return this.#connection.withClient(async (client, broken) => {
      const send = (command: string) => client.query(command).catch((error: unknown) => Promise.reject(driverError(error)));
      for (let attempt = 1; ; attempt++) {
        try {
          await send('BEGIN');
          const result = await fn(client);
          await send('COMMIT');
          return result;
        } catch (error) {
          // A client whose ROLLBACK fails is in an unknown state: the pool drops it.
          await client.query('ROLLBACK').catch((rollbackFailed: Error) => broken(rollbackFailed));
          if (attempt >= TRANSACTION_ATTEMPTS || !RETRY_TRANSACTION.has(sqlState(causeOf(error)) ?? '')) throw error;
        }
      }
    });
  }

  /** Wake-ups on `channel` through the pool's LISTEN connection (opened on first need), ended with the store. */
  listen(channel: string): ReleaseWakeups {
    const wakeups = this.#connection.listen(channel);
    this.#listeners.push(wakeups);
    return wakeups;
  }

  /**
   * Adds `job` to the one background sweeper of `table` on the store's pool, which runs it every
   * `cleanupInterval` ms (unless that is off) until the store closes: one sweeper per table
   * however many stores point at it, and jobs of the same key run once per sweep (see
   * sweeper.ts). `job.run` goes through the store's own calls, so `close()` waits for a run in
   * progress; failures wait for the next run.
   */
  sweep(table: TableName, job: SweepJob): void {
    if (this.#cleanupInterval === undefined) return;
    this.#sweeps.push(this.#connection.sweep(table.key, job, this.#cleanupInterval));
  }

  async snapshotIdColumn(table: TableName): Promise<string> {
    await this.ready();
    return snapshotIdColumn(this.#connection, table);
  }

  /** Leaves the sweepers, ends the store's wake-ups; gives its share of the pool back (see `PostgresConnection.end`). */
  async close(): Promise<void> {
    for (const registration of this.#sweeps) registration();
    await Promise.all(this.#listeners.map((listener) => listener.close()));
    await this.#ready?.catch(() => undefined);
    await this.#opened?.end();
  }

  /** Creates the tables (unless `autoCreate: false`); `newerThan`: see `ensureSchema`. */
  #create(newerThan?: number): Promise<void> {
    const ready = this.#autoCreate ? this.#createTables(newerThan) : Promise.resolve();
    this.#ready = ready;
    this.#schemaIsReady = false;
    ready.then(
      () => {
        if (this.#ready === ready) this.#schemaIsReady = true;
      },
      () => {
        if (this.#ready === ready) this.#ready = undefined;
      },
    );
    return ready;
  }

  /**
   * Adopts existing tables (first creation only: a table created again was dropped, not legacy),
   * creates the rest. The DDL names an adopted snapshot table's id column as the adoption left it.
   */
  async #createTables(newerThan: number | undefined): Promise<void> {
    const found = newerThan === undefined ? await adoptTables(this.#connection, this.#tables) : [];
    const adoptedSnapshots = new Set(this.#tables.filter(([kind], index) => kind === 'snapshots' && found[index]?.adopted).map(([, name]) => name.sql));
    const creation = adoptedSnapshots.size === 0 ? this.#creation : storeDdl(this.#tables, { creating: true, adoptedSnapshots });
    await ensureSchema(this.#connection, creation, this.#tables, newerThan);
    if (this.#snapshotPrefix === '') return;
    for (const [index, [kind, name]] of this.#tables.entries()) {
      if (kind === 'snapshots' && found[index]?.adopted) await claimLegacySnapshots(this.#connection, name, this.#snapshotPrefix);
    }
  }
}

function isMissingTable(error: unknown): boolean {
  const state = sqlState(error);
  return state === UNDEFINED_TABLE || state === UNDEFINED_SCHEMA;
}

function missingTableError(error: unknown, why: string): StowageError {
  const message = error instanceof Error ? error.message : String(error);
  return new StowageError('E_INVALID_OPTION', `a table of the store is missing (${message}): ${why}`, { cause: error });
}

/** The driver error behind a `StowageError` a store's view threw (its `cause`), or `error` itself. */
function causeOf(error: unknown): unknown {
  return error instanceof StowageError && error.cause !== undefined ? error.cause : error;
}
