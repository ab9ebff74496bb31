import { loadPeer } from '../peers.js';
import type { PgSession } from './connection.js';

/*
 * What the existing tables are, compared with the layout @stowage/postgres uses (its
 * `tableDdl()`): stowage's own, awaitly-postgres's (adopted in place on a store's first start),
 * or one stowage refuses. `doctor` and `adopt` both read it.
 */

export interface Column {
  name: string;
  type: string;
  notNull: boolean;
  collation: string | null;
}

export interface TableState {
  kind: string;
  /** Quoted, qualified name. */
  name: string;
  columns: Map<string, Column>;
  primaryKey: string[];
  indexes: string[];
  /** Catalog estimates (`pg_class.reltuples`, `relpages`). */
  rows: number;
  pages: number;
  /** The role we are connected as may change the table (owner, or member of the owner role). */
  ownedByUs: boolean;
  /** The database sorts text by bytes by default (libc "C"/"POSIX"). */
  byteOrderDefault: boolean;
  verdict: 'stowage' | 'awaitly' | 'refused';
  /** For `refused`: what is wrong. */
  reason?: string;
}

/** Table kinds whose awaitly-postgres layout stowage upgrades in place. */
export const ADOPTABLE = new Set(['kv', 'snapshots']);
const AWAITLY_COLUMNS: Record<string, string[]> = { kv: ['key', 'value', 'expires_at'], snapshots: ['id', 'snapshot', 'updated_at'] };
const PRIMARY_KEYS: Record<string, string[]> = { kv: ['key'], snapshots: ['prefix', 'id'] };

/** The column names of a kind of table as `tableDdl()` of @stowage/postgres declares them. */
async function stowageColumns(kind: string): Promise<string[]> {
  const adapter = await loadPeer<typeof import('@stowage/postgres')>('@stowage/postgres');
  const create = adapter.tableDdl(kind as never, new adapter.TableName('t')).find((statement) => statement.startsWith('CREATE TABLE'))!;
  return [...create.matchAll(/^ {2}"?([a-z_]+)"? [A-Z]/gm)].map((match) => match[1]!);
}

const CATALOG = `SELECT t.kind, t.name, c.reltuples::float8 AS rows, c.relpages::float8 AS pages,
  pg_has_role(c.relowner, 'USAGE') AS owned,
  (SELECT d.datcollate IN ('C', 'POSIX') FROM pg_database d WHERE d.datname = current_database()) AS byte_order,
  (SELECT json_agg(json_build_object('name', a.attname, 'type', format_type(a.atttypid, a.atttypmod), 'notNull', a.attnotnull, 'collation', co.collname) ORDER BY a.attnum)
     FROM pg_attribute a LEFT JOIN pg_collation co ON co.oid = a.attcollation
     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
  (SELECT coalesce(json_agg(a.attname ORDER BY k.n), '[]') FROM pg_constraint p, unnest(p.conkey) WITH ORDINALITY AS k(attnum, n)
     JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum WHERE p.conrelid = c.oid AND p.contype = 'p') AS primary_key,
  (SELECT coalesce(json_agg(i.relname::text), '[]') FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid) AS indexes
FROM unnest($1::text[], $2::text[]) AS t(kind, name)
JOIN pg_class c ON c.oid = to_regclass(t.name) AND c.relkind IN ('r', 'p')`;

/** The existing tables among `tables` (kind -> quoted name), each with its verdict. */
export async function readTables(session: PgSession, tables: Record<string, string>): Promise<TableState[]> {
  const entries = Object.entries(tables);
  const rows = await session.read<{
    kind: string; name: string; rows: number; pages: number; owned: boolean; byte_order: boolean;
    columns: Column[]; primary_key: string[]; indexes: string[];
  }>(CATALOG, [entries.map(([kind]) => kind), entries.map(([, name]) => name)]);
  const states: TableState[] = [];
  for (const row of rows) {
    const state: TableState = {
      kind: row.kind,
      name: row.name,
      columns: new Map(row.columns.map((column) => [column.name, column])),
      primaryKey: row.primary_key,
      indexes: row.indexes,
      rows: Math.max(0, row.rows),
      pages: row.pages,
      ownedByUs: row.owned,
      byteOrderDefault: row.byte_order,
      verdict: 'stowage',
    };
    await judge(state);
    states.push(state);
  }
  return states;
}

async function judge(state: TableState): Promise<void> {
  const kind = state.kind.replace(/^goGoScope:/, '');
  // Adoption renames an awaitly-postgres snapshot table's `id` to `snapshot_id` (first of all
  // its changes), so that old awaitly-postgres statements fail instead of reaching every prefix.
  const renamed = kind === 'snapshots' && state.columns.has('snapshot_id') && !state.columns.has('id');
  const column = (name: string) => (renamed && name === 'id' ? 'snapshot_id' : name);
  const expected = (await stowageColumns(kind)).map(column);
  const missing = expected.filter((name) => !state.columns.has(name));
  const primaryKey = PRIMARY_KEYS[kind]?.map(column);
  const keyDiffers = primaryKey !== undefined && state.primaryKey.join(',') !== primaryKey.join(',');
  if (missing.length === 0 && !keyDiffers) return;
  if (ADOPTABLE.has(kind) && AWAITLY_COLUMNS[kind]!.map(column).every((name) => state.columns.has(name))) {
    state.verdict = 'awaitly';
    return;
  }
  state.verdict = 'refused';
  const lease = ['workflow_id', 'owner_token', 'expires_at'].every((name) => state.columns.has(name));
  state.reason = lease
    ? "awaitly-postgres's lock table (workflow_id, owner_token, expires_at) holds only leases: stowage refuses it; give `lock` another lockTableName, or drop it while no workflow runs"
    : `stowage refuses this layout for ${kind}: no column(s) ${missing.join(', ') || '-'}${keyDiffers ? `, primary key (${state.primaryKey.join(', ')})` : ''} (it has ${[...state.columns.keys()].join(', ')})`;
}
