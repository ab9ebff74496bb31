import { StowageError } from '@stowage/core';
import { adoptGoGoScopeTable, isGoGoScopeTable } from './adopt-go-go-scope.js';
import { NOT_NULL_CHECK, isByteOrder, sameList, upgrade, type ColumnInfo, type Layout, type TableInfo } from './adopt-upgrade.js';
import type { PostgresConnection } from './connection/store-connection.js';
import type { PostgresPool } from './connection/types.js';
import { encodeText } from './key-encoding.js';
import type { TableKind, TableName } from './schema/names.js';
import { tableColumns } from './schema/tables.js';
import { keyRange } from './sql.js';

/*
 * Tables that exist before stowage starts, looked at once per pool when a store starts (with
 * `autoCreate`). Stowage's own tables are used as they are. Tables written by awaitly-postgres
 * (the key-value table `awaitly_workflow_state` and the snapshot table `awaitly_snapshots`) are
 * upgraded in place, once (adopt-upgrade.ts): what stowage needs is added and every row stays,
 * with its meaning. go-go-scope's own tables are converted where goGoScopePersistence opens
 * them (adopt-go-go-scope.ts). Any other layout is refused with `E_INVALID_OPTION` naming
 * what stowage does not recognise, before anything is changed.
 */

/** What start-up found: whether an adopted snapshot table may still hold rows of awaitly's layout. */
export interface AdoptedTable {
  adopted: boolean;
}

const adoptions = new WeakMap<PostgresPool, Map<string, Promise<AdoptedTable>>>();
const claims = new WeakMap<PostgresPool, Map<string, Promise<void>>>();
const idColumns = new WeakMap<PostgresPool, Map<string, Promise<string>>>();

/** The key column of an adopted snapshot table (see the `snapshots` layout). */
const ADOPTED_SNAPSHOT_ID = 'snapshot_id';

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

async function adoptTable(connection: PostgresConnection, kind: TableKind, table: TableName, found: TableInfo | undefined): Promise<AdoptedTable> {
  if (found === undefined) return { adopted: false };
  const layout = LAYOUTS[kind as keyof typeof LAYOUTS];
  if (layout === undefined) {
    // go-go-scope's own tables, where goGoScopePersistence opens them (adopt-go-go-scope.ts).
    if (await adoptGoGoScopeTable(connection, kind, table, found)) return { adopted: true };
    assertStowageColumns(kind, table, found);
    return { adopted: false };
  }
  // Tables stowage created have no default on `version`; legacy rows of adopted ones take 1.
  const adopted = found.columns.get('version')?.default === '1';
  if (!adopted && isNative(layout, found)) return { adopted: false };
  const info = underLegacyNames(layout, found);
  const renamed = Object.values(layout.renames).every((name) => found.columns.has(name));
  if (!renamed || !isNative(layout, info)) {
    assertKnownLayout(layout, table, info);
    assertNoDependents(layout, info);
    await upgrade(connection, layout, table, info);
  }
  return { adopted: true };
}

/**
 * `info` with the columns an upgrade renamed under their legacy names, so that a table is
 * checked alike before and after the rename (see {@link Layout.renames}).
 */
function underLegacyNames(layout: Layout, info: TableInfo): TableInfo {
  const legacyName = new Map(Object.entries(layout.renames).map(([legacy, renamed]) => [renamed, legacy]));
  const rename = (name: string) => (legacyName.has(name) && !info.columns.has(legacyName.get(name)!) ? legacyName.get(name)! : name);
  return {
    ...info,
    columns: new Map([...info.columns].map(([name, column]) => [rename(name), { ...column, name: rename(name) }])),
    primaryKey: info.primaryKey.map(rename),
  };
}

// --- layouts ------------------------------------------------------------------------------------

const TEXT = ['text'];
const TIMESTAMPTZ = ['timestamp with time zone'];
const BIGINT = ['bigint'];

const LAYOUTS: Partial<Record<TableKind, Layout>> = {
  kv: {
    kind: 'kv',
    renames: {},
    legacy: { key: TEXT, value: TEXT, expires_at: ['timestamp without time zone', ...TIMESTAMPTZ] },
    optional: { updated_at: TIMESTAMPTZ },
    added: { version: BIGINT, updated_at: TIMESTAMPTZ },
    notNull: ['value', 'version', 'updated_at'],
    primaryKey: ['key'],
    describe: "awaitly-postgres's key-value table (key TEXT PRIMARY KEY, value TEXT, expires_at TIMESTAMP[, updated_at TIMESTAMPTZ])",
  },
  snapshots: {
    kind: 'snapshots',
    // awaitly-postgres selects, lists and deletes by `id` alone (`DELETE … WHERE id = $1`): once
    // each prefix keeps its rows under their own id, such a statement of a process still running
    // it would reach every prefix's rows. Under another name, every statement of it fails (42703).
    renames: { id: ADOPTED_SNAPSHOT_ID },
    legacy: { id: TEXT, snapshot: ['json', 'jsonb'], updated_at: TIMESTAMPTZ },
    optional: {},
    added: { prefix: TEXT, version: BIGINT },
    notNull: ['snapshot', 'version', 'updated_at', 'prefix'],
    primaryKey: ['prefix', 'id'],
    describe: "awaitly-postgres's snapshot table (id TEXT PRIMARY KEY, snapshot JSONB NOT NULL, updated_at TIMESTAMPTZ)",
  },
};

/** The table is stowage's layout, complete (created by stowage, or fully adopted), under stowage's column names. */
function isNative(layout: Layout, info: TableInfo): boolean {
  const types = { ...layout.legacy, ...layout.added, expires_at: TIMESTAMPTZ };
  const columns = [...tableColumns(layout.kind).keys()];
  return (
    columns.every((name) => {
      const column = info.columns.get(name);
      return column !== undefined && (types[name as keyof typeof types] ?? [column.type]).includes(column.type);
    }) &&
    layout.notNull.every((name) => info.columns.get(name)!.notNull) &&
    sameList(info.primaryKey, layout.primaryKey) &&
    layout.primaryKey.every((name) => isByteOrder(info.columns.get(name), info)) &&
    !info.checks.some((check) => check.endsWith(NOT_NULL_CHECK))
  );
}

/** `E_INVALID_OPTION` unless the table's columns are those of the legacy layout (plus what an earlier upgrade added). */
function assertKnownLayout(layout: Layout, table: TableName, info: TableInfo): void {
  const accepted = { ...layout.legacy, ...layout.optional, ...layout.added };
  const unknown = [...info.columns.keys()].filter((name) => !(name in accepted));
  const missing = Object.keys(layout.legacy).filter((name) => !info.columns.has(name));
  const wrongTypes = [...info.columns.values()]
    .filter((column) => column.name in accepted && !accepted[column.name]!.includes(column.type))
    .map((column) => `${column.name} is ${column.type} (expected ${accepted[column.name]!.join(' or ')})`);
  const legacyKey = layout.primaryKey.filter((name) => name in layout.legacy);
  const keyProblem =
    sameList(info.primaryKey, legacyKey) || sameList(info.primaryKey, layout.primaryKey) ? [] : [`its primary key is (${info.primaryKey.join(', ')})`];
  const problems = [
    ...(unknown.length > 0 ? [`unrecognised column(s) ${unknown.join(', ')}`] : []),
    ...(missing.length > 0 ? [`no column(s) ${missing.join(', ')}`] : []),
    ...wrongTypes,
    ...keyProblem,
  ];
  if (problems.length > 0) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `table ${info.name} has a layout stowage does not know: ${problems.join('; ')}. ` +
        `Stowage uses its own layout (see schemaSql()) and adopts ${layout.describe}; give the store another table`,
    );
  }
}

/**
 * `E_INVALID_OPTION` when views or other tables' foreign keys rest on the table: the upgrade
 * converts columns they read and replaces the primary key they reference, which PostgreSQL
 * refuses half-way (after columns were added). Checked before anything changes.
 */
function assertNoDependents(layout: Layout, info: TableInfo): void {
  if (info.dependents.length === 0) return;
  throw new StowageError(
    'E_INVALID_OPTION',
    `table ${info.name} is ${layout.describe}, and stowage would upgrade it in place, but ${info.dependents.join(', ')} ` +
      `depend${info.dependents.length === 1 ? 's' : ''} on it (the upgrade converts its key column and replaces its primary key). ` +
      'Nothing was changed. Drop them, start the store once, then create them again (see the README on adopting tables); or give the store another table',
  );
}

/**
 * For kinds stowage has no legacy layout for: `E_INVALID_OPTION` unless every column of stowage's
 * layout is there, of its type (other columns of yours are fine).
 */
function assertStowageColumns(kind: TableKind, table: TableName, info: TableInfo): void {
  const expected = tableColumns(kind);
  const missing = [...expected.keys()].filter((name) => !info.columns.has(name));
  const wrongTypes = [...expected]
    .filter(([name, type]) => info.columns.has(name) && info.columns.get(name)!.type !== type)
    .map(([name, type]) => `${name} is ${info.columns.get(name)!.type} (stowage's is ${type})`);
  if (missing.length === 0 && wrongTypes.length === 0) return;
  const hint = isAwaitlyLeaseTable(info)
    ? ": it is awaitly-postgres's lock table, which only holds leases; give stowage another lockTableName, or drop it while no workflow runs"
    : isGoGoScopeTable(kind, info)
      ? ": it is a table of go-go-scope's own PostgreSQL adapters, which stowage adopts only through goGoScopePersistence " +
        "(see the README on go-go-scope's own tables)"
      : ': give the store another table';
  const problems = [...(missing.length > 0 ? [`no column(s) ${missing.join(', ')}`] : []), ...wrongTypes];
  throw new StowageError(
    'E_INVALID_OPTION',
    `table ${info.name} has a layout stowage does not know for ${kind}: ${problems.join('; ')} ` +
      `(it has ${[...info.columns.keys()].join(', ')})${hint}`,
  );
}

function isAwaitlyLeaseTable(info: TableInfo): boolean {
  return ['workflow_id', 'owner_token', 'expires_at'].every((name) => info.columns.has(name));
}

// --- inspection -----------------------------------------------------------------------------

/**
 * One catalog query for every table of a store: columns, primary key, check constraints. The
 * names are literals (quoted identifiers, validated: no `'` in them), so this start-up query is
 * not kept as a prepared statement on every connection.
 */
async function inspect(connection: PostgresConnection, tables: readonly TableName[]): Promise<Map<string, TableInfo>> {
  const { rows } = await connection.query(INSPECT.replace('$1', literalArray(tables.map((table) => table.sql))));
  const infos = new Map<string, TableInfo>();
  for (const row of rows as { name: string; columns: ColumnInfo[]; primary_key: string[] | null; checks: string[]; dependents: string[]; byte_order: boolean }[]) {
    infos.set(row.name, {
      name: row.name,
      columns: new Map(row.columns.map((column) => [column.name, column])),
      primaryKey: row.primary_key ?? [],
      checks: row.checks,
      dependents: row.dependents,
      byteOrderDefault: row.byte_order === true,
    });
  }
  return infos;
}

/** `ARRAY['…', …]::text[]` of quoted identifiers (which cannot hold a `'`). */
function literalArray(names: readonly string[]): string {
  return `ARRAY[${names.map((name) => `'${name}'`).join(', ')}]`;
}

/**
 * `$1`: quoted, qualified table names. The database's default collation counts as byte order
 * for libc "C" and "POSIX" only (`datlocprovider` exists from PostgreSQL 15 on; the JSON form
 * reads it where it exists).
 */
const INSPECT = `SELECT t.name,
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
  (SELECT coalesce(json_agg(DISTINCT x.what), '[]') FROM (
      SELECT 'view ' || v.oid::regclass::text FROM pg_depend dep JOIN pg_rewrite r ON r.oid = dep.objid JOIN pg_class v ON v.oid = r.ev_class
        WHERE dep.classid = 'pg_rewrite'::regclass AND dep.refclassid = 'pg_class'::regclass AND dep.refobjid = c.oid AND v.oid <> c.oid
      UNION ALL
      SELECT 'foreign key ' || quote_ident(f.conname) || ' of ' || f.conrelid::regclass::text FROM pg_constraint f
        WHERE f.confrelid = c.oid AND f.contype = 'f') AS x(what)) AS dependents,
  (SELECT d.datcollate IN ('C', 'POSIX') AND coalesce(to_jsonb(d) ->> 'datlocprovider', 'c') = 'c'
    FROM pg_database d WHERE d.datname = current_database()) AS byte_order
FROM unnest($1::text[]) AS t(name)
JOIN pg_class c ON c.oid = to_regclass(t.name) AND c.relkind IN ('r', 'p')`;

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
