import type { TableAdoption, TableCatalogRow, TableKind } from '@stowage/postgres';
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

/** The tables among `tables` that exist, each with what a store starting on it does. */
export async function readTables(session: PgSession, tables: readonly TableRef[]): Promise<TableState[]> {
  // The catalog read and the judgement are @stowage/postgres's own: what a store starting on the table does.
  const { TABLE_CATALOG, existingTable, planTableAdoption } = await loadPeer<typeof import('@stowage/postgres')>('@stowage/postgres');
  const rows = await session.read<TableCatalogRow>(TABLE_CATALOG, [tables.map((table) => table.name)]);
  return rows.map((row) => {
    const table = tables[row.n - 1]!;
    return {
      ...table,
      rows: Math.max(0, row.rows),
      pages: row.pages,
      ownedByUs: row.owned,
      plan: planTableAdoption(table.kind, existingTable(row), { goGoScopePersistence: table.goGoScope }),
    };
  });
}
