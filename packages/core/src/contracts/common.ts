import type { HasCapabilities } from '../capabilities.js';

/**
 * Every contract object can be closed. `close()` is idempotent; afterwards every other call
 * rejects with `StowageError` code `E_CLOSED`. Connections the user passed in (a `pg.Pool`, a
 * `MongoClient`, a `Db`) are never closed by stowage; connections stowage opened are.
 */
export interface Closable {
  close(): Promise<void>;
}

export interface StowageResource extends Closable, HasCapabilities {
  /**
   * Connects and creates what the object needs (tables, collections, indexes). Optional to
   * call: the first operation does it. Call it to fail fast at start-up, the same way on every
   * backend.
   */
  ready(): Promise<void>;
}

export interface ScanOptions {
  /** Entries fetched per round trip (default 1000, at most 10,000): memory stays bounded by one page. */
  pageSize?: number;
}

/**
 * A database transaction the caller holds, as its driver represents it: on Postgres a
 * checked-out `pg` client (a `PoolClient` or a `pg.Client`) between `BEGIN` and `COMMIT`; on
 * MongoDB a `ClientSession` with a started transaction. A store that can join it takes it in
 * `withTransaction(transaction)`: every call of the view it returns runs inside that
 * transaction, so its writes commit or roll back with the caller's own.
 */
export type DatabaseTransaction = object;
