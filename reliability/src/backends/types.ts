import type { CacheProvider, IdempotencyStore, JsonObject, KeyValueStore, LockProvider, SnapshotStore } from '@stowage/core';
import type { GuardStore } from '../guard.ts';

export type BackendName = 'memory' | 'pglite' | 'postgres' | 'pgbouncer' | 'mongo' | 'jongodb';

export const ALL_BACKENDS: readonly BackendName[] = ['memory', 'pglite', 'postgres', 'pgbouncer', 'mongo', 'jongodb'];

/** The backends that run `@stowage/postgres` (a server, embedded PGlite, or a server behind PgBouncer). */
export const POSTGRES_BACKENDS: readonly BackendName[] = ['pglite', 'postgres', 'pgbouncer'];
/** The backends that run `@stowage/mongo`. */
export const MONGO_BACKENDS: readonly BackendName[] = ['mongo', 'jongodb'];

/**
 * Everything a worker process needs to open the same backend as its parent: plain data, sent
 * over IPC. `namespace` names the run's own schema (Postgres) or database (MongoDB), so that
 * the battery never touches anything else and can drop all it created at the end.
 */
export interface BackendTarget {
  name: BackendName;
  label: string;
  url: string | null;
  namespace: string;
}

export interface OpenOptions {
  /** Connect to this URL instead of the backend's own (the outage check's proxy). */
  url?: string;
  /** Client-side limits on connecting and on each operation, in ms (the outage check). */
  timeoutMs?: number;
  /** Shown by the server as the connection's application name, where it can (Postgres). */
  applicationName?: string;
  /** Use this pool or client instead of opening one; stowage must leave it open. */
  shared?: SharedConnection;
  /** Table or collection name, instead of the default for the contract (hostile option values). */
  table?: string;
  /** Schema (Postgres) or database (MongoDB) name, instead of the run's namespace. */
  schema?: string;
  /** Namespace prefix of a cache or snapshot store. */
  prefix?: string;
}

/** A pool (Postgres) or client (MongoDB) the caller owns and passes to stowage. */
export interface SharedConnection {
  readonly handle: unknown;
  /** Listener counts on the pool/client, to see that stowage removes what it adds. */
  listenerCounts(): Record<string, number>;
  /** Connections checked out of the pool and not returned (Postgres), else 0. */
  checkedOut(): number;
  /**
   * Runs `fn` in a transaction of the caller's own on this pool/client (a checked-out `pg`
   * client between BEGIN and COMMIT, a MongoDB session in `withTransaction`): committed when
   * `fn` resolves, rolled back when it rejects.
   */
  transaction<T>(fn: (transaction: object) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface Backend {
  readonly target: BackendTarget;
  /** False for the in-memory adapter: its state lives in one process. */
  readonly crossProcess: boolean;
  /** Where the database listens (for the proxy), or null. */
  readonly address: { host: string; port: number } | null;
  /** The driver settings `timeoutMs` turns into, for the table. */
  readonly timeoutSettings?: string;

  kv(options?: OpenOptions): Promise<KeyValueStore>;
  snapshots(options?: OpenOptions): Promise<SnapshotStore<JsonObject>>;
  locks(options?: OpenOptions): Promise<LockProvider>;
  cache(options?: OpenOptions): Promise<CacheProvider>;
  idempotency(options?: OpenOptions): Promise<IdempotencyStore>;

  /** The fenced resource of the lock-safety check, on its own table/collection, via the raw driver. */
  guard(): Promise<GuardStore>;
  /** A pool/client of the caller's own, for "bring your own connection" cycles. */
  sharedConnection(): Promise<SharedConnection | null>;

  /**
   * Measures whether the server applies concurrent updates of one document/row atomically (raw
   * driver, no stowage). Null when it does; otherwise what was measured. No adapter can keep
   * locks or compare-and-set correct on a server that loses its own updates.
   */
  serverAtomicity?(): Promise<string | null>;

  /** Drops everything the run created (its schema or database). */
  cleanup(): Promise<void>;
  close(): Promise<void>;
}

/** What the hostile-input check needs beyond the contracts: a canary outside stowage, and identifier options. */
export interface CanaryAccess {
  /** Creates a table/collection of its own with known rows, outside the run's namespace. */
  plant(): Promise<void>;
  /** A digest of every row of the canary and the list of the database's tables/collections. */
  digest(): Promise<string>;
  remove(): Promise<void>;
}
