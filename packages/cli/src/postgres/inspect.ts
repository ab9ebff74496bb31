import { DEFAULT_STATE_PREFIX, decodeCursor, encodeCursor, workflowRow, type BreakerRow, type CacheRow, type ProcessRow, type IdempotencyRow, type InspectQuery, type LockRow, type Page, type WorkflowRow } from '../model.js';
import type { PgSession, Tables } from './connection.js';

/*
 * The views of `stowage inspect` on PostgreSQL, read straight from the stores' tables (layout:
 * `schemaSql()` of @stowage/postgres). Every view pages in primary-key order with a keyset
 * cursor (`(prefix, id) > (…)`, `key > …`): a page reads its rows along the primary key and
 * stops, so the millionth page costs what the first does and nothing is held between pages.
 */

/** SQL conditions and their parameters, numbered as they are added. */
class Where {
  readonly conditions: string[] = [];
  readonly values: unknown[] = [];

  param(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }

  get sql(): string {
    return this.conditions.length === 0 ? 'TRUE' : this.conditions.join(' AND ');
  }
}

/** `column` starts with `prefix`: a range on the (byte-ordered, `COLLATE "C"`) key, so the index serves it. */
function startsWith(where: Where, column: string, given: string): void {
  if (given === '') return;
  const prefix = encodeKey(given);
  const last = prefix.charCodeAt(prefix.length - 1);
  where.conditions.push(`${column} >= ${where.param(prefix)}`);
  if (last < 0xffff) where.conditions.push(`${column} < ${where.param(prefix.slice(0, -1) + String.fromCharCode(last + 1))}`);
  else where.conditions.push(`starts_with(${column}, ${where.param(prefix)})`);
}

/* eslint-disable no-control-regex -- the control characters are the point */
/**
 * Keys as @stowage/postgres stores them: U+0000 (which `text` cannot hold) as U+0001 "0", and
 * U+0001 as U+0001 "1" (its key-encoding.ts; a workflow lease key holds a U+0000).
 */
function decodeKey(stored: string): string {
  return stored.includes('\u0001') ? stored.replace(/\u0001([01])/g, (_, digit: string) => (digit === '0' ? '\u0000' : '\u0001')) : stored;
}

function encodeKey(key: string): string {
  return /[\u0000\u0001]/.test(key) ? key.replace(/[\u0000\u0001]/g, (char) => (char === '\u0000' ? '\u00010' : '\u00011')) : key;
}

const ms = (expression: string) => `(extract(epoch FROM ${expression}) * 1000)::float8`;

function page<T>(rows: T[], limit: number, keyOf: (row: T) => unknown[]): Page<T> {
  const items = rows.slice(0, limit);
  return { items, nextCursor: rows.length > limit ? encodeCursor(keyOf(items.at(-1)!)) : null };
}

function missing<T>(table: string): Page<T> {
  return { items: [], nextCursor: null, note: `table ${table} does not exist (no store has used it yet)` };
}

/**
 * One page of workflows: the snapshot rows after the cursor in primary-key order `(prefix, id)`,
 * each with its live lease. Exported for the test that checks its plan (an index scan that
 * stops after the page, wherever the cursor points).
 */
export function workflowsQuery(tables: Tables, hasLeases: boolean, query: InspectQuery, idColumn = 'id'): { text: string; values: unknown[] } {
  const t = tables.snapshots!;
  const sid = `s.${idColumn}`;
  const where = new Where();
  if (query.namespace !== undefined) where.conditions.push(`s.prefix = ${where.param(query.namespace)}`);
  if (query.prefix !== undefined) startsWith(where, sid, query.prefix);
  // awaitly-postgres's tables keep snapshots in jsonb: reading through ::json serves both.
  const doc = 's.snapshot::json';
  if (query.status !== undefined) where.conditions.push(`coalesce(${doc} -> 'execution' ->> 'status', 'unknown') = ${where.param(query.status)}`);
  if (query.olderThanMs !== undefined) where.conditions.push(`s.updated_at < now() - ${where.param(query.olderThanMs)} * interval '1 millisecond'`);
  const after = decodeCursor(query.cursor);
  if (after) where.conditions.push(`(s.prefix, ${sid}) > (${where.param(after[0])}, ${where.param(encodeKey(String(after[1])))})`);
  // A lease of a store with a prefix is keyed `prefix + U+0000 + id`, stored with U+0000 escaped as U+0001 '0'.
  const lease = hasLeases
    ? `LEFT JOIN ${tables.workflowLocks} AS l ON l.key = CASE WHEN s.prefix = '' THEN ${sid} ELSE s.prefix || chr(1) || '0' || ${sid} END AND l.expires_at > now()`
    : 'LEFT JOIN (SELECT NULL::text AS owner, NULL::timestamptz AS expires_at) AS l ON FALSE';
  const steps = `CASE WHEN json_typeof(${doc} -> 'steps') = 'object' THEN ${doc} -> 'steps' END`;
  const text = `SELECT s.prefix, ${sid} AS id, ${doc} -> 'execution' ->> 'status' AS status, ${doc} -> 'execution' ->> 'currentStepId' AS current,
       (SELECT count(*)::int FROM json_object_keys(${steps})) AS steps,
       (SELECT k FROM json_object_keys(${steps}) WITH ORDINALITY AS x(k, n) ORDER BY n DESC LIMIT 1) AS last,
       s.updated_at, l.owner, ${ms('l.expires_at - now()')} AS expires_in
     FROM ${t} AS s ${lease}
     WHERE ${where.sql} ORDER BY s.prefix, ${sid} LIMIT ${where.param(query.limit + 1)}`;
  return { text, values: where.values };
}

export async function workflows(session: PgSession, query: InspectQuery): Promise<Page<WorkflowRow>> {
  if (query.kv) return stateWorkflows(session, query);
  const present = await session.existing([session.tables.snapshots!, session.tables.workflowLocks!]);
  if (!present.has(session.tables.snapshots!)) return missing(session.tables.snapshots!);
  const idColumn = await snapshotIdColumn(session, session.tables.snapshots!);
  const { text, values } = workflowsQuery(session.tables, present.has(session.tables.workflowLocks!), query, idColumn);
  const rows = await session.read<{ prefix: string; id: string; status: string | null; current: string | null; steps: number; last: string | null; updated_at: Date; owner: string | null; expires_in: number | null }>(
    text,
    values,
  );
  return page(
    rows.map((row) => ({
      namespace: row.prefix,
      id: decodeKey(row.id),
      status: row.status ?? 'unknown',
      lastStep: row.current ?? row.last,
      steps: row.steps,
      updatedAt: row.updated_at.toISOString(),
      leaseOwner: row.owner,
      leaseExpiresInMs: row.expires_in,
    })),
    query.limit,
    (row) => [row.namespace, row.id],
  );
}

export async function workflow(session: PgSession, namespace: string, id: string): Promise<unknown> {
  const t = session.tables.snapshots!;
  if (!(await session.existing([t])).has(t)) return null;
  const idColumn = await snapshotIdColumn(session, t);
  const rows = await session.read<{ snapshot: string }>(`SELECT snapshot::text AS snapshot FROM ${t} WHERE prefix = $1 AND ${idColumn} = $2`, [namespace, encodeKey(id)]);
  return rows[0] ? JSON.parse(rows[0].snapshot) : null;
}

/** `id`, or `snapshot_id` in a snapshot table adopted from awaitly-postgres (adoption renames it, so old awaitly-postgres code fails). */
async function snapshotIdColumn(session: PgSession, table: string): Promise<string> {
  const rows = await session.read<{ renamed: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'snapshot_id' AND NOT attisdropped) AS renamed`,
    [table],
  );
  return rows[0]?.renamed ? 'snapshot_id' : 'id';
}

/** Live leases by default (`--status expired` or `all` for the others), of both lease tables. */
export async function locks(session: PgSession, query: InspectQuery): Promise<Page<LockRow>> {
  const kinds = (['locks', 'workflowLocks'] as const).filter((kind) => session.tables[kind]);
  const present = await session.existing(kinds.map((kind) => session.tables[kind]!));
  const tables = kinds.filter((kind) => present.has(session.tables[kind]!));
  if (tables.length === 0) return missing(session.tables.locks!);
  const where = new Where();
  if (query.prefix !== undefined) startsWith(where, 'key', query.prefix);
  const status = query.status ?? 'held';
  if (status === 'held') where.conditions.push('expires_at > now()');
  else if (status === 'expired') where.conditions.push('expires_at <= now()');
  if (query.olderThanMs !== undefined) where.conditions.push(`acquired_at < now() - ${where.param(query.olderThanMs)} * interval '1 millisecond'`);
  const after = decodeCursor(query.cursor);
  if (after) where.conditions.push(`(kind, key) > (${where.param(after[0])}, ${where.param(encodeKey(String(after[1])))})`);
  // Each branch reads its primary key in order; the server merges them (Merge Append).
  const union = tables
    .map((kind) => `SELECT '${kind}'::text COLLATE "C" AS kind, key, owner, fence, acquired_at, expires_at FROM ${session.tables[kind]}`)
    .join(' UNION ALL ');
  const rows = await session.read<{ kind: string; key: string; owner: string; fence: string; expires_in: number }>(
    `SELECT kind, key, owner, fence::text AS fence, ${ms('expires_at - now()')} AS expires_in FROM (${union}) AS l
     WHERE ${where.sql} ORDER BY kind, key LIMIT ${where.param(query.limit + 1)}`,
    where.values,
  );
  return page(
    rows.map((row) => ({ key: decodeKey(row.key), owner: row.owner, fence: row.fence, expiresInMs: row.expires_in, table: row.kind })),
    query.limit,
    (row) => [row.table, row.key],
  );
}

export async function breakers(session: PgSession, query: InspectQuery): Promise<Page<BreakerRow>> {
  const t = session.tables.circuitBreaker!;
  if (!(await session.existing([t])).has(t)) return missing(t);
  const where = new Where();
  if (query.prefix !== undefined) startsWith(where, 'key', query.prefix);
  // As the store reports it: an open circuit past its cool-down reads half-open.
  const state = `CASE WHEN state = 'open' AND open_until <= now() THEN 'half-open' ELSE state END`;
  if (query.status !== undefined) where.conditions.push(`${state} = ${where.param(query.status)}`);
  if (query.olderThanMs !== undefined) where.conditions.push(`updated_at < now() - ${where.param(query.olderThanMs)} * interval '1 millisecond'`);
  const after = decodeCursor(query.cursor);
  if (after) where.conditions.push(`key > ${where.param(encodeKey(String(after[0])))}`);
  const rows = await session.read<{ key: string; state: string; failure_count: number; last_failure_time: Date | null; open_until: Date | null }>(
    `SELECT key, ${state} AS state, failure_count, last_failure_time, open_until FROM ${t} WHERE ${where.sql} ORDER BY key LIMIT ${where.param(query.limit + 1)}`,
    where.values,
  );
  return page(
    rows.map((row) => ({
      key: decodeKey(row.key),
      state: row.state,
      failures: row.failure_count,
      lastFailure: row.last_failure_time?.toISOString() ?? null,
      openUntil: row.open_until?.toISOString() ?? null,
    })),
    query.limit,
    (row) => [row.key],
  );
}

/** Live records (an expired one is invisible to the store and only waits for the sweeper). */
export async function idempotency(session: PgSession, query: InspectQuery): Promise<Page<IdempotencyRow>> {
  const t = session.tables.idempotency!;
  if (!(await session.existing([t])).has(t)) return missing(t);
  const where = new Where();
  where.conditions.push('(expires_at IS NULL OR expires_at > now())');
  if (query.prefix !== undefined) startsWith(where, 'key', query.prefix);
  if (query.status !== undefined) where.conditions.push(`status = ${where.param(query.status)}`);
  if (query.olderThanMs !== undefined) where.conditions.push(`updated_at < now() - ${where.param(query.olderThanMs)} * interval '1 millisecond'`);
  const after = decodeCursor(query.cursor);
  if (after) where.conditions.push(`key > ${where.param(encodeKey(String(after[0])))}`);
  const rows = await session.read<{ key: string; status: string; age: number; expires_in: number | null }>(
    `SELECT key, status, ${ms('now() - updated_at')} AS age, ${ms('expires_at - now()')} AS expires_in
     FROM ${t} WHERE ${where.sql} ORDER BY key LIMIT ${where.param(query.limit + 1)}`,
    where.values,
  );
  return page(
    rows.map((row) => ({ key: decodeKey(row.key), status: row.status, ageMs: row.age, expiresInMs: row.expires_in })),
    query.limit,
    (row) => [row.key],
  );
}

/**
 * Items per process and state, with the oldest entry: one row per group (counting reads each
 * item's index entry once, on the server; nothing comes to the client but the groups).
 */
export async function processes(session: PgSession, query: InspectQuery): Promise<Page<ProcessRow>> {
  const t = session.tables.processItems!;
  if (!(await session.existing([t])).has(t)) return missing(t);
  const where = new Where();
  if (query.prefix !== undefined) startsWith(where, 'process', query.prefix);
  if (query.status !== undefined) where.conditions.push(`state = ${where.param(query.status)}`);
  if (query.olderThanMs !== undefined) where.conditions.push(`updated_at < now() - ${where.param(query.olderThanMs)} * interval '1 millisecond'`);
  const rows = await session.read<{ process: string; state: string; items: number; leased: number; oldest: Date | null }>(
    `SELECT process, state, count(*)::int AS items, (count(*) FILTER (WHERE lease_until > now()))::int AS leased, min(updated_at) AS oldest
     FROM ${t} WHERE ${where.sql} GROUP BY process, state ORDER BY process, state`,
    where.values,
  );
  return { items: rows.map((row) => ({ ...row, oldest: row.oldest?.toISOString() ?? null })), nextCursor: null };
}

/** Entries per cache prefix, and how many of them expired without being swept yet. */
export async function caches(session: PgSession, query: InspectQuery): Promise<Page<CacheRow>> {
  const t = session.tables.cache!;
  if (!(await session.existing([t])).has(t)) return missing(t);
  const where = new Where();
  if (query.prefix !== undefined) startsWith(where, 'prefix', query.prefix);
  const rows = await session.read<{ prefix: string; entries: number; expired: number }>(
    `SELECT prefix, count(*)::int AS entries, (count(*) FILTER (WHERE expires_at <= now()))::int AS expired
     FROM ${t} WHERE ${where.sql} GROUP BY prefix ORDER BY prefix`,
    where.values,
  );
  return { items: rows, nextCursor: null };
}

/**
 * Workflows of createPostgresPersistence: the key-value rows under the persistence's prefix
 * (`--namespace`, default `workflow:state:`), live ones, in key order. The status is read from
 * the JSON text here, one batch of rows at a time.
 */
async function stateWorkflows(session: PgSession, query: InspectQuery): Promise<Page<WorkflowRow>> {
  const t = session.tables.kv!;
  if (!(await session.existing([t])).has(t)) return missing(t);
  const namespace = query.namespace ?? DEFAULT_STATE_PREFIX;
  const items: WorkflowRow[] = [];
  let after = decodeCursor(query.cursor)?.[0] as string | undefined;
  for (;;) {
    const where = new Where();
    where.conditions.push('(expires_at IS NULL OR expires_at > now())');
    startsWith(where, 'key', namespace + (query.prefix ?? ''));
    if (query.olderThanMs !== undefined) where.conditions.push(`updated_at < now() - ${where.param(query.olderThanMs)} * interval '1 millisecond'`);
    if (after !== undefined) where.conditions.push(`key > ${where.param(encodeKey(namespace + after))}`);
    const batch = query.limit + 1;
    const rows = await session.read<{ key: string; value: string; updated_at: Date | null }>(
      `SELECT key, value, updated_at FROM ${t} WHERE ${where.sql} ORDER BY key LIMIT ${where.param(batch)}`,
      where.values,
    );
    for (const row of rows) {
      const id = decodeKey(row.key).slice(namespace.length);
      const item = workflowRow(namespace, id, row.value, row.updated_at, query.status);
      if (item) items.push(item);
      if (items.length > query.limit) return { items: items.slice(0, query.limit), nextCursor: encodeCursor([items[query.limit - 1]!.id]) };
      after = id;
    }
    if (rows.length < batch) return { items, nextCursor: null };
  }
}
