import { StowageError } from '@stowage/core';
import { sleep } from '@stowage/core/adapter';
import type { PostgresConnection } from './connection/store-connection.js';
import { sqlState } from './errors.js';
import { indexColumns } from './schema/ddl.js';
import type { TableName } from './schema/names.js';
import { TABLE_INDEXES } from './schema/tables.js';

/*
 * The in-place upgrade of a table of awaitly-postgres's layout to stowage's (see adopt.ts for
 * what is adopted and when). It never holds a lock that blocks writers for longer than a
 * catalog change (but for the conversion of a `TIMESTAMP` expiry under a session time zone
 * other than UTC, which PostgreSQL does by rewriting the table):
 * - columns are added with constant (or `now()`) defaults, which PostgreSQL >= 11 records
 *   without rewriting the table;
 * - indexes are built `CONCURRENTLY`, outside any transaction; a new primary key is built as a
 *   unique index first and then attached (`ADD PRIMARY KEY USING INDEX`);
 * - `NOT NULL` goes through a `CHECK … NOT VALID` constraint validated without blocking writes;
 * - rows are touched in short batches (a block range each);
 * - every DDL transaction waits at most `LOCK_TIMEOUT` for its table lock and is tried again
 *   later, so a long transaction of the application never queues every writer behind it.
 *
 * Every step is idempotent and checks the catalog under an advisory lock of the table, so two
 * processes adopting at once (or one after a crash in the middle) end in the same state.
 *
 * Legacy rows are marked by the version they get, 1: the version sequence hands out 2 and up
 * from the moment the column exists, so 1 is never reused for a key. The `version` column of
 * an adopted table keeps the default 1 (writers that do not name it, such as awaitly-postgres,
 * still insert), which also tells a snapshot table that was adopted.
 */

/** How long a DDL statement of the upgrade waits for its table lock before it gives up and tries again. */
const LOCK_TIMEOUT = '3s';
const DDL_ATTEMPTS = 6;
/** Blocks per batch of the `updated_at` normalisation (8 KiB each: about 2 MiB of table per statement). */
const BLOCKS_PER_BATCH = 256;

export interface ColumnInfo {
  name: string;
  type: string;
  notNull: boolean;
  /** `null` for types without collation. */
  collation: string | null;
  default: string | null;
}

export interface TableInfo {
  name: string;
  columns: Map<string, ColumnInfo>;
  primaryKey: string[];
  checks: string[];
  /** Views and foreign keys of other tables that rest on the table (`view "v"`, `foreign key "fk" of "t"`). */
  dependents: string[];
  /** The database's default collation sorts by bytes (libc "C" or "POSIX"). */
  byteOrderDefault: boolean;
}

/** A table kind stowage can adopt: its own columns and those of awaitly-postgres's layout. */
export interface Layout {
  kind: 'kv' | 'snapshots';
  /** The columns awaitly-postgres's table has, with the types accepted for each. */
  legacy: Record<string, readonly string[]>;
  /** Columns awaitly-postgres's table may have (a later version added them). */
  optional: Record<string, readonly string[]>;
  /** Columns stowage adds (present already when an earlier upgrade stopped half-way). */
  added: Record<string, readonly string[]>;
  /**
   * Columns the upgrade renames (legacy name: new name), first of all. Everything else here
   * names them by their legacy names, as does the `TableInfo` the upgrade is given.
   */
  renames: Readonly<Record<string, string>>;
  /** Columns that must be `NOT NULL` (beyond the primary key). */
  notNull: readonly string[];
  primaryKey: readonly string[];
  /** What the README calls the layout, for error messages. */
  describe: string;
}

/** Sorts by bytes, as stowage's key ranges and batch lock order need. */
export function isByteOrder(column: ColumnInfo | undefined, info: TableInfo): boolean {
  const collation = column?.collation;
  return collation === 'C' || collation === 'POSIX' || (collation === 'default' && info.byteOrderDefault);
}

/** The same names in the same order. */
export function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((value, index) => value === b[index]);
}

/** The literal of one quoted, qualified name. */
function literal(name: string): string {
  return `'${name}'`;
}

/** Suffix of the `CHECK (column IS NOT NULL) NOT VALID` constraints the upgrade adds and drops again. */
export const NOT_NULL_CHECK = 'not_null_check';

/**
 * Upgrades a table of `layout`'s legacy layout (the caller checked its columns) to stowage's,
 * step by step; a step already done (by another process, or before a crash) changes nothing.
 */
export async function upgrade(connection: PostgresConnection, layout: Layout, table: TableName, info: TableInfo): Promise<void> {
  const t = table.sql;
  const regclass = `'${t}'::regclass`;
  const column = (name: string) => `(SELECT a FROM pg_attribute a WHERE a.attrelid = ${regclass} AND a.attname = '${name}' AND NOT a.attisdropped)`;
  const hasColumn = (name: string) => `EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = ${regclass} AND a.attname = '${name}' AND NOT a.attisdropped)`;
  const hasConstraint = (name: string) => `EXISTS (SELECT 1 FROM pg_constraint p WHERE p.conrelid = ${regclass} AND p.conname = '${name}')`;
  const sequence = table.derived('version_seq');
  const check = (name: string) => table.derivedName(`${name}_${NOT_NULL_CHECK}`);
  // updated_at written by awaitly (microseconds, maybe NULL) is brought to stowage's millisecond precision.
  const normalise = info.columns.has('updated_at') && !info.columns.get('updated_at')!.notNull;

  const named = (name: string) => layout.renames[name] ?? name;

  // 1. Renames, columns (catalog changes only), the version sequence, NOT NULL checks not yet validated.
  await ddl(connection, table, [
    ...Object.entries(layout.renames).map(
      ([legacy, renamed]) => `IF ${hasColumn(legacy)} AND NOT ${hasColumn(renamed)} THEN ALTER TABLE ${t} RENAME COLUMN ${legacy} TO ${renamed}; END IF;`,
    ),
    `CREATE SEQUENCE IF NOT EXISTS ${sequence} AS BIGINT;`,
    ...(layout.kind === 'snapshots'
      ? [`IF NOT ${hasColumn('prefix')} THEN ALTER TABLE ${t} ADD COLUMN prefix TEXT COLLATE "C" NOT NULL DEFAULT ''; END IF;`]
      : []),
    // Legacy rows take version 1, and from now on the sequence hands out 2 and up: 1 is never reused.
    `IF NOT ${hasColumn('version')} THEN
      PERFORM setval('${sequence}', greatest((SELECT last_value FROM ${sequence}), 1), true);
      ALTER TABLE ${t} ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
    END IF;`,
    `IF NOT ${hasColumn('updated_at')} THEN
      ALTER TABLE ${t} ADD COLUMN updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now());
    ELSIF coalesce((SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d WHERE d.adrelid = ${regclass} AND d.adnum = (${column('updated_at')}).attnum), '') NOT LIKE 'date_trunc(%' THEN
      ALTER TABLE ${t} ALTER COLUMN updated_at SET DEFAULT date_trunc('milliseconds', now());
    END IF;`,
    ...layout.notNull.map(
      (name) => `IF NOT (${column(name)}).attnotnull AND NOT ${hasConstraint(check(name))} THEN
      ALTER TABLE ${t} ADD CONSTRAINT "${check(name)}" CHECK (${name} IS NOT NULL) NOT VALID;
    END IF;`,
    ),
    // awaitly wrote expiry times without a time zone, compared with now() in the session's time
    // zone: they mean that time zone's wall clock, which is what the conversion reads them as.
    // Indexes on expires_at alone (awaitly's) are dropped rather than rebuilt under the lock;
    // stowage's is built concurrently below. Without rewrite when the session time zone is UTC.
    ...(layout.kind === 'kv'
      ? [
          `IF format_type((${column('expires_at')}).atttypid, NULL) = 'timestamp without time zone' THEN
      FOR dropped IN SELECT x.indexrelid::regclass::text AS name FROM pg_index x
          WHERE x.indrelid = ${regclass} AND x.indnatts = 1 AND x.indkey[0] = (${column('expires_at')}).attnum LOOP
        EXECUTE 'DROP INDEX ' || dropped.name;
      END LOOP;
      ALTER TABLE ${t} ALTER COLUMN expires_at TYPE TIMESTAMPTZ;
    END IF;`,
        ]
      : []),
  ]);

  // 2. Timestamps at millisecond precision (list cursors compare them exactly), NULLs filled.
  if (normalise) await normaliseUpdatedAt(connection, table);

  // 3. NOT NULL: validate each check without blocking writers, then SET NOT NULL uses it.
  for (const name of layout.notNull) {
    const constraint = check(name);
    try {
      await ddl(connection, table, [
        `IF ${hasConstraint(constraint)} THEN
      ALTER TABLE ${t} VALIDATE CONSTRAINT "${constraint}";
      ALTER TABLE ${t} ALTER COLUMN ${name} SET NOT NULL;
      ALTER TABLE ${t} DROP CONSTRAINT "${constraint}";
    END IF;`,
      ]);
    } catch (error) {
      if (sqlState(error) !== '23514') throw error; // check_violation: a NULL is there
      throw new StowageError(
        'E_INVALID_OPTION',
        `table ${info.name} has rows whose ${name} is NULL, which stowage cannot read: set a value or delete them, then start again`,
        { cause: error },
      );
    }
  }

  // 4. The primary key stowage needs: its columns in byte order. Built concurrently as a unique
  //    index, then attached; the column's collation then changes without touching the index.
  const keyColumns = layout.primaryKey;
  const needsKey = !sameList(info.primaryKey, keyColumns) || !keyColumns.every((name) => isByteOrder(info.columns.get(name), info));
  if (needsKey) {
    const built = table.derivedName('pkey_c');
    const last = named(keyColumns.at(-1)!);
    const indexColumns = keyColumns.map((name) => `${named(name)} COLLATE "C"`).join(', ');
    await buildIndexConcurrently(connection, table, built, `CREATE UNIQUE INDEX CONCURRENTLY "${built}" ON ${t} (${indexColumns})`);
    await ddl(connection, table, [
      `IF ${hasConstraint(built)} THEN RETURN; END IF;`,
      `FOR dropped IN SELECT p.conname AS name FROM pg_constraint p WHERE p.conrelid = ${regclass} AND p.contype = 'p' LOOP
      EXECUTE 'ALTER TABLE ${t} DROP CONSTRAINT ' || quote_ident(dropped.name);
    END LOOP;`,
      `ALTER TABLE ${t} ALTER COLUMN ${last} SET NOT NULL;`,
      `ALTER TABLE ${t} ALTER COLUMN ${last} TYPE TEXT COLLATE "C";`,
      `ALTER TABLE ${t} ADD CONSTRAINT "${built}" PRIMARY KEY USING INDEX "${built}";`,
    ]);
  }

  // 5. Stowage's secondary indexes, concurrently (the schema creation that follows finds them).
  for (const [suffix, columns] of TABLE_INDEXES[layout.kind]) {
    const name = table.derivedName(suffix);
    await buildIndexConcurrently(connection, table, name, `CREATE INDEX CONCURRENTLY "${name}" ON ${t} ${indexColumns(layout.kind, columns, true)}`);
  }
}

/**
 * One DDL transaction (a multi-statement query is one implicit transaction): the table's
 * advisory lock, then `steps` as the body of a `DO` block (each checks the catalog itself), with
 * `LOCK_TIMEOUT` for the table lock. A lock not granted in time is tried again a little later,
 * a few times, rather than queueing every writer of the table behind a long transaction.
 */
export async function ddl(connection: PostgresConnection, table: TableName, steps: readonly string[]): Promise<void> {
  const text = `SELECT pg_advisory_xact_lock(hashtext('stowage adopt'), hashtext('${table.key}'));
DO $adopt$
DECLARE dropped record;
BEGIN
  PERFORM set_config('lock_timeout', '${LOCK_TIMEOUT}', true);
  ${steps.join('\n  ')}
END
$adopt$;`;
  for (let attempt = 1; ; attempt++) {
    await whileBuildingIndex(connection, table);
    try {
      await connection.query(text);
      return;
    } catch (error) {
      if (!isLockConflict(error) || attempt >= DDL_ATTEMPTS) throw error;
      await sleep(250 * 2 ** attempt * (0.5 + Math.random()));
    }
  }
}

/**
 * A lock not granted within `LOCK_TIMEOUT` (55P03), or a deadlock (40P01): a DDL transaction of
 * one process and a concurrent index build of another wait for each other (the build waits for
 * every transaction that started before it to end). Either way nothing was done; try again.
 */
function isLockConflict(error: unknown): boolean {
  const state = sqlState(error);
  return state === '55P03' || state === '40P01';
}

/**
 * Waits while an index of `table` is being built (by another process's upgrade): a DDL
 * transaction started now would wait for the build's table lock while the build waits for that
 * transaction, a deadlock that PostgreSQL resolves by cancelling one of them after a second.
 */
async function whileBuildingIndex(connection: PostgresConnection, table: TableName): Promise<void> {
  for (;;) {
    const { rows } = await connection.query(`SELECT EXISTS (SELECT 1 FROM pg_stat_progress_create_index WHERE relid = to_regclass(${literal(table.sql)})) AS building`);
    if (rows[0].building !== true) return;
    await sleep(100);
  }
}

/**
 * Builds an index with `CREATE [UNIQUE] INDEX CONCURRENTLY` (`create`) unless a valid one of that
 * name exists. Another process may be building it at the same moment: its build shows in
 * `pg_stat_progress_create_index` and is waited for. An invalid index no build holds is what an
 * interrupted build leaves (a crash, or a build cancelled by a deadlock): it is dropped (a
 * catalog change: the index is empty of meaning) and built again.
 */
async function buildIndexConcurrently(connection: PostgresConnection, table: TableName, name: string, create: string): Promise<void> {
  const qualified = table.schema === undefined ? `"${name}"` : `"${table.schema}"."${name}"`;
  for (;;) {
    const { rows } = await connection.query(
      `SELECT x.indisvalid AS valid, EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.relid = x.indrelid) AS building
       FROM pg_index x WHERE x.indexrelid = to_regclass(${literal(qualified)})`,
    );
    const found = rows[0] as { valid: boolean; building: boolean } | undefined;
    if (found?.valid) return;
    if (found === undefined) {
      try {
        await connection.query(create);
        return;
      } catch (error) {
        // duplicate_table: another process started it. A lock conflict cancelled the build and
        // left an invalid index. Either way, look again.
        if (sqlState(error) !== '42P07' && !isLockConflict(error)) throw error;
      }
    } else if (found.building) {
      await sleep(200);
    } else {
      // Checked and dropped in one transaction, the check made under the table's SHARE UPDATE
      // EXCLUSIVE lock, which every CREATE INDEX CONCURRENTLY on it holds from start to end (and
      // vacuum and analyze too): an index still invalid then is one whose build is over. A look
      // at the progress view instead would come before the DROP waits for its lock, and a
      // build could end in between (the DROP then fails with "tuple concurrently updated").
      await ddl(connection, table, [
        `LOCK TABLE ${table.sql} IN SHARE UPDATE EXCLUSIVE MODE;`,
        `IF EXISTS (SELECT 1 FROM pg_index x WHERE x.indexrelid = to_regclass('${qualified}') AND NOT x.indisvalid) THEN
      DROP INDEX ${qualified};
    END IF;`,
      ]);
    }
  }
}

/**
 * `updated_at` at millisecond precision and never NULL (NULL: now), in batches of
 * `BLOCKS_PER_BATCH` table blocks (a TID range, PostgreSQL >= 14 reads only those blocks), each
 * its own short statement. Rows an update moves elsewhere are already done.
 */
async function normaliseUpdatedAt(connection: PostgresConnection, table: TableName): Promise<void> {
  const { rows } = await connection.query(`SELECT pg_relation_size(${literal(table.sql)}::regclass) / current_setting('block_size')::bigint AS blocks`);
  const blocks = Number(rows[0].blocks);
  const batch = (from: number) => `UPDATE ${table.sql} SET updated_at = date_trunc('milliseconds', coalesce(updated_at, now()))
    WHERE ctid >= '(${from},0)'::tid AND ctid < '(${from + BLOCKS_PER_BATCH},0)'::tid
      AND (updated_at IS NULL OR updated_at <> date_trunc('milliseconds', updated_at))`;
  for (let from = 0; from < blocks; from += BLOCKS_PER_BATCH) await connection.query(batch(from));
}
