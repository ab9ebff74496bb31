import { StowageError } from '@stowage/core';
import { describeValue } from '@stowage/core/adapter';
import { createSchemaStatement, tableDdl } from './ddl.js';
import { DEFAULT_TABLE_NAMES, TableName, assertValidSchemaName, quoteIdentifier, type TableKind } from './names.js';
import { SEQUENCES } from './tables.js';

/*
 * The SQL stowage prints for migration tools and DBAs, in plain SQL: the schema
 * (`schemaSql()`) and the grants of the role the stores run as (`grantsSql()`).
 */

export interface SchemaSqlOptions {
  /** Schema the tables live in (created if missing). Default: the connection's search_path. */
  schema?: string;
  /** Table names to use instead of the defaults ({@link DEFAULT_TABLE_NAMES}). */
  tables?: Partial<Record<TableKind, string>>;
  /** Only these tables (default: all). */
  only?: TableKind[];
}

/**
 * The DDL stowage runs when `autoCreate` is on, for migration tools: every table the package
 * can create (process tables included), each statement idempotent, in plain SQL. (A store runs
 * the same statements, but creates a sequence only together with its table: see
 * `sequenceDdl` in ddl.ts.) Without `only`, it covers every table with its default or given name.
 */
export function schemaSql(options: SchemaSqlOptions = {}): string {
  const kinds = options.only ?? (Object.keys(DEFAULT_TABLE_NAMES) as TableKind[]);
  const statements: string[] = [];
  if (options.schema !== undefined) statements.push(createSchemaStatement(options.schema));
  for (const kind of kinds) {
    const table = new TableName(options.tables?.[kind] ?? DEFAULT_TABLE_NAMES[kind], options.schema);
    statements.push(...tableDdl(kind, table));
  }
  return statements.map((statement) => `${statement};\n`).join('\n');
}

/** What each kind of table needs granted: stowage reads, writes and deletes rows, and never changes a table. */
const TABLE_PRIVILEGES: Record<TableKind, string> = {
  kv: 'SELECT, INSERT, UPDATE, DELETE',
  snapshots: 'SELECT, INSERT, UPDATE, DELETE',
  workflowLocks: 'SELECT, INSERT, UPDATE, DELETE',
  locks: 'SELECT, INSERT, UPDATE, DELETE',
  cache: 'SELECT, INSERT, UPDATE, DELETE',
  circuitBreaker: 'SELECT, INSERT, UPDATE, DELETE',
  checkpoints: 'SELECT, INSERT, UPDATE, DELETE',
  idempotency: 'SELECT, INSERT, UPDATE, DELETE',
  processItems: 'SELECT, INSERT, UPDATE',
  // The log is appended to, read, and trimmed by historyRetention (its identity column needs no grant on its sequence).
  processTransitions: 'SELECT, INSERT, DELETE',
};

/**
 * The `GRANT`s a role needs to run the stores on tables created from {@link schemaSql} (same
 * options) by another role, with `autoCreate: false` or with the tables already there: `USAGE`
 * on the schema, the row privileges on each table, and `USAGE` on the sequences stowage
 * advances (`nextval`). Nothing else: no `CREATE`, no ownership.
 */
export function grantsSql(role: string, options: SchemaSqlOptions = {}): string {
  if (typeof role !== 'string' || role === '' || role.includes('\u0000') || Buffer.byteLength(role) > 63) {
    throw new StowageError('E_INVALID_OPTION', `role must be a role name (1 to 63 bytes, no U+0000), got ${describeValue(role)}`);
  }
  const grantee = quoteIdentifier(role);
  const kinds = options.only ?? (Object.keys(DEFAULT_TABLE_NAMES) as TableKind[]);
  const statements: string[] = [];
  if (options.schema !== undefined) {
    assertValidSchemaName(options.schema);
    statements.push(`GRANT USAGE ON SCHEMA ${quoteIdentifier(options.schema)} TO ${grantee}`);
  }
  for (const kind of kinds) {
    const table = new TableName(options.tables?.[kind] ?? DEFAULT_TABLE_NAMES[kind], options.schema);
    statements.push(`GRANT ${TABLE_PRIVILEGES[kind]} ON TABLE ${table.sql} TO ${grantee}`);
    const sequence = SEQUENCES[kind];
    if (sequence !== undefined) statements.push(`GRANT USAGE ON SEQUENCE ${table.derived(sequence)} TO ${grantee}`);
  }
  return statements.map((statement) => `${statement};\n`).join('');
}
