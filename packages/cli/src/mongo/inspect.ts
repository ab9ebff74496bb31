import { StowageError } from '@stowage/core';
import type { Collection, Document, Filter } from 'mongodb';
import {
  DEFAULT_STATE_PREFIX,
  decodeCursor,
  encodeCursor,
  type BreakerRow,
  type CacheRow,
  type IdempotencyRow,
  type InspectQuery,
  type LockRow,
  type Page,
  type ProcessRow,
  type WorkflowRow,
  workflowRow,
} from '../model.js';
import type { MongoSession } from './session.js';

/*
 * The views of `stowage inspect` on MongoDB, read from the stores' collections (documents as
 * the @stowage/mongo README shows them). Pages go in `_id` order from a keyset cursor
 * (`_id > last`); a filter the server cannot apply (a workflow's status lives in the snapshot's
 * JSON text) is applied to one batch at a time, so memory stays at a page whatever the size.
 */

/** stowage's documents are keyed by strings. */
interface Keyed extends Document {
  _id: string;
}

function collectionOf(session: MongoSession, name: string): Collection<Keyed> {
  return session.db.collection<Keyed>(name);
}

/** `_id` in [prefix, prefix + 1): an index range on `_id`. */
function idRange(prefix: string): Filter<Keyed> {
  if (prefix === '') return {};
  const last = prefix.charCodeAt(prefix.length - 1);
  return { _id: { $gte: prefix, ...(last < 0xffff && { $lt: prefix.slice(0, -1) + String.fromCharCode(last + 1) }) } };
}

/**
 * Reads `collection` in `_id` order after `after`, keeps the documents `keep` accepts, until
 * `limit + 1` are kept or the collection ends, one batch at a time.
 */
async function scan<T>(
  session: MongoSession,
  collection: string,
  filter: Filter<Keyed>,
  after: string | undefined,
  limit: number,
  keep: (doc: Document) => T | undefined,
): Promise<{ kept: Array<{ id: string; row: T }>; more: boolean }> {
  const kept: Array<{ id: string; row: T }> = [];
  let last = after;
  const batch = Math.max(limit + 1, 100);
  for (;;) {
    const range = last === undefined ? filter : { $and: [filter, { _id: { $gt: last } }] };
    const docs = await collectionOf(session, collection).find(range).sort({ _id: 1 }).limit(batch).toArray();
    for (const doc of docs) {
      if (typeof doc._id !== 'string') continue; // stowage's documents are keyed by strings
      const row = keep(doc);
      if (row !== undefined) kept.push({ id: doc._id, row });
      if (kept.length > limit) return { kept: kept.slice(0, limit), more: true };
    }
    if (docs.length < batch) return { kept, more: false };
    last = docs.at(-1)!._id as string;
  }
}

function pageOf<T>(result: { kept: Array<{ id: string; row: T }>; more: boolean }, cursorOf: (id: string) => unknown[]): Page<T> {
  return { items: result.kept.map((entry) => entry.row), nextCursor: result.more ? encodeCursor(cursorOf(result.kept.at(-1)!.id)) : null };
}

const asDate = (value: unknown) => (value instanceof Date ? value : null);

function noWriteTime(view: string): never {
  throw new StowageError('E_INVALID_OPTION', `--older-than: MongoDB ${view} documents hold no write time (only workflows do)`);
}

export async function workflows(session: MongoSession, query: InspectQuery): Promise<Page<WorkflowRow>> {
  const now = await session.now();
  if (query.kv) return stateWorkflows(session, query, now);
  // A snapshot is `{ _id: prefix + U+0000 + id, ns: prefix, value: JSON text, … }`; a tombstone has no value.
  const filter: Filter<Keyed> = { value: { $type: 'string' } };
  if (query.namespace !== undefined) Object.assign(filter, idRange(`${query.namespace}\u0000${query.prefix ?? ''}`));
  if (query.olderThanMs !== undefined) filter.updatedAt = { $lt: new Date(now.getTime() - query.olderThanMs) };
  // The store keeps `finished`: the status when completed or failed, else ''. The server filters
  // on it, so a rare status costs no round trip per batch; documents of older stores lack it
  // (null matches them) and are told apart by their JSON, as every document is.
  if (query.status !== undefined) filter.finished = { $in: [query.status === 'completed' || query.status === 'failed' ? query.status : '', null] };
  const result = await scan(session, session.collections.snapshots!, filter, decodeCursor(query.cursor)?.[0] as string | undefined, query.limit, (doc) => {
    const split = (doc._id as string).indexOf('\u0000');
    const namespace = (doc._id as string).slice(0, split);
    const id = (doc._id as string).slice(split + 1);
    if (split < 0 || (query.prefix !== undefined && !id.startsWith(query.prefix))) return undefined;
    return workflowRow(namespace, id, doc.value as string, asDate(doc.updatedAt), query.status);
  });
  // The leases of the page, in one query: keyed `id` without a prefix, `prefix + U+0000 + id` with one.
  const leaseKey = (row: WorkflowRow) => (row.namespace === '' ? row.id : `${row.namespace}\u0000${row.id}`);
  const keys = result.kept.map((entry) => leaseKey(entry.row));
  if (keys.length > 0) {
    const leases = await collectionOf(session, session.collections.workflowLocks!)
      .find({ _id: { $in: keys } })
      .toArray();
    const live = new Map(leases.filter((lease) => typeof lease.owner === 'string' && asDate(lease.expiresAt)! > now).map((lease) => [lease._id, lease]));
    for (const { row } of result.kept) {
      const lease = live.get(leaseKey(row));
      if (lease) Object.assign(row, { leaseOwner: lease.owner, leaseExpiresInMs: (lease.expiresAt as Date).getTime() - now.getTime() });
    }
  }
  return pageOf(result, (id) => [id]);
}

export async function workflow(session: MongoSession, namespace: string, id: string): Promise<unknown> {
  const doc = await collectionOf(session, session.collections.snapshots!).findOne({ _id: `${namespace}\u0000${id}` });
  return typeof doc?.value === 'string' ? JSON.parse(doc.value) : null;
}

/** Live leases by default (`--status expired` or `all`), of the lock collection, then the workflow leases. */
export async function locks(session: MongoSession, query: InspectQuery): Promise<Page<LockRow>> {
  if (query.olderThanMs !== undefined) noWriteTime('lock');
  const now = await session.now();
  const status = query.status ?? 'held';
  const after = decodeCursor(query.cursor) as [string, string] | undefined;
  const tables = ['locks', 'workflowLocks'] as const;
  const items: LockRow[] = [];
  for (const table of tables.slice(after ? tables.indexOf(after[0] as (typeof tables)[number]) : 0)) {
    // A lock document stays for ever (its fence must never go back); `owner` is there while granted.
    const filter: Filter<Keyed> = { owner: { $type: 'string' }, ...idRange(query.prefix ?? '') };
    if (status === 'held') filter.expiresAt = { $gt: now };
    else if (status === 'expired') filter.expiresAt = { $lte: now };
    const result = await scan(session, session.collections[table]!, filter, after?.[0] === table ? after[1] : undefined, query.limit - items.length, (doc) => ({
      key: doc._id as string,
      owner: doc.owner as string,
      fence: String(doc.fence),
      expiresInMs: (asDate(doc.expiresAt)?.getTime() ?? now.getTime()) - now.getTime(),
      table,
    }));
    items.push(...result.kept.map((entry) => entry.row));
    if (result.more) return { items, nextCursor: encodeCursor([table, items.at(-1)!.key]) };
  }
  return { items, nextCursor: null };
}

export async function breakers(session: MongoSession, query: InspectQuery): Promise<Page<BreakerRow>> {
  if (query.olderThanMs !== undefined) noWriteTime('circuit-breaker');
  const now = await session.now();
  const result = await scan(session, session.collections.circuitBreaker!, idRange(query.prefix ?? ''), decodeCursor(query.cursor)?.[0] as string | undefined, query.limit, (doc) => {
    // As the store reports it: an open circuit past its cool-down reads half-open.
    const openUntil = asDate(doc.openUntil);
    const state = doc.state === 'open' && openUntil !== null && openUntil <= now ? 'half-open' : String(doc.state);
    if (query.status !== undefined && state !== query.status) return undefined;
    return { key: doc._id, state, failures: Number(doc.failureCount ?? 0), lastFailure: asDate(doc.lastFailureTime)?.toISOString() ?? null, openUntil: openUntil?.toISOString() ?? null };
  });
  return pageOf(result, (id) => [id]);
}

/** Live records: an expired one is invisible to the store and only waits for the TTL monitor. */
export async function idempotency(session: MongoSession, query: InspectQuery): Promise<Page<IdempotencyRow>> {
  if (query.olderThanMs !== undefined) noWriteTime('idempotency');
  const now = await session.now();
  const filter: Filter<Keyed> = { ...idRange(query.prefix ?? '') };
  if (query.status !== undefined) filter.status = query.status;
  const result = await scan(session, session.collections.idempotency!, filter, decodeCursor(query.cursor)?.[0] as string | undefined, query.limit, (doc) => {
    const expiresAt = asDate(doc.expiresAt);
    if (expiresAt !== null && expiresAt <= now) return undefined;
    // An in-flight claim keeps its lease in leaseUntil (earlier versions: expiresAt).
    const until = doc.status === 'in-flight' ? (asDate(doc.leaseUntil) ?? expiresAt) : expiresAt;
    return { key: doc._id as string, status: String(doc.status), ageMs: null, expiresInMs: until === null ? null : until.getTime() - now.getTime() };
  });
  return pageOf(result, (id) => [id]);
}

/**
 * Items per process and state (the current version of each item), with the oldest entry. The
 * documents stream through in batches and only the groups are kept.
 */
export async function processes(session: MongoSession, query: InspectQuery): Promise<Page<ProcessRow>> {
  if (query.olderThanMs !== undefined) noWriteTime('process (use --status)');
  const now = await session.now();
  const filter: Filter<Keyed> = { current: true };
  if (query.status !== undefined) filter.state = query.status;
  const groups = new Map<string, ProcessRow>();
  for await (const doc of collectionOf(session, session.collections.process!).find(filter).batchSize(1000)) {
    if (typeof doc.process !== 'string' || (query.prefix !== undefined && !doc.process.startsWith(query.prefix))) continue;
    const key = `${doc.process}\u0000${doc.state}`;
    const group = groups.get(key) ?? { process: doc.process, state: String(doc.state), items: 0, leased: 0, oldest: null };
    group.items++;
    if (asDate(doc.leaseUntil) !== null && (doc.leaseUntil as Date) > now) group.leased++;
    const at = asDate(doc.at)?.toISOString() ?? null;
    if (at !== null && (group.oldest === null || at < group.oldest)) group.oldest = at;
    groups.set(key, group);
  }
  return { items: [...groups.values()].sort((a, b) => (a.process === b.process ? (a.state < b.state ? -1 : 1) : a.process < b.process ? -1 : 1)), nextCursor: null };
}

/** Entries per cache prefix (`_id` = prefix + U+0000 + key), and the expired ones the TTL monitor has not removed yet. */
export async function caches(session: MongoSession, query: InspectQuery): Promise<Page<CacheRow>> {
  const now = await session.now();
  const groups = new Map<string, CacheRow>();
  for await (const doc of collectionOf(session, session.collections.cache!).find(idRange(query.prefix ?? '')).batchSize(1000)) {
    if (typeof doc._id !== 'string') continue;
    const prefix = doc._id.slice(0, Math.max(0, doc._id.indexOf('\u0000')));
    const group = groups.get(prefix) ?? { prefix, entries: 0, expired: 0 };
    group.entries++;
    const expiresAt = asDate(doc.expiresAt);
    if (expiresAt !== null && expiresAt <= now) group.expired++;
    groups.set(prefix, group);
  }
  return { items: [...groups.values()].sort((a, b) => (a.prefix < b.prefix ? -1 : 1)), nextCursor: null };
}

/**
 * Workflows of createMongoPersistence: key-value documents `{ _id: prefix + id, value: JSON
 * text }` under the persistence's prefix (`--namespace`, default `workflow:state:`), live ones.
 */
async function stateWorkflows(session: MongoSession, query: InspectQuery, now: Date): Promise<Page<WorkflowRow>> {
  const namespace = query.namespace ?? DEFAULT_STATE_PREFIX;
  const filter: Filter<Keyed> = { value: { $type: 'string' }, ...idRange(namespace + (query.prefix ?? '')) };
  if (query.olderThanMs !== undefined) filter.updatedAt = { $lt: new Date(now.getTime() - query.olderThanMs) };
  const after = decodeCursor(query.cursor)?.[0] as string | undefined;
  const result = await scan(session, session.collections.kv!, filter, after === undefined ? undefined : namespace + after, query.limit, (doc) => {
    const expiresAt = asDate(doc.expiresAt);
    if (expiresAt !== null && expiresAt <= now) return undefined;
    return workflowRow(namespace, doc._id.slice(namespace.length), doc.value as string, asDate(doc.updatedAt), query.status);
  });
  return pageOf(result, (id) => [id.slice(namespace.length)]);
}
