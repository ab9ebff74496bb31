import { escapeRegex, type Glob } from '@stowage/core/adapter';
import type { ClientSession, Collection, Document, Filter, ReadConcernLike, UpdateResult } from 'mongodb';
import type { MongoDialect, ValueWrite } from '../dialects/dialect.js';
import type { KeyValueDocument } from '../documents.js';
import { isDuplicateKeyError } from '../errors.js';

/*
 * What the stores of value documents (key-value, snapshots, cache, idempotency) share: point
 * reads, compare-and-set, `_id`s of namespaces, and listings by glob.
 */

/** The document with this `_id` if it is live, else `null` (projection: inclusion; `readConcern` outside a transaction). */
export async function readLive<TDocument extends Document>(
  collection: Collection<TDocument>,
  dialect: MongoDialect,
  _id: string,
  projection: Document,
  readConcern?: ReadConcernLike,
): Promise<TDocument | null> {
  const read = dialect.readValue(_id, projection);
  const document = await collection.findOne(read.filter as Filter<TDocument>, { projection: read.projection, ...(readConcern && { readConcern }) });
  return document !== null && read.isLive(document) ? (document as TDocument) : null;
}

/**
 * Writes only against the incarnation the caller read: at `expectedVersion` when it is a
 * number, only when absent (or expired, or deleted) when it is `null`. The new version, or
 * `null` for a conflict. One command, and one or two more only when nothing was written:
 * then a read tells a conflict (the key is live) from a stored version not below this
 * process's candidate (written by another process within the same instant), which the next
 * attempt goes above.
 *
 * Inside a transaction (`session`, which `collection` is bound to) the read comes first: the
 * duplicate-key error of a live key would abort the caller's transaction, and there the read is
 * safe (a concurrent write of the key fails the transaction with a write conflict).
 */
export async function compareAndSetValue(
  collection: Collection<KeyValueDocument>,
  dialect: MongoDialect,
  write: ValueWrite,
  expectedVersion: number | null,
  session?: ClientSession,
): Promise<number | null> {
  if (expectedVersion !== null) {
    const version = dialect.nextVersion(expectedVersion);
    const { filter, update } = dialect.replaceValue(write, expectedVersion, version);
    return (await collection.updateOne(filter, update)).matchedCount === 1 ? version : null;
  }
  if (session) {
    const stored = await dialect.inspectValue(collection, write._id);
    if (stored?.live) return null;
    const version = dialect.nextVersion(stored?.version);
    const { filter, update } = dialect.createValue(write, version);
    return (await applied(collection.updateOne(filter, update, { upsert: true }))) ? version : null;
  }
  let version = dialect.nextVersion();
  for (let attempt = 1; ; attempt++) {
    const { filter, update } = dialect.createValue(write, version);
    if (await applied(collection.updateOne(filter, update, { upsert: true }))) return version;
    const stored = await dialect.inspectValue(collection, write._id);
    if (stored?.live || attempt >= 3) return null;
    version = dialect.nextVersion(stored?.version);
  }
}

/** Whether a conditional upsert wrote: it inserted or changed a document (a duplicate `_id` means it did not). */
async function applied(upsert: Promise<UpdateResult>): Promise<boolean> {
  try {
    const result = await upsert;
    return result.upsertedCount + result.modifiedCount > 0;
  } catch (error) {
    if (isDuplicateKeyError(error)) return false;
    throw error;
  }
}

/**
 * Where a namespace's `_id`s start: its prefix and U+0000. A prefix holds no U+0000 (the kit
 * checks), so the first one ends it, and `users:` (`"users:\u0000…"`) never meets
 * `users:admin:` (`"users:admin:\u0000…"`), whatever the keys.
 */
export function namespaceStart(prefix: string): string {
  return `${prefix}\u0000`;
}

/** `_id` filter: every `_id` starting with `start` (an index range; `{}` for `''`). */
export function idsStartingWith(start: string): Document {
  if (start === '') return {};
  const end = afterAllStartingWith(start);
  return { _id: end === null ? { $gte: start } : { $gte: start, $lt: end } };
}

/**
 * How a listing finds the keys matching `glob` under `start` (`''` for a store without
 * namespaces), after the key `after` when given: the `_id` filter to send, and whether the
 * server's answer is `exact` (else the store tests each key with `glob.matches`).
 *
 * The filter is an equality for a glob without wildcards, else the index range of its literal
 * start, which is exact for that start followed by one `*`. Any other glob is decided by
 * `glob.matches` (O(key × pattern), `globMatcher` in @stowage/core), never by the server's
 * regular expressions: a backtracking engine (MongoDB's PCRE, jongodb's) tries every way of
 * splitting a key between the `*`s of an anchored expression (`*a*a*a*a*a*a*a*b` against one
 * key of fifty `a`s: no answer from jongodb in 30 s, the whole server stuck on it), FerretDB's
 * RE2 took 10 to 20 s for one long pattern over 2,000 keys of 1 KB, and MongoDB refuses an
 * expression over 16 KiB. The server only narrows the range with the longest literal after the first wildcard
 * (its first {@link MAX_SEARCHED_LITERAL} characters): an unanchored escaped expression, which
 * every engine runs as a plain substring search.
 */
export function globQuery(glob: Glob, start: string, after: string | null = null): { filter: Document; exact: boolean } {
  const bounds: Document = glob.isLiteral ? { $eq: start + glob.prefix } : { ...idsStartingWith(start + glob.prefix)._id };
  const rest = glob.tokens.slice(glob.prefix === '' ? 0 : 1); // what follows the literal start
  const exact = glob.isLiteral || (rest.length === 1 && rest[0]!.kind === 'anyRun');
  if (!exact) {
    const longest = rest.reduce((best, token) => (token.kind === 'literal' && token.text.length > best.length ? token.text : best), '');
    // Cut at a code point: half a surrogate pair would reach the server as U+FFFD and find nothing.
    if (longest !== '') bounds.$regex = escapeRegex(Array.from(longest).slice(0, MAX_SEARCHED_LITERAL).join(''));
  }
  if (after !== null) bounds.$gt = start + after;
  return { filter: Object.keys(bounds).length === 0 ? {} : { _id: bounds }, exact };
}

/** Characters of a literal the server searches for: escaped, at most 4 bytes each, far below MongoDB's 16 KiB limit on an expression. */
const MAX_SEARCHED_LITERAL = 1000;

/**
 * The documents (with `projection`) whose key, the `_id` after `start`, matches `glob` and
 * that are `live` (the dialect's filter). Without `page`: all of them, in no order. With
 * `page`: the first `limit` after the key `after`, in `_id` order (a scan's page). Where the
 * server's filter is exact (see {@link globQuery}) that is one `find` with a sort and a limit;
 * where the store decides the match, one cursor in `_id` order read a batch at a time until the
 * page is full or the range ends, so a page costs what it reads.
 */
export async function findMatching<TDocument extends { _id: string }>(
  collection: Collection<TDocument>,
  glob: Glob,
  start: string,
  live: Document,
  projection: Document,
  page?: { after: string | null; limit: number },
): Promise<TDocument[]> {
  const { filter, exact } = globQuery(glob, start, page?.after ?? null);
  const cursor = collection.find({ ...filter, ...live } as Filter<TDocument>, { projection });
  const matches = (document: TDocument) => exact || glob.matches(document._id.slice(start.length));
  if (page === undefined) return ((await cursor.toArray()) as TDocument[]).filter(matches);
  if (exact) return (await cursor.sort({ _id: 1 }).limit(page.limit).toArray()) as TDocument[];
  const found: TDocument[] = [];
  // Batches of the page's size (100 at least: a batch is a round trip); leaving the loop closes the cursor.
  for await (const document of cursor.sort({ _id: 1 }).batchSize(Math.max(page.limit, 100))) {
    if (matches(document as TDocument) && found.push(document as TDocument) === page.limit) break;
  }
  return found;
}

/**
 * The first string (in code point order, MongoDB's order of strings) above every string that
 * starts with `start`; `null` when there is none.
 */
function afterAllStartingWith(start: string): string | null {
  const points = Array.from(start);
  while (points.length > 0) {
    const last = points.pop()!.codePointAt(0)!;
    if (last < 0x10ffff) return points.join('') + String.fromCodePoint(last === 0xd7ff ? 0xe000 : last + 1);
  }
  return null;
}
