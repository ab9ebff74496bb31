import { assertValidSchemaName, quoteIdentifier, type TableKind, type TableName } from './names.js';
import { SEQUENCES, TABLE_INDEXES, createTableSql } from './tables.js';

/*
 * The DDL stowage runs: a table's statements (sequence, table, indexes), a store's (its schema
 * and tables), as `schemaSql()` prints them or as a store runs them (see ensure.ts).
 */

/**
 * The DDL of one table, as separate statements. Every statement is idempotent (IF NOT
 * EXISTS): an existing table is left as it is, whatever its layout.
 *
 * Versions (key-value, snapshots) and fences (leases) come from a sequence of the table
 * (`<table>_version_seq`, `<table>_fence_seq`), not from the row: a sequence never goes back,
 * so a version is never reused for a key and a fence never repeats, also after rows are
 * deleted. `creating`: the statements a store runs itself, where the sequence is only ever
 * created together with its table (see {@link sequenceDdl}); otherwise plain SQL, for
 * `schemaSql()`.
 */
export function tableDdl(kind: TableKind, name: TableName, { creating = false, adopted = false }: { creating?: boolean; adopted?: boolean } = {}): string[] {
  const statements = [...tableOnlyDdl(kind, name, creating)];
  for (const [suffix, columns] of TABLE_INDEXES[kind]) {
    statements.push(`CREATE INDEX IF NOT EXISTS ${name.derivedUnqualified(suffix)} ON ${name.sql} ${indexColumns(kind, columns, adopted)}`);
  }
  return statements;
}

/**
 * An index's column list on a table of `kind`; `adopted`: on a snapshot table adopted from
 * awaitly-postgres, whose id column is `snapshot_id` (see adopt.ts). PostgreSQL resolves the
 * columns of `CREATE INDEX IF NOT EXISTS` even when the index exists.
 */
export function indexColumns(kind: TableKind, columns: string, adopted: boolean): string {
  return kind === 'snapshots' && adopted ? columns.replace(/\bid\b/, 'snapshot_id') : columns;
}

/**
 * A table's sequence: in `schemaSql()`, `CREATE SEQUENCE IF NOT EXISTS`. When a store creates
 * its tables (`creating`), the sequence is created only while its table does not exist yet:
 * created again beside a table that has rows, it would start at 1 and hand out versions or
 * fences already handed out (deleted rows took theirs with them, so no row says how far it had
 * gone). A table that exists without its sequence fails with {@link MISSING_SEQUENCE}
 * instead, and the store with `missingSequenceError` (ensure.ts). (A dropped table keeps its
 * sequence: the table alone is created again, and the sequence goes on.)
 */
function sequenceDdl(table: TableName, suffix: string, creating: boolean): string {
  const sequence = table.derived(suffix);
  const create = `CREATE SEQUENCE IF NOT EXISTS ${sequence} AS BIGINT`;
  if (!creating) return create;
  // Quoted identifiers hold no `'`: they go into literals as they are. (A view or sequence of
  // the table's name is no table: the statements on it fail with 42809 as before.)
  return `DO $$ BEGIN
  IF NOT ${isTable(`'${table.sql}'`)} THEN ${create};
  ELSIF to_regclass('${sequence}') IS NULL THEN RAISE EXCEPTION USING ERRCODE = '${MISSING_SEQUENCE}', MESSAGE = '${sequence}';
  END IF;
END $$`;
}

/** SQL: whether the relation named by the text `name` (SQL) exists and is a table. */
export function isTable(name: string): string {
  return `EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass(${name}) AND relkind IN ('r', 'p'))`;
}

/** SQLSTATE (stowage's own) of the store's DDL finding a table without its sequence; the message is the sequence's name. */
export const MISSING_SEQUENCE = 'SW001';

/** The sequence and table of a kind, without its secondary indexes. */
function tableOnlyDdl(kind: TableKind, name: TableName, creating = false): string[] {
  const sequence = SEQUENCES[kind];
  return sequence === undefined ? [createTableSql(kind, name)] : [sequenceDdl(name, sequence, creating), createTableSql(kind, name)];
}

/** `CREATE SCHEMA IF NOT EXISTS` of `schema`, checked (`E_INVALID_OPTION` for a name stowage does not take). */
export function createSchemaStatement(schema: string): string {
  assertValidSchemaName(schema);
  return `CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(schema)}`;
}

/**
 * The DDL for one store's tables, schema first when one is given; `creating`: see
 * {@link tableDdl}; `adoptedSnapshots`: the snapshot tables (quoted, qualified) adopted from awaitly-postgres.
 */
export function storeDdl(
  tables: ReadonlyArray<readonly [TableKind, TableName]>,
  { creating = false, adoptedSnapshots }: { creating?: boolean; adoptedSnapshots?: ReadonlySet<string> } = {},
): string[] {
  const statements: string[] = [];
  const schemas = new Set(tables.map(([, name]) => name.schema).filter((schema) => schema !== undefined));
  for (const schema of schemas) statements.push(createSchemaStatement(schema));
  for (const [kind, name] of tables) statements.push(...tableDdl(kind, name, { creating, adopted: adoptedSnapshots?.has(name.sql) === true }));
  return statements;
}

/** The tables and sequences a store's statements use (quoted, qualified names), without which it cannot run. */
export function storeObjects(tables: ReadonlyArray<readonly [TableKind, TableName]>): string[] {
  return tables.flatMap(([kind, name]) => {
    const sequence = SEQUENCES[kind];
    return sequence === undefined ? [name.sql] : [name.sql, name.derived(sequence)];
  });
}
