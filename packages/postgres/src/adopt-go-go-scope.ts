import { StowageError } from '@stowage/core';
import { ddl, sameList, type TableInfo } from './adopt-upgrade.js';
import type { PostgresConnection } from './connection/store-connection.js';
import type { PostgresPool } from './connection/types.js';
import { sqlState } from './errors.js';
import { encodeText } from './key-encoding.js';
import type { TableKind, TableName } from './schema/names.js';
import { CHECKPOINT_SEQUENCE_CONSTRAINT } from './schema/tables.js';

/*
 * The tables of go-go-scope's own PostgreSQL adapters (`PostgresAdapter`: `go_goscope_locks`,
 * `go_goscope_circuit`, `go_goscope_cache`, `go_goscope_checkpoints`;
 * `PostgresIdempotencyAdapter`: `go_goscope_idempotency`), adopted in place by
 * goGoScopePersistence, at the first start of each store (with `autoCreate`), once.
 *
 * Check first (`planTableAdoption` in adopt-plan.ts), change after: a table is adopted only when its columns, their types and its
 * primary key are go-go-scope's exactly; the same column names with other types, a view or
 * another table's foreign key on it, or rows stowage cannot take (a circuit state it does not
 * know, two checkpoints of one task and sequence) refuse the start with `E_INVALID_OPTION`, and
 * nothing is changed. Each table is converted in one transaction under its advisory lock
 * (`ddl` in adopt-upgrade.ts, shared with awaitly's upgrade): a crash leaves it as it was, and
 * a second process waits, then finds it converted and changes nothing. The conversion
 * rewrites the table under an exclusive lock, a moment for the few rows such a table holds.
 *
 * Keys: go-go-scope's `PostgresAdapter` stored `keyPrefix + 'lock:' + key` (`'circuit:'`,
 * `'cache:'`); goGoScopePersistence's stores key by `keyPrefix + key` (the cache: `(keyPrefix,
 * key)`). Rows of the persistence's own `keyPrefix` are rekeyed exactly; rows of another
 * application's prefix on the same table take the first `lock:` (…) as the end of their prefix,
 * so that they are where that application's stores look once it switches too. Checkpoints are
 * not prefixed. Idempotency records had a prefix of their own (`idempotencyKeyPrefix`).
 */

/** How goGoScopePersistence keys its stores, and how go-go-scope's `PostgresIdempotencyAdapter` did. */
export interface GoGoScopeKeys {
  keyPrefix: string;
  idempotencyKeyPrefix: string;
}

const registered = new WeakMap<PostgresPool, Map<string, { kind: TableKind; keys: GoGoScopeKeys }>>();

/** Says that `table` on `pool` is goGoScopePersistence's table of `kind`: go-go-scope's own is adopted there. */
export function registerGoGoScopeTable(pool: PostgresPool, kind: TableKind, table: TableName, keys: GoGoScopeKeys): void {
  let byTable = registered.get(pool);
  if (!byTable) registered.set(pool, (byTable = new Map()));
  byTable.set(table.sql, { kind, keys });
}

/** How goGoScopePersistence keys the table `kind` of `table` on `pool`; undefined when it does not open that table. */
export function goGoScopeKeysOf(pool: PostgresPool, kind: TableKind, table: TableName): GoGoScopeKeys | undefined {
  const registration = registered.get(pool)?.get(table.sql);
  return registration?.kind === kind ? registration.keys : undefined;
}

/** go-go-scope's layout of `kind`: its columns, primary key, and what converting it changes (see `planTableAdoption`). */
export function goGoScopeLayout(kind: TableKind): Readonly<Omit<GoGoScopeLayout, 'convert'>> | undefined {
  return LAYOUTS[kind];
}

/**
 * Converts go-go-scope's own table of `kind` (`planTableAdoption` judged it so) to stowage's
 * layout, rekeyed by `keys`; `E_INVALID_OPTION` when its rows cannot be converted (see above).
 * A table converted already is left as it is.
 */
export async function convertGoGoScopeTable(connection: PostgresConnection, kind: TableKind, table: TableName, name: string, keys: GoGoScopeKeys): Promise<void> {
  const layout = LAYOUTS[kind]!;
  const what = `go-go-scope's ${layout.describe}`;
  try {
    await ddl(connection, table, layout.convert(table, keys));
  } catch (error) {
    const state = sqlState(error);
    if (state === REFUSED) {
      throw new StowageError('E_INVALID_OPTION', `table ${name} is ${what}, but ${(error as Error).message}. Nothing was changed`, { cause: error });
    }
    if (state === '23505') {
      throw new StowageError(
        'E_INVALID_OPTION',
        `table ${name} is ${what}, but two of its rows would have the same key in stowage's layout (${(error as { detail?: string }).detail ?? (error as Error).message}). Nothing was changed`,
        { cause: error },
      );
    }
    throw error;
  }
}

/** Whether `info` has the column names of go-go-scope's table of `kind` (whatever their types). */
export function isGoGoScopeTable(kind: TableKind, info: TableInfo): boolean {
  const layout = LAYOUTS[kind];
  return layout !== undefined && sameList([...info.columns.keys()].sort(), Object.keys(layout.columns).sort());
}

/** SQLSTATE (stowage's own) of a conversion that found rows it cannot take; the message says which. */
const REFUSED = 'SW002';

// --- layouts --------------------------------------------------------------------------------

interface GoGoScopeLayout {
  /** go-go-scope's columns and their types (`format_type`), as its DDL makes them. */
  columns: Record<string, readonly string[]>;
  primaryKey: readonly string[];
  /** What the README calls the table. */
  describe: string;
  /** What the conversion changes, in words (the stowage CLI's `adopt --dry-run` prints them). */
  changes: readonly string[];
  /** The DDL transaction's steps (see `ddl`): each starts by returning when the table is converted already. */
  convert(table: TableName, keys: GoGoScopeKeys): string[];
}

const TEXT = ['text'];
const TIMESTAMP = ['timestamp without time zone'];
const TIMESTAMPTZ = ['timestamp with time zone'];

const LAYOUTS: Partial<Record<TableKind, GoGoScopeLayout>> = {
  locks: {
    describe: 'lock table (key TEXT PRIMARY KEY, owner TEXT, expires_at TIMESTAMP)',
    columns: { key: TEXT, owner: TEXT, expires_at: TIMESTAMP },
    primaryKey: ['key'],
    changes: [
      "keys keyPrefix + 'lock:' + key -> keyPrefix + key (goGoScopePersistence's keyPrefix)",
      'key COLLATE "C"; expires_at TIMESTAMP -> TIMESTAMPTZ (the session time zone\'s wall clock, as go-go-scope wrote it)',
      'add columns fence BIGINT NOT NULL (held locks keep fence 1; the sequence <table>_fence_seq hands out 2 and up) and acquired_at TIMESTAMPTZ',
      "drop go-go-scope's index idx_locks_expires (stowage builds <table>_expires_at_idx)",
      'all in one transaction under an exclusive lock, rewriting the table',
    ],
    // A lock go-go-scope holds stays held: same owner, same end, fence 1 (its grant counts as
    // the first; the fence sequence hands out 2 and up). `fence` has no default, so an insert
    // of a go-go-scope process still running fails instead of granting a lock stowage cannot see.
    // go-go-scope wrote `expires_at` as a JavaScript Date and extended it with NOW(): the wall
    // clock of the session's time zone, as the conversion reads it.
    convert: (table, { keyPrefix }) => {
      const t = table.sql;
      const sequence = table.derived('fence_seq');
      return [
        unlessColumn(table, 'fence'),
        ...rekey(table, 'idx_locks_expires'),
        `UPDATE ${t} SET key = ${withoutSeparator(keyPrefix, 'lock:')};`,
        `CREATE SEQUENCE IF NOT EXISTS ${sequence} AS BIGINT;`,
        `PERFORM setval('${sequence}', greatest((SELECT last_value FROM ${sequence}), 1), true);`,
        `ALTER TABLE ${t}
          ALTER COLUMN key TYPE TEXT COLLATE "C" USING ${escaped('key')},
          ALTER COLUMN expires_at TYPE TIMESTAMPTZ,
          ADD COLUMN fence BIGINT NOT NULL DEFAULT 1,
          ADD COLUMN acquired_at TIMESTAMPTZ NOT NULL DEFAULT now(),
          ADD PRIMARY KEY (key);`,
        `ALTER TABLE ${t} ALTER COLUMN fence DROP DEFAULT;`,
      ];
    },
  },
  circuitBreaker: {
    describe: 'circuit-breaker table (key TEXT PRIMARY KEY, state, failure_count, last_failure_time, last_success_time, updated_at)',
    columns: { key: TEXT, state: TEXT, failure_count: ['integer'], last_failure_time: TIMESTAMP, last_success_time: TIMESTAMP, updated_at: TIMESTAMP },
    primaryKey: ['key'],
    changes: [
      "keys keyPrefix + 'circuit:' + key -> keyPrefix + key (goGoScopePersistence's keyPrefix)",
      'key COLLATE "C"; last_failure_time, last_success_time TIMESTAMP (UTC) and updated_at TIMESTAMP -> TIMESTAMPTZ',
      'add column open_until TIMESTAMPTZ (an open circuit stays open until set again or closed by a success) and CHECK (state IN (closed, open, half-open)); other states refuse the conversion',
      "drop go-go-scope's index idx_circuit_updated",
      'all in one transaction under an exclusive lock, rewriting the table',
    ],
    // go-go-scope wrote the failure and success times as ISO strings (UTC) and `updated_at` as
    // NOW() (the session's time zone). An open circuit stays open (no `open_until`: go-go-scope
    // kept no cool-down end) until it is set again or a success closes it.
    convert: (table, { keyPrefix }) => {
      const t = table.sql;
      return [
        unlessColumn(table, 'open_until'),
        `LOCK TABLE ${t} IN ACCESS EXCLUSIVE MODE;`,
        refuseRows(table, `state NOT IN ('closed', 'open', 'half-open')`, `key || ' has the state ' || state`, 'circuit states stowage does not know (closed, open, half-open)'),
        ...rekey(table, 'idx_circuit_updated'),
        `UPDATE ${t} SET key = ${withoutSeparator(keyPrefix, 'circuit:')};`,
        `ALTER TABLE ${t}
          ALTER COLUMN key TYPE TEXT COLLATE "C" USING ${escaped('key')},
          ALTER COLUMN last_failure_time TYPE TIMESTAMPTZ USING last_failure_time AT TIME ZONE 'UTC',
          ALTER COLUMN last_success_time TYPE TIMESTAMPTZ USING last_success_time AT TIME ZONE 'UTC',
          ALTER COLUMN updated_at TYPE TIMESTAMPTZ,
          ALTER COLUMN updated_at SET DEFAULT now(),
          ADD COLUMN open_until TIMESTAMPTZ,
          ADD CHECK (state IN ('closed', 'open', 'half-open')),
          ADD PRIMARY KEY (key);`,
      ];
    },
  },
  cache: {
    describe: 'cache table (key TEXT PRIMARY KEY, value JSONB, expires_at TIMESTAMP, accessed_at)',
    columns: { key: TEXT, value: ['jsonb'], expires_at: TIMESTAMP, accessed_at: TIMESTAMP },
    primaryKey: ['key'],
    changes: [
      "add column prefix: keys keyPrefix + 'cache:' + key -> (prefix keyPrefix, key), primary key (prefix, key)",
      'key COLLATE "C"; value JSONB -> TEXT (the JSON go-go-scope stored, read back by richCodec); expires_at TIMESTAMP (UTC) -> TIMESTAMPTZ',
      'add column updated_at TIMESTAMPTZ NOT NULL DEFAULT now()',
      "drop go-go-scope's index idx_cache_expires (stowage builds <table>_prefix_expires_at_idx)",
      'all in one transaction under an exclusive lock, rewriting the table',
    ],
    // Each entry goes to the cache of its keyPrefix, its value the JSON go-go-scope stored (what
    // richCodec reads back), its expiry an ISO string go-go-scope wrote (UTC). `accessed_at`,
    // which go-go-scope never updated, stays.
    convert: (table, { keyPrefix }) => {
      const t = table.sql;
      const at = separatorAt(keyPrefix, 'cache:');
      return [
        unlessColumn(table, 'prefix'),
        ...rekey(table, 'idx_cache_expires'),
        `ALTER TABLE ${t} ADD COLUMN prefix TEXT COLLATE "C" NOT NULL DEFAULT '';`,
        `UPDATE ${t} SET prefix = CASE WHEN ${at} = 0 THEN '' ELSE left(key, ${at} - 1) END,
          key = CASE WHEN ${at} = 0 THEN key ELSE substr(key, ${at} + length('cache:')) END;`,
        `ALTER TABLE ${t}
          ALTER COLUMN key TYPE TEXT COLLATE "C" USING ${escaped('key')},
          ALTER COLUMN value TYPE TEXT USING value::text,
          ALTER COLUMN expires_at TYPE TIMESTAMPTZ USING expires_at AT TIME ZONE 'UTC',
          ADD COLUMN updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
          ADD PRIMARY KEY (prefix, key);`,
      ];
    },
  },
  checkpoints: {
    // go-go-scope's PostgresAdapter writes this table (`ON CONFLICT (id)`) without creating it:
    // this is the layout of its MySQL and SQLite adapters, in PostgreSQL types.
    describe: 'checkpoint table (id TEXT PRIMARY KEY, task_id, sequence INTEGER, timestamp BIGINT, progress, data JSONB, …)',
    columns: {
      id: TEXT,
      task_id: TEXT,
      sequence: ['integer', 'bigint'],
      timestamp: ['bigint'],
      progress: ['integer', 'bigint', 'double precision'],
      data: ['jsonb'],
      estimated_time_remaining: ['bigint', 'integer', 'double precision'],
      created_at: [...TIMESTAMPTZ, ...TIMESTAMP],
    },
    primaryKey: ['id'],
    changes: [
      'timestamp BIGINT (epoch milliseconds) -> TIMESTAMPTZ; sequence -> BIGINT; progress, estimated_time_remaining -> DOUBLE PRECISION; data JSONB -> TEXT (read back by richCodec)',
      'task_id COLLATE "C"; created_at NOT NULL DEFAULT now() (NULL -> now())',
      'UNIQUE (task_id, sequence); two checkpoints of one task and sequence refuse the conversion',
      'all in one transaction under an exclusive lock, rewriting the table',
    ],
    // `timestamp` was epoch milliseconds; `data` the JSON go-go-scope stored (what richCodec
    // reads back). A task's sequence becomes unique, as stowage's checkpoints need.
    convert: (table) => {
      const t = table.sql;
      const unique = table.derivedName(CHECKPOINT_SEQUENCE_CONSTRAINT);
      return [
        `IF EXISTS (SELECT 1 FROM pg_constraint p WHERE p.conrelid = '${t}'::regclass AND p.conname = '${unique}') THEN RETURN; END IF;`,
        `LOCK TABLE ${t} IN ACCESS EXCLUSIVE MODE;`,
        refuseRows(
          table,
          `(task_id, sequence) IN (SELECT task_id, sequence FROM ${t} GROUP BY 1, 2 HAVING count(*) > 1)`,
          `'task ' || task_id || ' sequence ' || sequence || ' (' || id || ')'`,
          'several checkpoints of one task and sequence, which stowage keeps unique (delete all but one of each)',
        ),
        `UPDATE ${t} SET created_at = now() WHERE created_at IS NULL;`,
        `ALTER TABLE ${t}
          ALTER COLUMN id TYPE TEXT USING ${escaped('id')},
          ALTER COLUMN task_id TYPE TEXT COLLATE "C" USING ${escaped('task_id')},
          ALTER COLUMN sequence TYPE BIGINT,
          ALTER COLUMN "timestamp" TYPE TIMESTAMPTZ USING timestamptz 'epoch' + "timestamp" * interval '1 millisecond',
          ALTER COLUMN progress TYPE DOUBLE PRECISION,
          ALTER COLUMN data TYPE TEXT USING data::text,
          ALTER COLUMN estimated_time_remaining TYPE DOUBLE PRECISION,
          ALTER COLUMN created_at TYPE TIMESTAMPTZ,
          ALTER COLUMN created_at SET DEFAULT now(),
          ALTER COLUMN created_at SET NOT NULL,
          ADD CONSTRAINT "${unique}" UNIQUE (task_id, sequence);`,
      ];
    },
  },
  idempotency: {
    describe: 'idempotency table (key VARCHAR(255) PRIMARY KEY, value JSONB, expires_at TIMESTAMPTZ, created_at, updated_at)',
    columns: { key: ['character varying(255)', ...TEXT], value: ['jsonb'], expires_at: TIMESTAMPTZ, created_at: TIMESTAMPTZ, updated_at: TIMESTAMPTZ },
    primaryKey: ['key'],
    changes: [
      "keys idempotencyKeyPrefix + key -> keyPrefix + key (goGoScopePersistence's options)",
      'key -> TEXT COLLATE "C"; value JSONB -> TEXT (read back by richCodec), nullable',
      "add columns status (every record 'completed') and token; updated_at NOT NULL DEFAULT now() (NULL -> now())",
      'all in one transaction under an exclusive lock, rewriting the table',
    ],
    // Every record becomes a completed result whose value is the JSON text go-go-scope stored
    // (what richCodec reads back), under goGoScopePersistence's key: `keyPrefix` + the key
    // without the adapter's own prefix.
    convert: (table, { keyPrefix, idempotencyKeyPrefix }) => {
      const t = table.sql;
      const text = (value: string) => `'${encodeText(value).replace(/'/g, "''")}'`;
      const rekeyed =
        keyPrefix === idempotencyKeyPrefix
          ? []
          : [`UPDATE ${t} SET key = ${text(keyPrefix)} || substr(key, ${[...idempotencyKeyPrefix].length + 1}) WHERE starts_with(key, ${text(idempotencyKeyPrefix)});`];
      return [
        unlessColumn(table, 'status'),
        `ALTER TABLE ${t}
          ALTER COLUMN key TYPE TEXT COLLATE "C" USING ${escaped('key')},
          ALTER COLUMN value DROP NOT NULL,
          ALTER COLUMN value TYPE TEXT USING value::text,
          ADD COLUMN status TEXT NOT NULL DEFAULT 'completed' CHECK (status IN ('in-flight', 'completed')),
          ADD COLUMN token TEXT,
          ALTER COLUMN updated_at SET DEFAULT now();`,
        `ALTER TABLE ${t} ALTER COLUMN status DROP DEFAULT;`,
        `UPDATE ${t} SET updated_at = now() WHERE updated_at IS NULL;`,
        `ALTER TABLE ${t} ALTER COLUMN updated_at SET NOT NULL;`,
        ...rekeyed,
      ];
    },
  },
};

// --- SQL pieces -----------------------------------------------------------------------------

/** A step that ends the conversion when the table has `column` (only the converted table has it). */
function unlessColumn(table: TableName, column: string): string {
  return `IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '${table.sql}'::regclass AND attname = '${column}' AND NOT attisdropped) THEN RETURN; END IF;`;
}

/**
 * The steps before the keys are rewritten: the table locked, its primary key dropped (so that
 * a key rewritten onto another row's old key conflicts only if it still does at the end, when
 * the new primary key is built), and go-go-scope's index (`connect()` made it; stowage builds
 * its own).
 */
function rekey(table: TableName, goGoScopeIndex: string): string[] {
  const regclass = `'${table.sql}'::regclass`;
  return [
    `LOCK TABLE ${table.sql} IN ACCESS EXCLUSIVE MODE;`,
    `FOR dropped IN SELECT p.conname AS name FROM pg_constraint p WHERE p.conrelid = ${regclass} AND p.contype = 'p' LOOP
      EXECUTE 'ALTER TABLE ${table.sql} DROP CONSTRAINT ' || quote_ident(dropped.name);
    END LOOP;`,
    `FOR dropped IN SELECT x.indexrelid::regclass::text AS name FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
        WHERE x.indrelid = ${regclass} AND i.relname = '${goGoScopeIndex}' LOOP
      EXECUTE 'DROP INDEX ' || dropped.name;
    END LOOP;`,
  ];
}

/**
 * Where the separator go-go-scope put after the keyPrefix (`lock:`, …) starts in `key`: right
 * after `keyPrefix` for keys of this persistence, the first one in the key for other
 * applications' keys; 0 when the key has none.
 */
function separatorAt(keyPrefix: string, separator: string): string {
  return `(CASE WHEN starts_with(key, ${literal(keyPrefix + separator)}) THEN length(${literal(keyPrefix)}) + 1 ELSE strpos(key, ${literal(separator)}) END)`;
}

/** `key` without the separator go-go-scope put after the keyPrefix (see {@link separatorAt}). */
function withoutSeparator(keyPrefix: string, separator: string): string {
  const at = separatorAt(keyPrefix, separator);
  return `CASE WHEN ${at} = 0 THEN key ELSE left(key, ${at} - 1) || substr(key, ${at} + length(${literal(separator)})) END`;
}

/** `column`'s text in stowage's escape (see key-encoding.ts): go-go-scope's keys hold no U+0000, but may hold U+0001. */
function escaped(column: string): string {
  return `replace(${column}, chr(1), chr(1) || '1')`;
}

/** A string literal (keyPrefix holds no U+0000: goGoScopeProviders refuses it). */
function literal(value: string): string {
  return `'${value.replace(/'/g, "''")}'`;
}

/**
 * A step that refuses the conversion (`REFUSED`) when rows match `where`, naming up to five
 * (`describe`: an SQL text expression per row) and `problem`.
 */
function refuseRows(table: TableName, where: string, describe: string, problem: string): string {
  return `IF EXISTS (SELECT 1 FROM ${table.sql} WHERE ${where}) THEN
      RAISE EXCEPTION USING ERRCODE = '${REFUSED}', MESSAGE = 'it holds ${problem.replace(/'/g, "''")}: ' ||
        (SELECT string_agg(x.what, ', ') FROM (SELECT ${describe} AS what FROM ${table.sql} WHERE ${where} LIMIT 5) AS x);
    END IF;`;
}
