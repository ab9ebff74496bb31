import { StowageError } from '@stowage/core';
import { plannedEachCall } from '../connection/prepared-statements.js';
import type { PostgresConnection } from '../connection/store-connection.js';
import type { PostgresPool } from '../connection/types.js';
import { INSUFFICIENT_PRIVILEGE, LOCK_NOT_AVAILABLE, READ_ONLY_TRANSACTION, sqlState } from '../errors.js';
import { MISSING_SEQUENCE, isTable, storeObjects } from './ddl.js';
import type { TableKind, TableName } from './names.js';
import { SEQUENCES, TABLE_INDEXES } from './tables.js';

/*
 * A store's tables at start-up: created when missing, once per pool and process
 * ({@link ensureSchema}), and what a store says when a table's sequence is gone.
 */

/**
 * `E_INVALID_OPTION` for a store whose table exists without its sequence (`sequence`, quoted
 * and qualified): stowage never creates it again (see `sequenceDdl` in ddl.ts), and says how to.
 */
export function missingSequenceError(sequence: string, cause?: unknown): StowageError {
  const what = sequence.endsWith('_fence_seq"') ? 'fences' : 'versions';
  return new StowageError(
    'E_INVALID_OPTION',
    `sequence ${sequence} is missing while its table exists. It hands out the table's ${what}; created again from 1 it would ` +
      `repeat ${what} already handed out, so stowage does not create it. Create it again above every value it ever handed out: ` +
      `CREATE SEQUENCE ${sequence} AS BIGINT START WITH <its last value before it was dropped, plus 1> ` +
      `(max() of the table's column is not enough: deleted rows took theirs with them; when in doubt, start far above it), ` +
      `and grant USAGE on it again to the role stowage runs as (grantsSql())`,
    { cause },
  );
}

/**
 * The sequences of `tables` whose table exists without them (quoted, qualified names), for a
 * statement that met a missing relation.
 */
export async function missingSequences(connection: PostgresConnection, tables: ReadonlyArray<readonly [TableKind, TableName]>): Promise<string[]> {
  const pairs = tables.flatMap(([kind, name]) => {
    const suffix = SEQUENCES[kind];
    return suffix === undefined ? [] : [[name.sql, name.derived(suffix)] as const];
  });
  if (pairs.length === 0) return [];
  const { rows } = await connection.query(
    `SELECT s AS name FROM unnest($1::text[], $2::text[]) AS o(t, s) WHERE ${isTable('t')} AND to_regclass(s) IS NULL`,
    [pairs.map(([table]) => table), pairs.map(([, sequence]) => sequence)],
  );
  return rows.map((row: { name: string }) => row.name);
}

/** Every schema creation of the process is numbered, so a statement knows whether one started after it was sent. */
let creations = 0;

/** The number of the latest schema creation started in this process (see {@link ensureSchema}'s `newerThan`). */
export function latestCreation(): number {
  return creations;
}

const created = new WeakMap<PostgresPool, Map<string, { promise: Promise<void>; number: number }>>();

/**
 * Makes sure the store's `tables` exist, once per pool and process (`statements`: their DDL as
 * the store runs it, see `storeDdl` in ddl.ts).
 *
 * Start-up on a schema that is already there takes no lock: one catalog read finds every
 * table, sequence and index, and nothing runs. (`CREATE INDEX IF NOT EXISTS` would take the
 * table's SHARE lock even for an index that exists, wait behind any transaction writing the
 * table, and make every writer queue behind it.)
 *
 * When something is missing, the statements travel in one round trip as one implicit
 * transaction that first takes a transaction-scoped advisory lock of each of the store's
 * tables (two processes creating the same table create it once; stores of other tables never
 * wait for it), under a {@link DDL_LOCK_TIMEOUT}: a statement that would queue behind a long
 * transaction gives up, so writers never queue behind it, and it is tried again after a pause.
 * When a try timed out but the tables and sequences exist (an index is missing on a busy
 * table), the store runs without the index at once, and the next start tries again. Nothing is held
 * across statements, which keeps this safe behind PgBouncer in transaction mode.
 *
 * A server that refuses the DDL because it is read-only (a standby, a failover target) or the
 * role may not create objects is fine as long as every table and sequence of the store
 * exists: then the store runs on them.
 *
 * `newerThan`: a statement sent after creation number `newerThan` found a table missing (it
 * was dropped under the store). The statements run again unless a creation started since
 * then, so the stores that saw it fail at the same time create it once.
 */
export function ensureSchema(
  connection: PostgresConnection,
  statements: string[],
  tables: ReadonlyArray<readonly [TableKind, TableName]>,
  newerThan?: number,
): Promise<void> {
  let byText = created.get(connection.pool);
  if (!byText) created.set(connection.pool, (byText = new Map()));
  const locks = [...new Set(tables.map(([, name]) => name.sql))].sort().map((table) => `pg_advisory_xact_lock(hashtext('stowage schema'), hashtext('${table}'))`);
  const text = [`SET LOCAL lock_timeout = ${DDL_LOCK_TIMEOUT}`, `SELECT ${locks.join(', ')}`, ...statements].join(';\n');
  const current = byText.get(text);
  if (current !== undefined && (newerThan === undefined || current.number > newerThan)) return current.promise;
  const entry = { promise: runDdl(connection, text, tables), number: ++creations };
  byText.set(text, entry);
  // A failed attempt (server down) is retried by the next caller.
  entry.promise.catch(() => {
    if (byText.get(text) === entry) byText.delete(text);
  });
  return entry.promise;
}

/** How long a statement of the store's DDL waits for a lock before it gives up (and is tried again). */
const DDL_LOCK_TIMEOUT = 1000;
/** How often the DDL is tried when it times out on a lock, with a pause of a quarter of {@link DDL_LOCK_TIMEOUT} between tries. */
const DDL_LOCK_ATTEMPTS = 3;

async function runDdl(connection: PostgresConnection, text: string, tables: ReadonlyArray<readonly [TableKind, TableName]>): Promise<void> {
  const objects = storeObjects(tables);
  if (await allExist(connection, [...objects, ...storeIndexes(tables)])) return;
  for (let attempt = 1; ; attempt++) {
    try {
      await connection.query(text);
      return;
    } catch (error) {
      // Someone creating the same objects without the advisory lock (another tool, an older
      // stowage) can still race us: the object exists now, so another pass succeeds. A deadlock
      // (40P01) with another process's adoption (its CREATE INDEX CONCURRENTLY waits for this
      // transaction, which waits for the table lock of `CREATE INDEX IF NOT EXISTS`) undid this
      // transaction: it goes again once the build is over.
      const state = sqlState(error) ?? sqlState((error as { cause?: unknown }).cause);
      if (state === MISSING_SEQUENCE) throw missingSequenceError((error as Error).message, error);
      if (attempt < 3 && (state === '42P07' || state === '23505' || state === '42710' || state === '40P01')) continue;
      if (state === LOCK_NOT_AVAILABLE) {
        // Only an index is missing (the tables and sequences are there): the store runs without
        // it at once rather than after every try; the next start builds it.
        if (await allExist(connection, objects)) return;
        if (attempt < DDL_LOCK_ATTEMPTS) {
          await new Promise((resolve) => setTimeout(resolve, DDL_LOCK_TIMEOUT / 4));
          continue;
        }
      }
      if ((state === READ_ONLY_TRANSACTION || state === INSUFFICIENT_PRIVILEGE) && (await allExist(connection, objects))) return;
      throw error;
    }
  }
}

/** The secondary indexes of `tables` (quoted, qualified names). */
function storeIndexes(tables: ReadonlyArray<readonly [TableKind, TableName]>): string[] {
  return tables.flatMap(([kind, name]) => TABLE_INDEXES[kind].map(([suffix]) => name.derived(suffix)));
}

/**
 * Whether every relation of `objects` exists: a catalog read that locks nothing. Sent unnamed:
 * it runs once per start, and a prepared statement would stay in the session for nothing.
 */
async function allExist(connection: PostgresConnection, objects: string[]): Promise<boolean> {
  const { rows } = await connection.query(ALL_EXIST, [objects]);
  return rows[0].present === true;
}

const ALL_EXIST = plannedEachCall('SELECT bool_and(to_regclass(name) IS NOT NULL) AS present FROM unnest($1::text[]) AS name');
