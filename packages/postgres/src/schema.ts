import { createHash } from 'node:crypto';
import { StowageError, describeValue } from '@stowage/core';
import type { PostgresConnection, PostgresPool } from './connection.js';
import { sqlState } from './errors.js';

/** The tables stowage creates, one per contract. */
export type TableKind = 'kv' | 'snapshots' | 'locks' | 'cache' | 'circuitBreaker' | 'checkpoints' | 'idempotency';

export const DEFAULT_TABLE_NAMES: Readonly<Record<TableKind, string>> = {
  kv: 'awaitly_workflow_state',
  snapshots: 'awaitly_snapshots',
  locks: 'stowage_locks',
  cache: 'stowage_cache',
  circuitBreaker: 'stowage_circuit_breakers',
  checkpoints: 'stowage_checkpoints',
  idempotency: 'stowage_idempotency',
};

/** The lock table of a snapshot store created with `lock: {}` (same layout as `locks`). */
export const DEFAULT_WORKFLOW_LOCK_TABLE = 'awaitly_workflow_locks';

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
    this.table = table;
    this.schema = schema;
  }

  /** `"schema"."table"` or `"table"`, ready to paste into SQL. */
  get sql(): string {
    return this.qualify(this.table);
  }

  /** A quoted, schema-qualified name for an object belonging to this table (index, sequence). */
  derived(suffix: string): string {
    return this.qualify(derivedName(this.table, suffix));
  }

  /** The quoted name without schema (index names take none in CREATE INDEX). */
  derivedUnqualified(suffix: string): string {
    return quoteIdentifier(derivedName(this.table, suffix));
  }

  /** Identifies the table in texts such as NOTIFY channel names. */
  get key(): string {
    return this.schema === undefined ? this.table : `${this.schema}.${this.table}`;
  }

  private qualify(name: string): string {
    return this.schema === undefined ? quoteIdentifier(name) : `${quoteIdentifier(this.schema)}.${quoteIdentifier(name)}`;
  }
}

/** `table_suffix`, shortened with a hash when it would pass Postgres's 63-byte identifier limit. */
function derivedName(table: string, suffix: string): string {
  const name = `${table}_${suffix}`;
  if (name.length <= 63) return name;
  const hash = createHash('sha256').update(table).digest('hex').slice(0, 8);
  return `${table.slice(0, 63 - suffix.length - hash.length - 2)}_${hash}_${suffix}`;
}

/** The DDL of one table, as separate statements. Every statement is idempotent (IF NOT EXISTS). */
export function tableDdl(kind: TableKind, name: TableName): string[] {
  const t = name.sql;
  const expiresIndex = `CREATE INDEX IF NOT EXISTS ${name.derivedUnqualified('expires_at_idx')} ON ${t} (expires_at) WHERE expires_at IS NOT NULL`;
  switch (kind) {
    case 'kv':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  value TEXT NOT NULL,
  version BIGINT NOT NULL DEFAULT 1,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now()),
  expires_at TIMESTAMPTZ
)`,
        expiresIndex,
      ];
    case 'snapshots':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  snapshot JSON NOT NULL,
  version BIGINT NOT NULL DEFAULT 1,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now())
)`,
        `CREATE INDEX IF NOT EXISTS ${name.derivedUnqualified('updated_at_idx')} ON ${t} (updated_at DESC, id)`,
      ];
    case 'locks':
      return [
        `CREATE SEQUENCE IF NOT EXISTS ${name.derived('fence_seq')} AS BIGINT`,
        `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  owner TEXT NOT NULL,
  fence BIGINT NOT NULL,
  acquired_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ NOT NULL
)`,
        `CREATE INDEX IF NOT EXISTS ${name.derivedUnqualified('expires_at_idx')} ON ${t} (expires_at)`,
      ];
    case 'cache':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  value TEXT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ
)`,
        expiresIndex,
      ];
    case 'circuitBreaker':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  state TEXT NOT NULL CHECK (state IN ('closed', 'open', 'half-open')),
  failure_count INTEGER NOT NULL DEFAULT 0,
  last_failure_time TIMESTAMPTZ,
  last_success_time TIMESTAMPTZ,
  open_until TIMESTAMPTZ,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`,
      ];
    case 'checkpoints':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  id TEXT NOT NULL PRIMARY KEY,
  task_id TEXT COLLATE "C" NOT NULL,
  sequence BIGINT NOT NULL,
  "timestamp" TIMESTAMPTZ NOT NULL,
  progress DOUBLE PRECISION NOT NULL,
  data JSON NOT NULL,
  estimated_time_remaining DOUBLE PRECISION,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT ${name.derivedUnqualified('task_sequence_key')} UNIQUE (task_id, sequence)
)`,
      ];
    case 'idempotency':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  status TEXT NOT NULL CHECK (status IN ('in-flight', 'completed')),
  token TEXT,
  value TEXT,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ
)`,
        expiresIndex,
      ];
  }
}

export interface SchemaSqlOptions {
  /** Schema the tables live in (created if missing). Default: the connection's search_path. */
  schema?: string;
  /** Table names to use instead of the defaults ({@link DEFAULT_TABLE_NAMES}). */
  tables?: Partial<Record<TableKind, string>>;
  /** Only these tables (default: all). */
  only?: TableKind[];
}

/**
 * The exact DDL stowage runs when `autoCreate` is on, for migration tools. Every statement is
 * idempotent. Without `only`, it covers every table with its default or given name.
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

function createSchemaStatement(schema: string): string {
  assertValidSchemaName(schema);
  return `CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(schema)}`;
}

/** The DDL for one store's tables, schema first when one is given. */
export function storeDdl(tables: ReadonlyArray<readonly [TableKind, TableName]>): string[] {
  const statements: string[] = [];
  const schemas = new Set(tables.map(([, name]) => name.schema).filter((schema) => schema !== undefined));
  for (const schema of schemas) statements.push(createSchemaStatement(schema));
  for (const [kind, name] of tables) statements.push(...tableDdl(kind, name));
  return statements;
}

const created = new WeakMap<PostgresPool, Map<string, Promise<void>>>();

/**
 * Runs `statements` once per pool and process. All of them travel in one round trip, as one
 * implicit transaction that first takes a transaction-scoped advisory lock, so ten processes
 * starting at once create each object exactly once and the rest wait, then find it there.
 * Nothing is held across statements, which keeps this safe behind PgBouncer in
 * transaction mode.
 */
export function ensureSchema(connection: PostgresConnection, statements: string[]): Promise<void> {
  let byText = created.get(connection.pool);
  if (!byText) created.set(connection.pool, (byText = new Map()));
  const text = ["SELECT pg_advisory_xact_lock(hashtext('stowage schema'))", ...statements].join(';\n');
  let done = byText.get(text);
  if (!done) {
    done = runDdl(connection, text);
    byText.set(text, done);
    // A failed attempt (server down) is retried by the next caller.
    done.catch(() => byText.delete(text));
  }
  return done;
}

async function runDdl(connection: PostgresConnection, text: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await connection.query(text);
      return;
    } catch (error) {
      // Someone creating the same objects without the advisory lock (another tool, an older
      // stowage) can still race us: the object exists now, so another pass succeeds.
      const state = sqlState(error) ?? sqlState((error as { cause?: unknown }).cause);
      if (attempt < 3 && (state === '42P07' || state === '23505' || state === '42710')) continue;
      throw error;
    }
  }
}
