import { createHash } from 'node:crypto';
import { StowageError } from '@stowage/core';
import { describeValue } from '@stowage/core/adapter';
import { plannedEachCall, type PostgresConnection, type PostgresPool } from './connection.js';
import { INSUFFICIENT_PRIVILEGE, LOCK_NOT_AVAILABLE, READ_ONLY_TRANSACTION, sqlState } from './errors.js';

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
 * The secondary indexes of each kind of table: name suffix and column list. (Adopting an
 * existing table builds them with `CREATE INDEX CONCURRENTLY`, see adopt.ts.)
 */
export const TABLE_INDEXES: Readonly<Record<TableKind, ReadonlyArray<readonly [suffix: string, columns: string]>>> = {
  kv: [
    ['expires_at_idx', '(expires_at) WHERE expires_at IS NOT NULL'],
    // recentEntries: createStatePersistence lists workflow state newest first, a page at a time.
    ['recent_idx', '(updated_at DESC, key)'],
  ],
  snapshots: [['list_idx', '(prefix, updated_at DESC, id)']],
  locks: [['expires_at_idx', '(expires_at)']],
  workflowLocks: [['expires_at_idx', '(expires_at)']],
  cache: [['prefix_expires_at_idx', '(prefix, expires_at) WHERE expires_at IS NOT NULL']],
  circuitBreaker: [],
  checkpoints: [],
  idempotency: [['expires_at_idx', '(expires_at) WHERE expires_at IS NOT NULL']],
  processItems: [
    ['claimable_idx', '(process, state, lease_until)'],
    ['state_idx', '(process, state, id)'],
  ],
  processTransitions: [
    ['feed_idx', '(process, to_state, xid, seq)'],
    // historyRetention: the oldest rows first, without reading the rest of the log.
    ['at_idx', '(at)'],
  ],
};

/**
 * The columns of a kind of table as its `CREATE TABLE` declares them, each with its type as
 * PostgreSQL names it (`format_type`).
 */
export function tableColumns(kind: TableKind): Map<string, string> {
  const create = tableOnlyDdl(kind, new TableName('t')).find((statement) => statement.startsWith('CREATE TABLE'))!;
  // Column lines are indented two spaces and start with a lower-case name; constraints are upper case.
  const columns = [...create.matchAll(/^ {2}"?([a-z_]+)"? (DOUBLE PRECISION|[A-Z0-9]+)/gm)];
  return new Map(columns.map(([, name, type]) => [name!, TYPE_NAMES[type!] ?? type!.toLowerCase()]));
}

const TYPE_NAMES: Record<string, string> = { TIMESTAMPTZ: 'timestamp with time zone' };

/**
 * A table's sequence: in `schemaSql()`, `CREATE SEQUENCE IF NOT EXISTS`. When a store creates
 * its tables (`creating`), the sequence is created only while its table does not exist yet:
 * created again beside a table that has rows, it would start at 1 and hand out versions or
 * fences already handed out (deleted rows took theirs with them, so no row says how far it had
 * gone). A table that exists without its sequence fails with {@link MISSING_SEQUENCE}
 * instead, and the store with {@link missingSequenceError}. (A dropped table keeps its
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
function isTable(name: string): string {
  return `EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass(${name}) AND relkind IN ('r', 'p'))`;
}

/** SQLSTATE (stowage's own) of the store's DDL finding a table without its sequence; the message is the sequence's name. */
export const MISSING_SEQUENCE = 'SW001';

/**
 * `E_INVALID_OPTION` for a store whose table exists without its sequence (`sequence`, quoted
 * and qualified): stowage never creates it again (see {@link sequenceDdl}), and says how to.
 */
export function missingSequenceError(sequence: string, cause?: unknown): StowageError {
  const what = sequence.endsWith('_fence_seq"') ? 'fences' : 'versions';
  return new StowageError(
    'E_INVALID_OPTION',
    `sequence ${sequence} is missing while its table exists. It hands out the table's ${what}; created again from 1 it would ` +
      `repeat ${what} already handed out, so stowage does not create it. Create it again above every value it ever handed out: ` +
      `CREATE SEQUENCE ${sequence} AS BIGINT START WITH <its last value before it was dropped, plus 1> ` +
      `(max() of the table's column is not enough: deleted rows took theirs with them; when in doubt, start far above it), ` +
      `and grant USAGE on it again to the role stowage runs as (grantsSql())`,
    { cause },
  );
}

/**
 * The sequences of `tables` whose table exists without them (quoted, qualified names), for a
 * statement that met a missing relation.
 */
export async function missingSequences(connection: PostgresConnection, tables: ReadonlyArray<readonly [TableKind, TableName]>): Promise<string[]> {
  const pairs = tables.flatMap(([kind, name]) => {
    const suffix = SEQUENCES[kind];
    return suffix === undefined ? [] : [[name.sql, name.derived(suffix)] as const];
  });
  if (pairs.length === 0) return [];
  const { rows } = await connection.query(
    `SELECT s AS name FROM unnest($1::text[], $2::text[]) AS o(t, s) WHERE ${isTable('t')} AND to_regclass(s) IS NULL`,
    [pairs.map(([table]) => table), pairs.map(([, sequence]) => sequence)],
  );
  return rows.map((row: { name: string }) => row.name);
}

/** The sequence and table of a kind, without its secondary indexes. */
function tableOnlyDdl(kind: TableKind, name: TableName, creating = false): string[] {
  const t = name.sql;
  const sequence = (suffix: string) => sequenceDdl(name, suffix, creating);
  switch (kind) {
    case 'kv':
      return [
        sequence('version_seq'),
        `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  value TEXT NOT NULL,
  version BIGINT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now()),
  expires_at TIMESTAMPTZ
)`,
      ];
    case 'snapshots':
      return [
        sequence('version_seq'),
        `CREATE TABLE IF NOT EXISTS ${t} (
  prefix TEXT COLLATE "C" NOT NULL DEFAULT '',
  id TEXT COLLATE "C" NOT NULL,
  snapshot JSON NOT NULL,
  version BIGINT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now()),
  PRIMARY KEY (prefix, id)
)`,
      ];
    case 'locks':
    case 'workflowLocks':
      return [
        sequence('fence_seq'),
        `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  owner TEXT NOT NULL,
  fence BIGINT NOT NULL,
  acquired_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ NOT NULL
)`,
      ];
    case 'cache':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  prefix TEXT COLLATE "C" NOT NULL DEFAULT '',
  key TEXT COLLATE "C" NOT NULL,
  value TEXT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ,
  PRIMARY KEY (prefix, key)
)`,
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
  data TEXT NOT NULL,
  estimated_time_remaining DOUBLE PRECISION,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT ${name.derivedUnqualified(CHECKPOINT_SEQUENCE_CONSTRAINT)} UNIQUE (task_id, sequence)
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
      ];
    case 'processItems':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  process TEXT COLLATE "C" NOT NULL,
  id TEXT COLLATE "C" NOT NULL,
  state TEXT COLLATE "C" NOT NULL,
  data JSON NOT NULL,
  version BIGINT NOT NULL DEFAULT 1,
  attempts INTEGER NOT NULL DEFAULT 0,
  last_error TEXT,
  lease_owner TEXT,
  lease_until TIMESTAMPTZ,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (process, id)
)`,
      ];
    case 'processTransitions':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid XID8 NOT NULL DEFAULT pg_current_xact_id(),
  process TEXT COLLATE "C" NOT NULL,
  item_id TEXT COLLATE "C" NOT NULL,
  from_state TEXT COLLATE "C",
  to_state TEXT COLLATE "C" NOT NULL,
  version BIGINT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('create', 'advance', 'dead-letter')),
  idempotency_key TEXT,
  error TEXT,
  at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT ${name.derivedUnqualified('item_version_key')} UNIQUE (process, item_id, version)
)`,
      ];
  }
}

/** The unique constraint on a checkpoint's `(task_id, sequence)`, by which a conflict is told from a duplicate id. */
export const CHECKPOINT_SEQUENCE_CONSTRAINT = 'task_sequence_key';

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
 * {@link sequenceDdl}.) Without `only`, it covers every table with its default or given name.
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

/** The sequence each kind of table advances: versions of key-value entries and snapshots, fences of leases. */
const SEQUENCES: Partial<Record<TableKind, string>> = {
  kv: 'version_seq',
  snapshots: 'version_seq',
  locks: 'fence_seq',
  workflowLocks: 'fence_seq',
};

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

/** Every schema creation of the process is numbered, so a statement knows whether one started after it was sent. */
let creations = 0;

/** The number of the latest schema creation started in this process (see {@link ensureSchema}'s `newerThan`). */
export function latestCreation(): number {
  return creations;
}

const created = new WeakMap<PostgresPool, Map<string, { promise: Promise<void>; number: number }>>();

/**
 * Makes sure the store's `tables` exist, once per pool and process (`statements`: their DDL as
 * the store runs it, see {@link storeDdl}).
 *
 * Start-up on a schema that is already there takes no lock: one catalog read finds every
 * table, sequence and index, and nothing runs. (`CREATE INDEX IF NOT EXISTS` would take the
 * table's SHARE lock even for an index that exists, wait behind any transaction writing the
 * table, and make every writer queue behind it.)
 *
 * When something is missing, the statements travel in one round trip as one implicit
 * transaction that first takes a transaction-scoped advisory lock of each of the store's
 * tables (two processes creating the same table create it once; stores of other tables never
 * wait for it), under a {@link DDL_LOCK_TIMEOUT}: a statement that would queue behind a long
 * transaction gives up, so writers never queue behind it, and it is tried again after a pause.
 * When every try timed out but the tables and sequences exist (an index is missing on a busy
 * table), the store runs without the index, and the next start tries again. Nothing is held
 * across statements, which keeps this safe behind PgBouncer in transaction mode.
 *
 * A server that refuses the DDL because it is read-only (a standby, a failover target) or the
 * role may not create objects is fine as long as every table and sequence of the store
 * exists: then the store runs on them.
 *
 * `newerThan`: a statement sent after creation number `newerThan` found a table missing (it
 * was dropped under the store). The statements run again unless a creation started since
 * then, so the stores that saw it fail at the same time create it once.
 */
export function ensureSchema(
  connection: PostgresConnection,
  statements: string[],
  tables: ReadonlyArray<readonly [TableKind, TableName]>,
  newerThan?: number,
): Promise<void> {
  let byText = created.get(connection.pool);
  if (!byText) created.set(connection.pool, (byText = new Map()));
  const locks = [...new Set(tables.map(([, name]) => name.sql))].sort().map((table) => `pg_advisory_xact_lock(hashtext('stowage schema'), hashtext('${table}'))`);
  const text = [`SET LOCAL lock_timeout = ${DDL_LOCK_TIMEOUT}`, `SELECT ${locks.join(', ')}`, ...statements].join(';\n');
  const current = byText.get(text);
  if (current !== undefined && (newerThan === undefined || current.number > newerThan)) return current.promise;
  const entry = { promise: runDdl(connection, text, tables), number: ++creations };
  byText.set(text, entry);
  // A failed attempt (server down) is retried by the next caller.
  entry.promise.catch(() => {
    if (byText.get(text) === entry) byText.delete(text);
  });
  return entry.promise;
}

/** How long a statement of the store's DDL waits for a lock before it gives up (and is tried again). */
const DDL_LOCK_TIMEOUT = 1000;
/** How often the DDL is tried when it times out on a lock, with a pause of a quarter of {@link DDL_LOCK_TIMEOUT} between tries. */
const DDL_LOCK_ATTEMPTS = 3;

async function runDdl(connection: PostgresConnection, text: string, tables: ReadonlyArray<readonly [TableKind, TableName]>): Promise<void> {
  const objects = storeObjects(tables);
  if (await allExist(connection, [...objects, ...storeIndexes(tables)])) return;
  for (let attempt = 1; ; attempt++) {
    try {
      await connection.query(text);
      return;
    } catch (error) {
      // Someone creating the same objects without the advisory lock (another tool, an older
      // stowage) can still race us: the object exists now, so another pass succeeds. A deadlock
      // (40P01) with another process's adoption (its CREATE INDEX CONCURRENTLY waits for this
      // transaction, which waits for the table lock of `CREATE INDEX IF NOT EXISTS`) undid this
      // transaction: it goes again once the build is over.
      const state = sqlState(error) ?? sqlState((error as { cause?: unknown }).cause);
      if (state === MISSING_SEQUENCE) throw missingSequenceError((error as Error).message, error);
      if (attempt < 3 && (state === '42P07' || state === '23505' || state === '42710' || state === '40P01')) continue;
      if (state === LOCK_NOT_AVAILABLE) {
        if (attempt < DDL_LOCK_ATTEMPTS) {
          await new Promise((resolve) => setTimeout(resolve, DDL_LOCK_TIMEOUT / 4));
          continue;
        }
        if (await allExist(connection, objects)) return;
      }
      if ((state === READ_ONLY_TRANSACTION || state === INSUFFICIENT_PRIVILEGE) && (await allExist(connection, objects))) return;
      throw error;
    }
  }
}

/** The secondary indexes of `tables` (quoted, qualified names). */
function storeIndexes(tables: ReadonlyArray<readonly [TableKind, TableName]>): string[] {
  return tables.flatMap(([kind, name]) => TABLE_INDEXES[kind].map(([suffix]) => name.derived(suffix)));
}

/**
 * Whether every relation of `objects` exists: a catalog read that locks nothing. Sent unnamed:
 * it runs once per start, and a prepared statement would stay in the session for nothing.
 */
async function allExist(connection: PostgresConnection, objects: string[]): Promise<boolean> {
  const { rows } = await connection.query(ALL_EXIST, [objects]);
  return rows[0].present === true;
}

const ALL_EXIST = plannedEachCall('SELECT bool_and(to_regclass(name) IS NOT NULL) AS present FROM unnest($1::text[]) AS name');
