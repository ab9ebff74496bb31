import { globToRegexSource, type Glob } from '@stowage/core/adapter';
import type { ClientSession, Collection, Document, Filter, UpdateResult } from 'mongodb';
import type { MongoDialect, ValueWrite } from '../dialects/dialect.js';
import type { KeyValueDocument } from '../documents.js';
import { isDuplicateKeyError } from '../errors.js';

/*
 * What the stores of value documents (key-value, snapshots, cache, idempotency) share: point
 * reads, compare-and-set, and `_id`s and filters of namespaces and globs.
 */

/** The document with this `_id` if it is live, else `null` (projection: inclusion). */
export async function readLive<TDocument extends Document>(
  collection: Collection<TDocument>,
  dialect: MongoDialect,
  _id: string,
  projection: Document,
): Promise<TDocument | null> {
  const read = dialect.readValue(_id, projection);
  const document = await collection.findOne(read.filter as Filter<TDocument>, { projection: read.projection });
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
 * `_id` filter for the keys matching `glob` under `start` (`''` for a store without
 * namespaces), after the key `after` when given: an equality for a glob without wildcards,
 * else the index range of its literal start, narrowed by an anchored, escaped regular
 * expression unless the glob is that start followed by `*`.
 */
export function globFilter(glob: Glob, start: string, after: string | null = null): Document {
  const bounds: Document = glob.isLiteral ? { $eq: start + glob.prefix } : { ...idsStartingWith(start + glob.prefix)._id };
  const onlyTrailingRun = glob.tokens.length === (glob.prefix === '' ? 1 : 2) && glob.tokens.at(-1)!.kind === 'anyRun';
  if (!glob.isLiteral && !onlyTrailingRun) bounds.$regex = globToRegexSource(glob.pattern, 'pcre', start);
  if (after !== null) bounds.$gt = start + after;
  return Object.keys(bounds).length === 0 ? {} : { _id: bounds };
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
