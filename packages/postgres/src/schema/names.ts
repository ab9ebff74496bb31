import { createHash } from 'node:crypto';
import { StowageError } from '@stowage/core';
import { describeValue } from '@stowage/core/adapter';

/*
 * The names of stowage's tables: which tables there are, their default names, and how a name
 * is checked and quoted. Imported by the options and the wake-ups too, so it imports nothing
 * of the package.
 */

/** The tables stowage creates. */
export type TableKind =
  | 'kv'
  | 'snapshots'
  | 'workflowLocks'
  | 'locks'
  | 'cache'
  | 'circuitBreaker'
  | 'checkpoints'
  | 'idempotency'
  | 'processItems'
  | 'processTransitions';

export const DEFAULT_TABLE_NAMES: Readonly<Record<TableKind, string>> = {
  kv: 'awaitly_workflow_state',
  snapshots: 'awaitly_snapshots',
  /** The leases of a snapshot store created with `lock` (awaitly's `WorkflowLock`). */
  workflowLocks: 'awaitly_workflow_locks',
  locks: 'stowage_locks',
  cache: 'stowage_cache',
  circuitBreaker: 'stowage_circuit_breakers',
  checkpoints: 'stowage_checkpoints',
  idempotency: 'stowage_idempotency',
  processItems: 'stowage_process_items',
  processTransitions: 'stowage_process_transitions',
};

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/**
 * Throws `E_INVALID_OPTION` unless `name` is a plain SQL identifier: a letter or `_`, then
 * letters, digits or `_`, at most 63 characters. Names are also always quoted in SQL, so
 * upper-case letters are kept as written.
 */
export function assertValidIdentifier(name: unknown, what: string): asserts name is string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `${what} must match ${IDENTIFIER.source} (letters, digits, _; at most 63), got ${describeValue(name)}`,
    );
  }
}

/** Like {@link assertValidIdentifier}; also refuses `pg_…`, which PostgreSQL reserves for system schemas. */
export function assertValidSchemaName(name: unknown): asserts name is string {
  assertValidIdentifier(name, 'schema');
  if (name.toLowerCase().startsWith('pg_')) {
    throw new StowageError('E_INVALID_OPTION', `schema must not start with "pg_" (reserved for system schemas), got ${describeValue(name)}`);
  }
}

export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** A table, optionally in a schema. */
export class TableName {
  readonly schema: string | undefined;
  readonly table: string;

  constructor(table: string, schema?: string) {
    assertValidIdentifier(table, 'table');
    if (schema !== undefined) assertValidSchemaName(schema);
    else if (table.toLowerCase().startsWith('pg_')) {
      // pg_catalog comes first in every search_path: "pg_class" would be the system catalog.
      throw new StowageError('E_INVALID_OPTION', `a table named "pg_…" needs a schema (unqualified, it names a system catalog), got ${describeValue(table)}`);
    }
    this.table = table;
    this.schema = schema;
  }

  /** `"schema"."table"` or `"table"`, ready to paste into SQL. */
  get sql(): string {
    return this.qualify(this.table);
  }

  /** `schema.table` or `table`, unquoted: how telemetry names the table (`db.collection.name`). */
  get qualifiedName(): string {
    return this.schema === undefined ? this.table : `${this.schema}.${this.table}`;
  }

  /** A quoted, schema-qualified name for an object belonging to this table (index, sequence). */
  derived(suffix: string): string {
    return this.qualify(this.derivedName(suffix));
  }

  /** The quoted name without schema (index and constraint names take none). */
  derivedUnqualified(suffix: string): string {
    return quoteIdentifier(this.derivedName(suffix));
  }

  /** `table_suffix`, shortened with a hash when it would pass PostgreSQL's 63-byte identifier limit. */
  derivedName(suffix: string): string {
    const name = `${this.table}_${suffix}`;
    if (name.length <= 63) return name;
    const hash = createHash('sha256').update(this.table).digest('hex').slice(0, 8);
    return `${this.table.slice(0, 63 - suffix.length - hash.length - 2)}_${hash}_${suffix}`;
  }

  /** Identifies the table in texts such as NOTIFY channel names. */
  get key(): string {
    return this.schema === undefined ? this.table : `${this.schema}.${this.table}`;
  }

  private qualify(name: string): string {
    return this.schema === undefined ? quoteIdentifier(name) : `${quoteIdentifier(this.schema)}.${quoteIdentifier(name)}`;
  }
}
