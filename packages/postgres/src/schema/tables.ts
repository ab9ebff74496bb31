import { TableName, type TableKind } from './names.js';

/*
 * What each kind of table is: its columns (the `CREATE TABLE`), its secondary indexes and the
 * sequence it advances. The statements that create them are assembled in ddl.ts.
 */

/**
 * The `CREATE TABLE IF NOT EXISTS` of a kind of table: its columns and constraints, without
 * its sequence ({@link SEQUENCES}) or secondary indexes ({@link TABLE_INDEXES}).
 */
export function createTableSql(kind: TableKind, name: TableName): string {
  const t = name.sql;
  switch (kind) {
    case 'kv':
      return `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  value TEXT NOT NULL,
  version BIGINT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now()),
  expires_at TIMESTAMPTZ
)`;
    case 'snapshots':
      return `CREATE TABLE IF NOT EXISTS ${t} (
  prefix TEXT COLLATE "C" NOT NULL DEFAULT '',
  id TEXT COLLATE "C" NOT NULL,
  snapshot JSON NOT NULL,
  version BIGINT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now()),
  PRIMARY KEY (prefix, id)
)`;
    case 'locks':
    case 'workflowLocks':
      return `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  owner TEXT NOT NULL,
  fence BIGINT NOT NULL,
  acquired_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ NOT NULL
)`;
    case 'cache':
      return `CREATE TABLE IF NOT EXISTS ${t} (
  prefix TEXT COLLATE "C" NOT NULL DEFAULT '',
  key TEXT COLLATE "C" NOT NULL,
  value TEXT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ,
  PRIMARY KEY (prefix, key)
)`;
    case 'circuitBreaker':
      return `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  state TEXT NOT NULL CHECK (state IN ('closed', 'open', 'half-open')),
  failure_count INTEGER NOT NULL DEFAULT 0,
  last_failure_time TIMESTAMPTZ,
  last_success_time TIMESTAMPTZ,
  open_until TIMESTAMPTZ,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`;
    case 'checkpoints':
      return `CREATE TABLE IF NOT EXISTS ${t} (
  id TEXT NOT NULL PRIMARY KEY,
  task_id TEXT COLLATE "C" NOT NULL,
  sequence BIGINT NOT NULL,
  "timestamp" TIMESTAMPTZ NOT NULL,
  progress DOUBLE PRECISION NOT NULL,
  data TEXT NOT NULL,
  estimated_time_remaining DOUBLE PRECISION,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT ${name.derivedUnqualified(CHECKPOINT_SEQUENCE_CONSTRAINT)} UNIQUE (task_id, sequence)
)`;
    case 'idempotency':
      return `CREATE TABLE IF NOT EXISTS ${t} (
  key TEXT COLLATE "C" NOT NULL PRIMARY KEY,
  status TEXT NOT NULL CHECK (status IN ('in-flight', 'completed')),
  token TEXT,
  value TEXT,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires_at TIMESTAMPTZ
)`;
    case 'processItems':
      return `CREATE TABLE IF NOT EXISTS ${t} (
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
)`;
    case 'processTransitions':
      return `CREATE TABLE IF NOT EXISTS ${t} (
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
)`;
  }
}

/** The unique constraint on a checkpoint's `(task_id, sequence)`, by which a conflict is told from a duplicate id. */
export const CHECKPOINT_SEQUENCE_CONSTRAINT = 'task_sequence_key';

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

/** The sequence each kind of table advances: versions of key-value entries and snapshots, fences of leases. */
export const SEQUENCES: Partial<Record<TableKind, string>> = {
  kv: 'version_seq',
  snapshots: 'version_seq',
  locks: 'fence_seq',
  workflowLocks: 'fence_seq',
};

/**
 * The columns of a kind of table as its `CREATE TABLE` declares them, each with its type as
 * PostgreSQL names it (`format_type`).
 */
export function tableColumns(kind: TableKind): Map<string, string> {
  const create = createTableSql(kind, new TableName('t'));
  // Column lines are indented two spaces and start with a lower-case name; constraints are upper case.
  const columns = [...create.matchAll(/^ {2}"?([a-z_]+)"? (DOUBLE PRECISION|[A-Z0-9]+)/gm)];
  return new Map(columns.map(([, name, type]) => [name!, TYPE_NAMES[type!] ?? type!.toLowerCase()]));
}

const TYPE_NAMES: Record<string, string> = { TIMESTAMPTZ: 'timestamp with time zone' };
