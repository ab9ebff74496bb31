import { randomBytes } from 'node:crypto';
import type { ConformanceAdapter, ConformanceContext } from '@stowage/core/conformance';
import pg from 'pg';
import {
  PostgresCacheProvider,
  PostgresCheckpointStore,
  PostgresCircuitBreakerStore,
  PostgresIdempotencyStore,
  PostgresKeyValueStore,
  PostgresLockProvider,
  PostgresLockingSnapshotStore,
  PostgresProcessBackend,
  PostgresSnapshotStore,
  postgres,
  quoteIdentifier,
  type PostgresConnectionOptions,
  type PostgresKeyValueStoreOptions,
  type PostgresStoreOptions,
} from '../../src/index.js';

/** A random suffix that keeps one test's tables apart from every other test's. */
export const uniqueSuffix = (): string => randomBytes(5).toString('hex');

export interface TableSet {
  kv: string;
  snapshots: string;
  workflowLocks: string;
  locks: string;
  cache: string;
  circuitBreaker: string;
  checkpoints: string;
  idempotency: string;
  processItems: string;
  processTransitions: string;
}

export function tableSet(suffix = uniqueSuffix()): TableSet {
  return {
    kv: `kv_${suffix}`,
    snapshots: `snap_${suffix}`,
    workflowLocks: `wflock_${suffix}`,
    locks: `lock_${suffix}`,
    cache: `cache_${suffix}`,
    circuitBreaker: `cb_${suffix}`,
    checkpoints: `cp_${suffix}`,
    idempotency: `idem_${suffix}`,
    processItems: `pitems_${suffix}`,
    processTransitions: `ptrans_${suffix}`,
  };
}

/** `name` quoted, and qualified with `schema` if one is given. */
export const qualified = (name: string, schema?: string): string => (schema ? `${quoteIdentifier(schema)}.${quoteIdentifier(name)}` : quoteIdentifier(name));

/** Drops every table of a set, and the sequences of versions and fences. */
export async function dropTables(admin: pg.Pool, tables: TableSet, schema?: string): Promise<void> {
  const q = (name: string) => qualified(name, schema);
  const statements = Object.values(tables).map((table) => `DROP TABLE IF EXISTS ${q(table)}`);
  const sequences = [`${tables.kv}_version_seq`, `${tables.snapshots}_version_seq`, `${tables.locks}_fence_seq`, `${tables.workflowLocks}_fence_seq`];
  for (const sequence of sequences) statements.push(`DROP SEQUENCE IF EXISTS ${q(sequence)}`);
  await admin.query(statements.join(';\n'));
}

/**
 * One store of every kind on the tables of `tables`, each opened with `options` (the snapshot
 * store with its workflow lock), for the tests that run the same check on all of them. `kv`
 * adds options to the key-value store only.
 */
export function everyStore(options: PostgresStoreOptions, tables: TableSet, kv: Partial<PostgresKeyValueStoreOptions> = {}) {
  return {
    kv: new PostgresKeyValueStore({ ...options, table: tables.kv, ...kv }),
    snapshots: postgres({ ...options, table: tables.snapshots, lock: { lockTableName: tables.workflowLocks } }),
    locks: new PostgresLockProvider({ ...options, table: tables.locks }),
    cache: new PostgresCacheProvider({ ...options, table: tables.cache }),
    circuitBreaker: new PostgresCircuitBreakerStore({ ...options, table: tables.circuitBreaker }),
    checkpoints: new PostgresCheckpointStore({ ...options, table: tables.checkpoints }),
    idempotency: new PostgresIdempotencyStore({ ...options, table: tables.idempotency }),
    process: new PostgresProcessBackend({ ...options, itemsTable: tables.processItems, transitionsTable: tables.processTransitions }),
  };
}

export interface AdapterSetup {
  name: string;
  /** Connection options every instance gets (a URL with per-instance pools, or a shared pool). */
  connection: () => PostgresConnectionOptions;
  /** Used to drop each test's tables. */
  admin: () => pg.Pool;
  schema?: string;
}

/**
 * The conformance adapter for one backend: every test gets its own tables (random suffix),
 * every factory opens a new store object on them (like another process would), and the
 * tables are dropped afterwards.
 */
export function postgresConformanceAdapter(setup: AdapterSetup): ConformanceAdapter {
  return {
    name: setup.name,
    createContext(): ConformanceContext {
      const tables = tableSet();
      const base = () => ({ ...setup.connection(), schema: setup.schema });
      return {
        kv: async () => new PostgresKeyValueStore({ ...base(), table: tables.kv }),
        snapshots: async ({ lock, prefix }) =>
          lock
            ? new PostgresLockingSnapshotStore({ ...base(), table: tables.snapshots, prefix, lock: { lockTableName: tables.workflowLocks } })
            : new PostgresSnapshotStore({ ...base(), table: tables.snapshots, prefix }),
        locks: async () => {
          const provider = new PostgresLockProvider({ ...base(), table: tables.locks });
          await provider.ready(); // detects LISTEN support, so `capabilities.wakeups` is known
          return provider;
        },
        cache: async (options) => new PostgresCacheProvider({ ...base(), ...options, table: tables.cache }),
        circuitBreaker: async () => new PostgresCircuitBreakerStore({ ...base(), table: tables.circuitBreaker }),
        checkpoints: async (options) => new PostgresCheckpointStore({ ...base(), table: tables.checkpoints, ...options }),
        idempotency: async () => new PostgresIdempotencyStore({ ...base(), table: tables.idempotency }),
        process: async () => {
          const backend = new PostgresProcessBackend({ ...base(), itemsTable: tables.processItems, transitionsTable: tables.processTransitions });
          await backend.ready(); // creates the tables and detects LISTEN, so `capabilities` is known
          return backend;
        },
        // As a user would: a client checked out of their pool, in BEGIN.
        beginTransaction: async () => {
          const client = await setup.admin().connect();
          await client.query('BEGIN');
          const end = (command: string) => async () => {
            try {
              await client.query(command);
            } finally {
              client.release();
            }
          };
          return { transaction: client, commit: end('COMMIT'), rollback: end('ROLLBACK') };
        },
        cleanup: () => dropTables(setup.admin(), tables, setup.schema),
      };
    },
  };
}
