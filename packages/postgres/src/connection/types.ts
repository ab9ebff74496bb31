/*
 * The shapes of a connection: the slice of `pg` stowage uses, and where a store's connections
 * come from. Types only, imported by every other part of the package (options, schema,
 * wake-ups), so it imports none of them.
 */

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

/** Where a store's connections come from, validated (by `postgresSettings`, options.ts). */
export type ConnectionSource = (
  | { pool: PostgresPool }
  /** `config` is for `new pg.Pool` and holds the password: never keep it where it can be printed. */
  | { config: Record<string, unknown> }
) & {
  preparedStatements: boolean;
  /** Calls that may wait for a connection of the pool before the next fails fast (see `maxWaiting`). */
  maxWaiting?: number;
  /** Settings of the LISTEN connection when `listenUrl` is given (holds its password, if any). */
  listen?: Record<string, unknown>;
};
