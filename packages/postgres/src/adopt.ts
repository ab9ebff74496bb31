import { StowageError } from '@stowage/core';
import { convertGoGoScopeTable, goGoScopeKeysOf } from './adopt-go-go-scope.js';
import { ADOPTED_SNAPSHOT_ID, AWAITLY_LAYOUTS, planTableAdoption, tableInfo, underLegacyNames, type ExistingTable } from './adopt-plan.js';
import { upgrade, type ColumnInfo } from './adopt-upgrade.js';
import type { PostgresConnection } from './connection/store-connection.js';
import type { PostgresPool } from './connection/types.js';
import { encodeText } from './key-encoding.js';
import type { TableKind, TableName } from './schema/names.js';
import { keyRange } from './sql.js';

/*
 * Tables that exist before stowage starts, looked at once per pool when a store starts (with
 * `autoCreate`). Stowage's own tables are used as they are. Tables written by awaitly-postgres
 * (the key-value table `awaitly_workflow_state` and the snapshot table `awaitly_snapshots`) are
 * upgraded in place, once (adopt-upgrade.ts): what stowage needs is added and every row stays,
 * with its meaning. go-go-scope's own tables are converted where goGoScopePersistence opens
 * them (adopt-go-go-scope.ts). Any other layout is refused with `E_INVALID_OPTION` naming
 * what stowage does not recognise, before anything is changed. Which of these a table is,
 * `planTableAdoption` (adopt-plan.ts) judges; the stowage CLI reports the same judgement.
 */

/** What start-up found: whether an adopted snapshot table may still hold rows of awaitly's layout. */
export interface AdoptedTable {
  adopted: boolean;
}

const adoptions = new WeakMap<PostgresPool, Map<string, Promise<AdoptedTable>>>();
const claims = new WeakMap<PostgresPool, Map<string, Promise<void>>>();
const idColumns = new WeakMap<PostgresPool, Map<string, Promise<string>>>();

/**
 * The name of a snapshot table's id column: `id` in tables stowage created, `snapshot_id` in
 * adopted ones. Known from the adoption with `autoCreate`; otherwise looked up once per pool
 * and table (a table that does not exist yet is created with `id`).
 */
export function snapshotIdColumn(connection: PostgresConnection, table: TableName): Promise<string> {
  const known = idColumns.get(connection.pool)?.get(table.sql);
  if (known !== undefined) return known;
  const lookup = connection
    .query(`SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = '${ADOPTED_SNAPSHOT_ID}' AND NOT attisdropped) AS adopted`, [table.sql])
    .then(({ rows }) => (rows[0].adopted === true ? ADOPTED_SNAPSHOT_ID : 'id'));
  rememberIdColumn(connection, table, lookup);
  return lookup;
}

/** Remembers a snapshot table's id column for the pool; a failed adoption or lookup is forgotten (tried again). */
function rememberIdColumn(connection: PostgresConnection, table: TableName, column: Promise<string>): void {
  let byTable = idColumns.get(connection.pool);
  if (!byTable) idColumns.set(connection.pool, (byTable = new Map()));
  byTable.set(table.sql, column);
  column.catch(() => {
    if (byTable.get(table.sql) === column) byTable.delete(table.sql);
  });
}

/**
 * Checks the store's existing tables and upgrades those of awaitly-postgres's layout, once per
 * pool and table (missing tables are left to the schema creation that follows). Resolves with
 * what it found for each table, in order.
 */
export async function adoptTables(connection: PostgresConnection, tables: ReadonlyArray<readonly [TableKind, TableName]>): Promise<AdoptedTable[]> {
  let byTable = adoptions.get(connection.pool);
  if (!byTable) adoptions.set(connection.pool, (byTable = new Map()));
  const pending = tables.filter(([, name]) => !byTable.has(name.sql));
  if (pending.length > 0) {
    const inspected = inspect(connection, pending.map(([, name]) => name));
    for (const [kind, name] of pending) {
      const adoption = inspected.then((infos) => adoptTable(connection, kind, name, infos.get(name.sql)));
      // A snapshot table is stowage's (or created now, as stowage's), or adopted: its id column follows.
      if (kind === 'snapshots') rememberIdColumn(connection, name, adoption.then(({ adopted }) => (adopted ? ADOPTED_SNAPSHOT_ID : 'id')));
      byTable.set(name.sql, adoption);
      adoption.catch(() => {
        if (byTable.get(name.sql) === adoption) byTable.delete(name.sql); // tried again by the next start
      });
    }
  }
  return Promise.all(tables.map(([, name]) => byTable.get(name.sql)!));
}

async function adoptTable(connection: PostgresConnection, kind: TableKind, table: TableName, found: ExistingTable | undefined): Promise<AdoptedTable> {
  if (found === undefined) return { adopted: false };
  const keys = goGoScopeKeysOf(connection.pool, kind, table);
  const plan = planTableAdoption(kind, found, { goGoScopePersistence: keys !== undefined });
  switch (plan.verdict) {
    case 'stowage':
      return { adopted: plan.adopted };
    case 'refused':
      throw new StowageError('E_INVALID_OPTION', plan.reason);
    case 'awaitly': {
      const layout = AWAITLY_LAYOUTS[kind]!;
      await upgrade(connection, layout, table, underLegacyNames(layout, tableInfo(found)));
      return { adopted: true };
    }
    case 'go-go-scope':
      await convertGoGoScopeTable(connection, kind, table, found.name, keys!);
      return { adopted: true };
  }
}

// --- inspection -----------------------------------------------------------------------------

/**
 * One catalog query for every table of a store: what {@link planTableAdoption} judges. The
 * names are literals (quoted identifiers, validated: no `'` in them), so this start-up query is
 * not kept as a prepared statement on every connection.
 */
async function inspect(connection: PostgresConnection, tables: readonly TableName[]): Promise<Map<string, ExistingTable>> {
  const { rows } = await connection.query(TABLE_CATALOG.replace('$1', literalArray(tables.map((table) => table.sql))));
  return new Map((rows as TableCatalogRow[]).map((row) => [row.name, existingTable(row)]));
}

/** A row of {@link TABLE_CATALOG}. */
export interface TableCatalogRow {
  name: string;
  /** The table's place in `$1`, from 1. */
  n: number;
  /** Catalog estimates (`pg_class.reltuples`, `relpages`; -1 rows: never analyzed). */
  rows: number;
  pages: number;
  /** The role connected may change the table (it owns it, or is a member of the owner role). */
  owned: boolean;
  columns: ColumnInfo[];
  primary_key: string[] | null;
  checks: string[];
  dependents: string[];
  indexes: string[];
  byte_order: boolean;
}

/** What {@link planTableAdoption} judges, from a row of {@link TABLE_CATALOG}. */
export function existingTable(row: TableCatalogRow): ExistingTable {
  return {
    name: row.name,
    columns: row.columns,
    primaryKey: row.primary_key ?? [],
    checks: row.checks,
    dependents: row.dependents,
    indexes: row.indexes,
    byteOrderDefault: row.byte_order === true,
    pages: row.pages,
  };
}

/** `ARRAY['…', …]::text[]` of quoted identifiers (which cannot hold a `'`). */
function literalArray(names: readonly string[]): string {
  return `ARRAY[${names.map((name) => `'${name}'`).join(', ')}]`;
}

/**
 * The catalog read that adoption judges tables by (the CLI's `doctor` and `adopt` read the
 * same): one row per existing table of `$1` (quoted, qualified names), in that order (see
 * {@link TableCatalogRow}). The database's default collation counts as byte order
 * for libc "C" and "POSIX" only (`datlocprovider` exists from PostgreSQL 15 on; the JSON form
 * reads it where it exists).
 */
export const TABLE_CATALOG = `SELECT t.name, t.n::int AS n, c.reltuples::float8 AS rows, c.relpages::float8 AS pages,
  pg_has_role(c.relowner, 'USAGE') AS owned,
  (SELECT json_agg(json_build_object('name', a.attname, 'type', format_type(a.atttypid, a.atttypmod), 'notNull', a.attnotnull,
      'collation', co.collname, 'default', pg_get_expr(d.adbin, d.adrelid)) ORDER BY a.attnum)
    FROM pg_attribute a
    LEFT JOIN pg_collation co ON co.oid = a.attcollation
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
  (SELECT json_agg(a.attname ORDER BY k.position)
    FROM pg_constraint p, unnest(p.conkey) WITH ORDINALITY AS k(attnum, position)
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
    WHERE p.conrelid = c.oid AND p.contype = 'p') AS primary_key,
  (SELECT coalesce(json_agg(p.conname), '[]') FROM pg_constraint p WHERE p.conrelid = c.oid AND p.contype = 'c') AS checks,
  (SELECT coalesce(json_agg(i.relname::text), '[]') FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid) AS indexes,
  (SELECT coalesce(json_agg(DISTINCT x.what), '[]') FROM (
      SELECT 'view ' || v.oid::regclass::text FROM pg_depend dep JOIN pg_rewrite r ON r.oid = dep.objid JOIN pg_class v ON v.oid = r.ev_class
        WHERE dep.classid = 'pg_rewrite'::regclass AND dep.refclassid = 'pg_class'::regclass AND dep.refobjid = c.oid AND v.oid <> c.oid
      UNION ALL
      SELECT 'foreign key ' || quote_ident(f.conname) || ' of ' || f.conrelid::regclass::text FROM pg_constraint f
        WHERE f.confrelid = c.oid AND f.contype = 'f') AS x(what)) AS dependents,
  (SELECT d.datcollate IN ('C', 'POSIX') AND coalesce(to_jsonb(d) ->> 'datlocprovider', 'c') = 'c'
    FROM pg_database d WHERE d.datname = current_database()) AS byte_order
FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n)
JOIN pg_class c ON c.oid = to_regclass(t.name) AND c.relkind IN ('r', 'p')
ORDER BY t.n`;

// --- snapshot rows of awaitly's layout -------------------------------------------------------

/**
 * awaitly-postgres kept a store's `prefix` inside the id (`orders:wf-1`). After the upgrade
 * every such row is under the empty prefix, with its whole id and version 1. A store with a
 * prefix takes the rows whose id starts with it (and is longer) when it starts: one `UPDATE`
 * moves them to `(prefix, rest of the id)`, at millisecond precision. It runs once per pool,
 * prefix and table, only on adopted tables, and concurrent runs are harmless: a row moved by
 * one no longer matches the other's `prefix = ''`, and each statement returns only once the
 * rows it waited for are moved. Rows written by stowage (version >= 2) never move. A row whose
 * id no configured prefix begins stays under `''`, where a store without prefix sees it.
 */
export function claimLegacySnapshots(connection: PostgresConnection, table: TableName, prefix: string): Promise<void> {
  let byKey = claims.get(connection.pool);
  if (!byKey) claims.set(connection.pool, (byKey = new Map()));
  const key = `${table.sql}\u0000${prefix}`;
  let claim = byKey.get(key);
  if (!claim) {
    const stored = encodeText(prefix);
    const { lo, hi } = keyRange(stored);
    const id = ADOPTED_SNAPSHOT_ID;
    claim = connection
      .query(
        `UPDATE ${table.sql} AS s SET prefix = $1, ${id} = substr(s.${id}, length($1) + 1), updated_at = date_trunc('milliseconds', s.updated_at)
         WHERE s.prefix = '' AND s.${id} >= $2 AND s.${id} < $3 AND s.version = 1 AND length(s.${id}) > length($1)
           AND NOT EXISTS (SELECT 1 FROM ${table.sql} AS o WHERE o.prefix = $1 AND o.${id} = substr(s.${id}, length($1) + 1))`,
        [stored, lo, hi],
      )
      .then(() => undefined);
    byKey.set(key, claim);
    claim.catch(() => byKey.delete(key));
  }
  return claim;
}
