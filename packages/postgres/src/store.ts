import { Lifecycle, StowageError, assertValidDuration, type Capabilities } from '@stowage/core';
import { PostgresConnection, type PostgresConnectionOptions, type PostgresQueryResult } from './connection.js';
import { TableName, ensureSchema, storeDdl, type TableKind } from './schema.js';

/** Options every Postgres store takes, besides where to connect. */
export interface PostgresStoreOptions extends PostgresConnectionOptions {
  /** Schema of the table (created if missing). Default: the connection's `search_path`. */
  schema?: string;
  /** Table name (letters, digits, `_`; quoted in SQL). Each store has its own default. */
  table?: string;
  /** Create the table and indexes on first use (default true). Off: run `schemaSql()` yourself. */
  autoCreate?: boolean;
  /** Same as `autoCreate` (seed 003 spelling). */
  autoCreateTable?: boolean;
  /** Delete expired rows every this many ms in the background (timer never keeps the process alive). */
  cleanupInterval?: number;
}

/** What a store is built on: its connection, table and whether to create it. */
export interface StoreSetup {
  connection: PostgresConnection;
  /** Close the connection with the store (false when the connection is shared or passed in). */
  ownsConnection: boolean;
  tables: ReadonlyArray<readonly [TableKind, TableName]>;
  autoCreate: boolean;
}

/** Reads the shared options of a store whose main table is of `kind`. */
export function storeSetup(
  kind: TableKind,
  options: PostgresStoreOptions | string,
  defaultTable: string,
  table?: string,
): StoreSetup {
  if (typeof options === 'string') options = { url: options };
  if (options === null || typeof options !== 'object') {
    throw new StowageError('E_INVALID_OPTION', 'options must be a URL or an object');
  }
  const name = new TableName(table ?? options.table ?? defaultTable, options.schema);
  const connection = PostgresConnection.from(options);
  return { connection, ownsConnection: true, tables: [[kind, name]], autoCreate: autoCreateOption(options) };
}

export function autoCreateOption(options: PostgresStoreOptions): boolean {
  const value = options.autoCreate ?? options.autoCreateTable ?? true;
  if (typeof value !== 'boolean') throw new StowageError('E_INVALID_OPTION', 'autoCreate must be a boolean');
  return value;
}

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

/**
 * What every Postgres store shares: the connection, the once-per-instance schema readiness,
 * close semantics and the background cleanup timer. Each operation is `run(sql, values)`:
 * one statement, one round trip, after the schema promise (created once) has settled.
 */
export abstract class PostgresStoreBase {
  protected readonly connection: PostgresConnection;
  protected readonly lifecycle: Lifecycle;
  readonly #setup: StoreSetup;
  #ready: Promise<void> | undefined;
  #schemaIsReady = false;
  #cleanupTimer: ReturnType<typeof setInterval> | undefined;

  protected constructor(what: string, setup: StoreSetup) {
    this.lifecycle = new Lifecycle(what);
    this.connection = setup.connection;
    this.#setup = setup;
  }

  get capabilities(): Capabilities {
    return POSTGRES_CAPABILITIES;
  }

  /** The DDL this store runs on first use (or that you run yourself with `autoCreate: false`). */
  schemaSql(): string {
    return storeDdl(this.#setup.tables).map((statement) => `${statement};\n`).join('\n');
  }

  /**
   * Resolves once the tables exist: creates them on first call (every operation awaits it, so
   * calling it is optional; do so to fail fast at start-up). With `autoCreate: false` it
   * resolves at once and checks nothing.
   */
  ready(): Promise<void> {
    return this.schemaReady();
  }

  /** The once-per-instance schema promise every operation awaits (reset after a failure). */
  protected schemaReady(): Promise<void> {
    try {
      this.lifecycle.assertOpen();
    } catch (error) {
      return Promise.reject(error);
    }
    if (!this.#ready) {
      const ready = this.prepare();
      this.#ready = ready;
      ready.then(
        () => void (this.#schemaIsReady = true),
        () => {
          if (this.#ready === ready) this.#ready = undefined; // retried by the next call
        },
      );
    }
    return this.#ready;
  }

  /** Creates the tables; subclasses add their own start-up work. */
  protected prepare(): Promise<void> {
    return this.#setup.autoCreate ? ensureSchema(this.connection, storeDdl(this.#setup.tables)) : Promise.resolve();
  }

  /** One statement, one round trip. Rejects with `E_CLOSED` after `close()`. */
  protected run(text: string, values?: unknown[]): Promise<PostgresQueryResult> {
    // Once the schema is there the statement goes out at once, without waiting a turn of the
    // microtask queue for the settled schema promise.
    if (this.#schemaIsReady && !this.lifecycle.isClosed) return this.connection.query(text, values);
    return this.schemaReady().then(() => this.connection.query(text, values));
  }

  protected assertOpen(): void {
    this.lifecycle.assertOpen();
  }

  /** Starts the background `clearExpired()` loop when `cleanupInterval` is set. */
  protected startCleanup(interval: number | undefined, clearExpired: () => Promise<number>): void {
    if (interval === undefined) return;
    assertValidDuration(interval, 'cleanupInterval');
    this.#cleanupTimer = setInterval(() => {
      if (!this.lifecycle.isClosed) clearExpired().catch(() => undefined);
    }, interval);
    this.#cleanupTimer.unref();
  }

  /** Idempotent; ends the pool only if this store created it. */
  close(): Promise<void> {
    return this.lifecycle.close(async () => {
      if (this.#cleanupTimer !== undefined) clearInterval(this.#cleanupTimer);
      await this.releaseResources();
      await this.#ready?.catch(() => undefined);
      if (this.#setup.ownsConnection) await this.connection.end();
    });
  }

  /** Subclasses free their own resources (listening connections) here. */
  protected async releaseResources(): Promise<void> {}
}

/** Interval SQL for `$n` milliseconds of server time; NULL stays NULL (no expiry). */
export function msInterval(param: string): string {
  return `(${param}::bigint * interval '1 millisecond')`;
}

/** `WHERE` fragment: a row is visible while it has not expired (server clock). */
export const LIVE = '(expires_at IS NULL OR expires_at > now())';

/**
 * SQL for a timestamptz as epoch milliseconds (a float8). Reading times this way keeps them
 * exact and independent of the timestamp type parsers a pool passed in may have installed.
 */
export function epochMs(column: string): string {
  return `(extract(epoch from ${column}) * 1000)::float8`;
}

/** A `Date` from an {@link epochMs} column; `null` stays `null`. */
export function dateFromMs(value: number | string | null): Date | null {
  return value === null ? null : new Date(Number(value));
}

/** SQL for epoch milliseconds (parameter) as a timestamptz. */
export function timestampFromMs(param: string): string {
  return `(timestamptz 'epoch' + ${param}::float8 * interval '1 millisecond')`;
}
