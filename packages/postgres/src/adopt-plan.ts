import { goGoScopeLayout, isGoGoScopeTable } from './adopt-go-go-scope.js';
import { NOT_NULL_CHECK, isByteOrder, sameList, type ColumnInfo, type Layout, type TableInfo } from './adopt-upgrade.js';
import type { TableKind } from './schema/names.js';
import { TABLE_INDEXES, tableColumns } from './schema/tables.js';

/*
 * The one judgement of an existing table's layout: what a store starting on it does (adopt.ts
 * acts on it at start, with `autoCreate`) and what the stowage CLI's `doctor` and `adopt` say
 * about it. Pure: it reads plain catalog data, so the CLI gives it the rows of its own query.
 */

/** A column as the catalog describes it. */
export type ExistingColumn = ColumnInfo;

/** A table as the catalog describes it (`pg_attribute`, `pg_constraint`, `pg_index`). */
export interface ExistingTable {
  /** Quoted, qualified name, for messages. */
  name: string;
  /** In column order; `type` as `format_type()` writes it, `default` as `pg_get_expr()`. */
  columns: readonly ExistingColumn[];
  primaryKey: readonly string[];
  /** Names of its check constraints. */
  checks: readonly string[];
  /** Views and foreign keys of other tables that rest on it (`view "v"`, `foreign key "fk" of "t"`). */
  dependents: readonly string[];
  /** Names of its indexes. */
  indexes: readonly string[];
  /** The database's default collation sorts by bytes (libc "C" or "POSIX"). */
  byteOrderDefault: boolean;
  /** `pg_class.relpages`, when known: the plan then counts the upgrade's batches. */
  pages?: number;
}

/**
 * What starting a store on the table does:
 * - `stowage`: uses it as it is (`adopted`: an awaitly-postgres table upgraded before, whose
 *   snapshot rows may still carry awaitly's ids);
 * - `awaitly`: upgrades awaitly-postgres's table in place, step by step (`changes`);
 * - `go-go-scope`: goGoScopePersistence converts go-go-scope's own table in place (`changes`);
 * - `refused`: fails with `E_INVALID_OPTION` and `reason`, before anything changes.
 */
export type TableAdoption =
  | { verdict: 'stowage'; adopted: boolean }
  | { verdict: 'awaitly' | 'go-go-scope'; layout: string; changes: string[] }
  | { verdict: 'refused'; reason: string };

export interface PlanTableAdoptionOptions {
  /** goGoScopePersistence opens the table: only there are go-go-scope's own tables converted. */
  goGoScopePersistence?: boolean;
}

/**
 * Judges an existing table that a store of `kind` would use: stowage's own layout, one it
 * adopts in place (awaitly-postgres's key-value and snapshot tables; go-go-scope's own tables
 * under goGoScopePersistence), or one it refuses. The judgement @stowage/postgres's stores make
 * when they start; pure, from catalog data (see {@link ExistingTable}).
 */
export function planTableAdoption(kind: TableKind, table: ExistingTable, options: PlanTableAdoptionOptions = {}): TableAdoption {
  const info = tableInfo(table);
  const layout = AWAITLY_LAYOUTS[kind];
  if (layout !== undefined) return planAwaitly(layout, info, table);
  const goGoScope = goGoScopeLayout(kind);
  if (options.goGoScopePersistence && goGoScope !== undefined && isGoGoScopeTable(kind, info) && !hasStowageColumns(kind, info)) {
    const what = `go-go-scope's ${goGoScope.describe}`;
    const problems = [
      ...Object.entries(goGoScope.columns)
        .filter(([name, types]) => !types.includes(info.columns.get(name)!.type))
        .map(([name, types]) => `${name} is ${info.columns.get(name)!.type} (go-go-scope's is ${types[0]})`),
      ...(sameList(info.primaryKey, goGoScope.primaryKey) ? [] : [`its primary key is (${info.primaryKey.join(', ')})`]),
    ];
    if (problems.length > 0) {
      return refused(
        `table ${info.name} has the columns of ${what}, but ${problems.join('; ')}: stowage adopts go-go-scope's own layout only. Nothing was changed; give goGoScopePersistence another table`,
      );
    }
    if (info.dependents.length > 0) {
      return refused(
        `table ${info.name} is ${what}, and stowage would convert it in place, but ${info.dependents.join(', ')} rest on it. ` +
          'Nothing was changed. Drop them, start goGoScopePersistence once, then create them again; or give it another table',
      );
    }
    return { verdict: 'go-go-scope', layout: what, changes: [...goGoScope.changes] };
  }
  return planStowageColumns(kind, info);
}

/** `table` as the upgrade reads it (columns by name). */
export function tableInfo(table: ExistingTable): TableInfo {
  return {
    name: table.name,
    columns: new Map(table.columns.map((column) => [column.name, column])),
    primaryKey: [...table.primaryKey],
    checks: [...table.checks],
    dependents: [...table.dependents],
    byteOrderDefault: table.byteOrderDefault,
  };
}

// --- awaitly-postgres's tables --------------------------------------------------------------

const TEXT = ['text'];
const TIMESTAMPTZ = ['timestamp with time zone'];
const BIGINT = ['bigint'];

/** The key column of an adopted snapshot table (see the `snapshots` layout). */
export const ADOPTED_SNAPSHOT_ID = 'snapshot_id';

/** The kinds stowage adopts awaitly-postgres's tables of, and how (adopt-upgrade.ts). */
export const AWAITLY_LAYOUTS: Partial<Record<TableKind, Layout>> = {
  kv: {
    kind: 'kv',
    renames: {},
    legacy: { key: TEXT, value: TEXT, expires_at: ['timestamp without time zone', ...TIMESTAMPTZ] },
    optional: { updated_at: TIMESTAMPTZ },
    added: { version: BIGINT, updated_at: TIMESTAMPTZ },
    notNull: ['value', 'version', 'updated_at'],
    primaryKey: ['key'],
    describe: "awaitly-postgres's key-value table (key TEXT PRIMARY KEY, value TEXT, expires_at TIMESTAMP[, updated_at TIMESTAMPTZ])",
  },
  snapshots: {
    kind: 'snapshots',
    // awaitly-postgres selects, lists and deletes by `id` alone (`DELETE … WHERE id = $1`): once
    // each prefix keeps its rows under their own id, such a statement of a process still running
    // it would reach every prefix's rows. Under another name, every statement of it fails (42703).
    renames: { id: ADOPTED_SNAPSHOT_ID },
    legacy: { id: TEXT, snapshot: ['json', 'jsonb'], updated_at: TIMESTAMPTZ },
    optional: {},
    added: { prefix: TEXT, version: BIGINT },
    notNull: ['snapshot', 'version', 'updated_at', 'prefix'],
    primaryKey: ['prefix', 'id'],
    describe: "awaitly-postgres's snapshot table (id TEXT PRIMARY KEY, snapshot JSONB NOT NULL, updated_at TIMESTAMPTZ)",
  },
};

function planAwaitly(layout: Layout, found: TableInfo, table: ExistingTable): TableAdoption {
  // Tables stowage created have no default on `version`; legacy rows of adopted ones take 1.
  const adopted = found.columns.get('version')?.default === '1';
  if (!adopted && isNative(layout, found)) return { verdict: 'stowage', adopted: false };
  const info = underLegacyNames(layout, found);
  const renamed = Object.values(layout.renames).every((name) => found.columns.has(name));
  if (renamed && isNative(layout, info)) return { verdict: 'stowage', adopted: true };
  const problems = layoutProblems(layout, info);
  if (problems.length > 0) {
    return refused(
      `table ${info.name} has a layout stowage does not know: ${problems.join('; ')}. ` +
        `Stowage uses its own layout (see schemaSql()) and adopts ${layout.describe}; give the store another table`,
    );
  }
  // The upgrade converts the key column and replaces the primary key they rest on, which
  // PostgreSQL refuses half-way (after columns were added): checked before anything changes.
  if (info.dependents.length > 0) {
    return refused(
      `table ${info.name} is ${layout.describe}, and stowage would upgrade it in place, but ${info.dependents.join(', ')} ` +
        `depend${info.dependents.length === 1 ? 's' : ''} on it (the upgrade converts its key column and replaces its primary key). ` +
        'Nothing was changed. Drop them, start the store once, then create them again (see the README on adopting tables); or give the store another table',
    );
  }
  return {
    verdict: 'awaitly',
    layout: layout.kind === 'kv' ? "awaitly-postgres's key-value table" : "awaitly-postgres's snapshot table",
    changes: upgradeSteps(layout, found, table),
  };
}

/**
 * `info` with the columns an upgrade renamed under their legacy names, so that a table is
 * checked alike before and after the rename (see {@link Layout.renames}).
 */
export function underLegacyNames(layout: Layout, info: TableInfo): TableInfo {
  const legacyName = new Map(Object.entries(layout.renames).map(([legacy, renamed]) => [renamed, legacy]));
  const rename = (name: string) => (legacyName.has(name) && !info.columns.has(legacyName.get(name)!) ? legacyName.get(name)! : name);
  return {
    ...info,
    columns: new Map([...info.columns].map(([name, column]) => [rename(name), { ...column, name: rename(name) }])),
    primaryKey: info.primaryKey.map(rename),
  };
}

/** The table is stowage's layout, complete (created by stowage, or fully adopted), under stowage's column names. */
function isNative(layout: Layout, info: TableInfo): boolean {
  const types = { ...layout.legacy, ...layout.added, expires_at: TIMESTAMPTZ };
  const columns = [...tableColumns(layout.kind).keys()];
  return (
    columns.every((name) => {
      const column = info.columns.get(name);
      return column !== undefined && (types[name as keyof typeof types] ?? [column.type]).includes(column.type);
    }) &&
    layout.notNull.every((name) => info.columns.get(name)!.notNull) &&
    sameList(info.primaryKey, layout.primaryKey) &&
    layout.primaryKey.every((name) => isByteOrder(info.columns.get(name), info)) &&
    !info.checks.some((check) => check.endsWith(NOT_NULL_CHECK))
  );
}

/** What keeps the table from being the legacy layout (plus what an earlier upgrade added). */
function layoutProblems(layout: Layout, info: TableInfo): string[] {
  const accepted = { ...layout.legacy, ...layout.optional, ...layout.added };
  const unknown = [...info.columns.keys()].filter((name) => !(name in accepted));
  const missing = Object.keys(layout.legacy).filter((name) => !info.columns.has(name));
  const wrongTypes = [...info.columns.values()]
    .filter((column) => column.name in accepted && !accepted[column.name]!.includes(column.type))
    .map((column) => `${column.name} is ${column.type} (expected ${accepted[column.name]!.join(' or ')})`);
  const legacyKey = layout.primaryKey.filter((name) => name in layout.legacy);
  const keyProblem =
    sameList(info.primaryKey, legacyKey) || sameList(info.primaryKey, layout.primaryKey) ? [] : [`its primary key is (${info.primaryKey.join(', ')})`];
  return [
    ...(unknown.length > 0 ? [`unrecognised column(s) ${unknown.join(', ')}`] : []),
    ...(missing.length > 0 ? [`no column(s) ${missing.join(', ')}`] : []),
    ...wrongTypes,
    ...keyProblem,
  ];
}

/** Blocks per `updated_at` batch of the upgrade (adopt-upgrade.ts; 8 KiB each). */
const BLOCKS_PER_BATCH = 256;

/** The steps of the upgrade (adopt-upgrade.ts) that `found` still needs, in its order, in words. */
function upgradeSteps(layout: Layout, found: TableInfo, table: ExistingTable): string[] {
  const has = (name: string) => found.columns.has(name);
  const kv = layout.kind === 'kv';
  const steps: string[] = [];
  if (!kv && !has('prefix')) steps.push(`add column prefix TEXT COLLATE "C" NOT NULL DEFAULT '' (catalog change, no rewrite)`);
  if (!has('version')) steps.push('add column version BIGINT NOT NULL DEFAULT 1, and the sequence <table>_version_seq handing out 2 and up (catalog change)');
  if (kv && !has('updated_at')) steps.push(`add column updated_at TIMESTAMPTZ NOT NULL DEFAULT date_trunc('milliseconds', now()) (catalog change)`);
  if (kv && found.columns.get('expires_at')?.type === 'timestamp without time zone') {
    steps.push('expires_at TIMESTAMP -> TIMESTAMPTZ in the session time zone (no rewrite when it is UTC; otherwise a rewrite under an exclusive lock)');
  }
  for (const name of kv ? ['value', 'updated_at'] : ['snapshot', 'updated_at']) {
    if (has(name) && !found.columns.get(name)!.notNull) steps.push(`${name} NOT NULL (CHECK … NOT VALID, validated without blocking writes)`);
  }
  if (has('updated_at')) {
    const batches = table.pages === undefined ? '' : ` in ${Math.max(1, Math.ceil(table.pages / BLOCKS_PER_BATCH))} batch(es)`;
    steps.push(`updated_at to milliseconds, NULL to now()${batches}, ${BLOCKS_PER_BATCH} blocks at a time`);
  }
  const key = kv ? 'key' : has('id') ? 'id' : ADOPTED_SNAPSHOT_ID;
  if (key === 'id') steps.push(`rename id to ${ADOPTED_SNAPSHOT_ID}, so that awaitly-postgres code still running fails instead of reaching every prefix (catalog change)`);
  if (!kv && !['prefix,id', `prefix,${ADOPTED_SNAPSHOT_ID}`].includes(found.primaryKey.join(','))) {
    steps.push(`primary key (prefix, ${ADOPTED_SNAPSHOT_ID}), ${ADOPTED_SNAPSHOT_ID} COLLATE "C": unique index built CONCURRENTLY, then attached`);
  } else if (!isByteOrder(found.columns.get(key), found)) {
    steps.push(`${kv ? key : ADOPTED_SNAPSHOT_ID} COLLATE "C" (byte order for key ranges): unique index built CONCURRENTLY, then attached`);
  }
  for (const [suffix] of TABLE_INDEXES[layout.kind]) {
    if (!table.indexes.some((name) => name.endsWith(`_${suffix}`))) steps.push(`index <table>_${suffix} built CONCURRENTLY`);
  }
  return steps;
}

// --- every other kind: stowage's columns, or refused --------------------------------------

/** Every column of stowage's layout of `kind`, of its type (other columns of yours are fine), or refused. */
function planStowageColumns(kind: TableKind, info: TableInfo): TableAdoption {
  const expected = tableColumns(kind);
  const missing = [...expected.keys()].filter((name) => !info.columns.has(name));
  const wrongTypes = [...expected]
    .filter(([name, type]) => info.columns.has(name) && info.columns.get(name)!.type !== type)
    .map(([name, type]) => `${name} is ${info.columns.get(name)!.type} (stowage's is ${type})`);
  if (missing.length === 0 && wrongTypes.length === 0) return { verdict: 'stowage', adopted: false };
  const hint = isAwaitlyLeaseTable(info)
    ? ": it is awaitly-postgres's lock table, which only holds leases; give stowage another lockTableName, or drop it while no workflow runs"
    : isGoGoScopeTable(kind, info)
      ? ": it is a table of go-go-scope's own PostgreSQL adapters, which stowage adopts only through goGoScopePersistence " +
        "(see the README on go-go-scope's own tables)"
      : ': give the store another table';
  const problems = [...(missing.length > 0 ? [`no column(s) ${missing.join(', ')}`] : []), ...wrongTypes];
  return refused(`table ${info.name} has a layout stowage does not know for ${kind}: ${problems.join('; ')} (it has ${[...info.columns.keys()].join(', ')})${hint}`);
}

/** Whether every column of stowage's layout of `kind` is there, of its type (converted already: go-go-scope's checkpoint table keeps its column names). */
function hasStowageColumns(kind: TableKind, info: TableInfo): boolean {
  return [...tableColumns(kind)].every(([name, type]) => info.columns.get(name)?.type === type);
}

function isAwaitlyLeaseTable(info: TableInfo): boolean {
  return ['workflow_id', 'owner_token', 'expires_at'].every((name) => info.columns.has(name));
}

function refused(reason: string): TableAdoption {
  return { verdict: 'refused', reason };
}
