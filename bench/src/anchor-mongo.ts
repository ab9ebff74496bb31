/**
 * The outside world of the Mongo point operations: the anchor collections (a stowage
 * key-value collection and cache of `rows` keys, filled through stowage's own `setMany`), the
 * driver's obvious single command per call, and its plain `find` by `_id` as the anchor.
 */
import type Keyv from 'keyv';
import type { Collection, Document, MongoClient } from 'mongodb';
import { READ_TARGETS, WRITE_TARGETS, untilFree, type AnchorStores, type OthersFor } from './ops.ts';
import type { Impl } from './types.ts';
import { CACHE_VALUE, KV_VALUE, cacheValue, kvValue, type KeySpace } from './workload.ts';

export const ANCHOR_COLLECTIONS = { kv: 'anchor_kv', cache: 'anchor_cache' } as const;
export const ANCHOR_CACHE_PREFIX = 'bench';
/**
 * The raw lock's collection. Its acquire is the obvious driver code, on the client's clock: a
 * `findAndModify` upsert that takes a free lease and adds one to the fence, then an `update` that
 * releases it (atomic only where findAndModify is: MongoDB, not jongodb or FerretDB 1.x).
 */
const RAW_LOCKS = 'raw_locks';
/** A cache document's `_id`: its prefix, U+0000, the key (see @stowage/mongo's cache). */
const cacheId = (key: string) => `${ANCHOR_CACHE_PREFIX}\u0000${key}`;

/** Writes keys "1" … "rows" through stowage itself (its document layout is the adapter's business). */
export async function fillAnchorCollections(stores: AnchorStores, rows: number, chunk: number): Promise<void> {
  for (let start = 1; start <= rows; start += chunk) {
    const keys = Array.from({ length: Math.min(chunk, rows - start + 1) }, (_, i) => String(start + i));
    await stores.kv.setMany(keys.map((key) => ({ key, value: KV_VALUE })));
    await Promise.all(keys.map((key) => stores.cache.set(key, CACHE_VALUE)));
  }
}

export function keyvAnchorSeeder(rows: number, chunk: number) {
  return async (keyv: Keyv, value: unknown): Promise<void> => {
    for (let start = 1; start <= rows; start += chunk) {
      const keys = Array.from({ length: Math.min(chunk, rows - start + 1) }, (_, i) => String(start + i));
      await keyv.setMany(keys.map((key) => ({ key, value })));
    }
  };
}

/** A document is live without an expiry or with one still ahead, decided on the client (see below). */
function liveValue(found: Document | null, field: string): unknown {
  if (found === null) return null;
  const expiresAt = found.expiresAt as Date | null | undefined;
  return expiresAt instanceof Date && expiresAt.getTime() <= Date.now() ? null : found[field];
}

/**
 * The obvious command per call, and the plain `find` by `_id` as the anchor. The reads find by
 * `_id` and check the expiry on the client: an expiry filter in the query (`$or` of a missing
 * and a future `expiresAt`) is the other obvious way, but FerretDB cannot use the `_id` index
 * with it and reads the whole collection (11 ms a call at 1,000 documents), which would
 * measure FerretDB. The writes are the upsert a user would send, with the same JSON handling.
 */
export function mongoRawAndAnchors(client: MongoClient, database: string, lockTarget: number | null): OthersFor {
  const db = client.db(database);
  const locks: Collection<Document> = db.collection(RAW_LOCKS);
  const kv: Collection<Document> = db.collection(ANCHOR_COLLECTIONS.kv);
  const cache: Collection<Document> = db.collection(ANCHOR_COLLECTIONS.cache);
  const raw = (run: Impl['run'], target: number): Impl => ({ name: 'raw mongodb, 1 command', kind: 'raw', target, run, knownRoundTrips: 1 });
  const anchor = (run: Impl['run']): Impl => ({ name: 'raw find by _id', kind: 'anchor', target: READ_TARGETS.anchor, run, knownRoundTrips: 1 });
  const projection = { value: 1, expiresAt: 1 };
  return (op: string, keys: KeySpace): Impl[] => {
    switch (op) {
      case 'kv.get':
        return [
          raw(async (i) => liveValue(await kv.findOne({ _id: keys.key(i) as never }, { projection }), 'value') ?? null, READ_TARGETS.raw),
          anchor((i) => kv.findOne({ _id: keys.key(i) as never })),
        ];
      case 'kv.exists':
        return [
          raw(async (i) => liveValue(await kv.findOne({ _id: keys.key(i) as never }, { projection: { _id: 1, expiresAt: 1 } }), '_id') !== null, READ_TARGETS.raw),
          anchor((i) => kv.findOne({ _id: keys.key(i) as never })),
        ];
      case 'cache.get':
        return [
          raw(async (i) => {
            const text = liveValue(await cache.findOne({ _id: cacheId(keys.key(i)) as never }, { projection }), 'value');
            return typeof text === 'string' ? JSON.parse(text) : null;
          }, READ_TARGETS.raw),
          anchor((i) => cache.findOne({ _id: cacheId(keys.key(i)) as never })),
        ];
      case 'kv.set':
        return [
          raw(
            (i) =>
              kv.updateOne(
                { _id: keys.key(i) as never },
                { $set: { value: kvValue(i), updatedAt: new Date() }, $inc: { version: 1 }, $unset: { expiresAt: '' } },
                { upsert: true },
              ),
            WRITE_TARGETS.raw,
          ),
        ];
      case 'cache.set':
        return [
          raw(
            (i) =>
              cache.updateOne({ _id: cacheId(keys.key(i)) as never }, { $set: { value: JSON.stringify(cacheValue(i)) }, $unset: { expiresAt: '' } }, { upsert: true }),
            WRITE_TARGETS.raw,
          ),
        ];
      case 'lock.acquire+release':
        return [
          {
            name: 'raw mongodb, findAndModify + update',
            kind: 'raw',
            target: lockTarget,
            knownRoundTrips: 2,
            run: async (i) => {
              const key = keys.key(i) as never;
              const owner = `raw-${i}`;
              const now = Date.now();
              const free = { $or: [{ expiresAt: null }, { expiresAt: { $lte: new Date(now) } }] };
              // A held lock makes the upsert collide on `_id`: a straggler meeting its own key again tries once more.
              await untilFree(
                () =>
                  locks
                    .findOneAndUpdate({ _id: key, ...free }, { $set: { owner, expiresAt: new Date(now + 30_000) }, $inc: { fence: 1 } }, { upsert: true, returnDocument: 'after' })
                    .catch((error: unknown) => {
                      if ((error as { code?: unknown }).code === 11000) return null;
                      throw error;
                    }),
                String(key),
              );
              await locks.updateOne({ _id: key, owner }, { $unset: { owner: '', expiresAt: '' } });
            },
          },
        ];
      default:
        return [];
    }
  };
}
