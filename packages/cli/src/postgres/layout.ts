import type { ExistingColumn, TableAdoption, TableKind } from '@stowage/postgres';
import { loadPeer } from '../peers.js';
import type { PgSession } from './connection.js';

/*
 * What the existing tables are, as @stowage/postgres itself judges them when a store starts
 * (its `planTableAdoption()`, given the catalog rows read here): stowage's own, awaitly-postgres's
 * (upgraded in place by the store), go-go-scope's own (converted in place by
 * goGoScopePersistence), or one stowage refuses. `doctor` and `adopt` both read it.
 */

/** A table a store would use: its kind, its quoted name, and whether goGoScopePersistence opens it. */
export interface TableRef {
  kind: TableKind;
  /** Quoted, qualified name. */
  name: string;
  goGoScope: boolean;
  /** For go-go-scope's tables: the slot of goGoScopePersistence (`lock`, `cache`, …). */
  slot?: string;
}

export interface TableState extends TableRef {
  /** Catalog estimates (`pg_class.reltuples`, `relpages`). */
  rows: number;
  pages: number;
  /** The role we are connected as may change the table (owner, or member of the owner role). */
  ownedByUs: boolean;
  /** What a store starting on it does, in @stowage/postgres's words. */
  plan: TableAdoption;
}

/** go-go-scope's slots, which goGoScopePersistence puts on go-go-scope's table names, and the kind of store on each. */
const GO_GO_SCOPE_KINDS: Record<string, TableKind> = { lock: 'locks', circuitBreaker: 'circuitBreaker', cache: 'cache', idempotency: 'idempotency', checkpoint: 'checkpoints' };

/**
 * Every table the stores would use: stowage's (the session's names) and goGoScopePersistence's
 * (go-go-scope's own names). A name both use counts as goGoScopePersistence's.
 */
export async function storeTables(session: PgSession, schema: string | undefined): Promise<TableRef[]> {
  const { GO_GO_SCOPE_NAMES } = await loadPeer<typeof import('@stowage/core/go-go-scope')>('@stowage/core/go-go-scope');
  const adapter = await loadPeer<typeof import('@stowage/postgres')>('@stowage/postgres');
  const goGoScope: TableRef[] = Object.entries(GO_GO_SCOPE_KINDS).map(([slot, kind]) => ({
    kind,
    name: new adapter.TableName(GO_GO_SCOPE_NAMES[slot as keyof typeof GO_GO_SCOPE_NAMES], schema).sql,
    goGoScope: true,
    slot,
  }));
  const own: TableRef[] = Object.entries(session.tables)
    .map(([kind, name]) => ({ kind: kind as TableKind, name: name!, goGoScope: false }))
    .filter((table) => !goGoScope.some((other) => other.name === table.name));
  return [...own, ...goGoScope];
}

const CATALOG = `SELECT t.n::int AS n, c.reltuples::float8 AS rows, c.relpages::float8 AS pages,
  pg_has_role(c.relowner, 'USAGE') AS owned,
  (SELECT d.datcollate IN ('C', 'POSIX') AND coalesce(to_jsonb(d) ->> 'datlocprovider', 'c') = 'c'
     FROM pg_database d WHERE d.datname = current_database()) AS byte_order,
  (SELECT json_agg(json_build_object('name', a.attname, 'type', format_type(a.atttypid, a.atttypmod), 'notNull', a.attnotnull,
       'collation', co.collname, 'default', pg_get_expr(d.adbin, d.adrelid)) ORDER BY a.attnum)
     FROM pg_attribute a
     LEFT JOIN pg_collation co ON co.oid = a.attcollation
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
  (SELECT coalesce(json_agg(a.attname ORDER BY k.n), '[]') FROM pg_constraint p, unnest(p.conkey) WITH ORDINALITY AS k(attnum, n)
     JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum WHERE p.conrelid = c.oid AND p.contype = 'p') AS primary_key,
  (SELECT coalesce(json_agg(p.conname), '[]') FROM pg_constraint p WHERE p.conrelid = c.oid AND p.contype = 'c') AS checks,
  (SELECT coalesce(json_agg(DISTINCT x.what), '[]') FROM (
      SELECT 'view ' || v.oid::regclass::text FROM pg_depend dep JOIN pg_rewrite r ON r.oid = dep.objid JOIN pg_class v ON v.oid = r.ev_class
        WHERE dep.classid = 'pg_rewrite'::regclass AND dep.refclassid = 'pg_class'::regclass AND dep.refobjid = c.oid AND v.oid <> c.oid
      UNION ALL
      SELECT 'foreign key ' || quote_ident(f.conname) || ' of ' || f.conrelid::regclass::text FROM pg_constraint f
        WHERE f.confrelid = c.oid AND f.contype = 'f') AS x(what)) AS dependents,
  (SELECT coalesce(json_agg(i.relname::text), '[]') FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid) AS indexes
FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n)
JOIN pg_class c ON c.oid = to_regclass(t.name) AND c.relkind IN ('r', 'p')
ORDER BY t.n`;

/** The tables among `tables` that exist, each with what a store starting on it does. */
export async function readTables(session: PgSession, tables: readonly TableRef[]): Promise<TableState[]> {
  const { planTableAdoption } = await loadPeer<typeof import('@stowage/postgres')>('@stowage/postgres');
  const rows = await session.read<{
    n: number; rows: number; pages: number; owned: boolean; byte_order: boolean;
    columns: ExistingColumn[]; primary_key: string[]; checks: string[]; dependents: string[]; indexes: string[];
  }>(CATALOG, [tables.map((table) => table.name)]);
  return rows.map((row) => {
    const table = tables[row.n - 1]!;
    const existing = {
      name: table.name,
      columns: row.columns,
      primaryKey: row.primary_key,
      checks: row.checks,
      dependents: row.dependents,
      indexes: row.indexes,
      byteOrderDefault: row.byte_order === true,
      pages: row.pages,
    };
    return {
      ...table,
      rows: Math.max(0, row.rows),
      pages: row.pages,
      ownedByUs: row.owned,
      plan: planTableAdoption(table.kind, existing, { goGoScopePersistence: table.goGoScope }),
    };
  });
}
