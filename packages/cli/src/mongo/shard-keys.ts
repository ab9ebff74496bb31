import type { MongoCollectionSpec, MongoShardKey } from '@stowage/mongo';
import type { Document } from 'mongodb';
import type { Finding } from '../model.js';
import { loadPeer } from '../peers.js';
import type { MongoSession } from './session.js';
import { reason } from './privileges.js';

/*
 * `stowage doctor` on MongoDB, shard keys: each collection's shard key as the cluster's
 * `config.collections` holds it, against the one `indexSpecs()` of @stowage/mongo documents
 * (README "Deployments", "Sharding"): every single-document write stowage sends names that key
 * by equality, and the unique indexes start with it.
 */

/** `{"_id":"hashed"}`, for messages. */
const show = (key: Document) => JSON.stringify(key);

/**
 * Whether a collection sharded on `actual` keeps the promises of `documented`: the same fields in
 * the same order and kinds, or `{ _id: 1 }` (ranges) for `{ _id: 'hashed' }`: writes name `_id`
 * either way.
 */
export function keeps(documented: MongoShardKey, actual: Document): boolean {
  const wanted = Object.entries(documented);
  const got = Object.entries(actual);
  return (
    wanted.length === got.length &&
    wanted.every(([field, kind], at) => {
      const [actualField, actualKind] = got[at]!;
      if (field !== actualField) return false;
      if (kind === 'hashed') return actualKind === 'hashed' || (field === '_id' && Number(actualKind) === 1);
      return Number(actualKind) === kind;
    })
  );
}

/**
 * The findings of the shard-key check. `sharded`: the `config.collections` documents of the
 * database's namespaces (`{ _id: 'db.collection', key, dropped? }`), or why they could not be read.
 */
export function shardKeyFindings(database: string, specs: readonly MongoCollectionSpec[], sharded: Document[] | { unknown: string }): Finding[] {
  if (!Array.isArray(sharded)) return [{ severity: 'warn', check: 'shard keys', message: `could not check shard keys: ${sharded.unknown}` }];
  const byNamespace = new Map(sharded.filter((entry) => entry.dropped !== true).map((entry) => [String(entry._id), entry.key as Document]));
  const findings: Finding[] = [];
  const matching: string[] = [];
  for (const spec of specs) {
    const key = byNamespace.get(`${database}.${spec.collection}`);
    if (key === undefined) continue;
    if (keeps(spec.shardKey, key)) {
      matching.push(`${spec.collection} ${show(key)}`);
      continue;
    }
    const unique = spec.indexes.find((index) => index.unique);
    findings.push({
      severity: 'error',
      check: 'shard keys',
      message:
        `${spec.collection} is sharded on ${show(key)}, where stowage's writes name ${show(spec.shardKey)} by equality: ` +
        'its upserts and findAndModify without the shard key are refused before MongoDB 7.1 and sent to every shard after' +
        (unique ? `, and its unique index ${show(unique.key)} must start with the shard key` : '') +
        `; reshard it on ${show(spec.shardKey)} (indexSpecs() shardKey)`,
    });
  }
  const summary = matching.length === 0 ? 'no collection of stowage is sharded' : `${matching.length} collection(s) sharded on the documented key (${matching.join(', ')})`;
  if (findings.length === 0) findings.push({ severity: 'ok', check: 'shard keys', message: `${summary}; the others live on the database's primary shard` });
  return findings;
}

/** The shard-key check of `doctor`; `topology` says what the deployment is when it is not a sharded cluster. */
export async function shardKeyCheck(session: MongoSession, isShardedCluster: boolean, topology: string): Promise<Finding[]> {
  const { indexSpecs } = await loadPeer<typeof import('@stowage/mongo')>('@stowage/mongo');
  const specs = indexSpecs(session.collections);
  if (!isShardedCluster) {
    const byKey = new Map<string, string[]>();
    for (const spec of specs) byKey.set(show(spec.shardKey), [...(byKey.get(show(spec.shardKey)) ?? []), spec.collection]);
    const documented = [...byKey].map(([key, collections]) => `${key} for ${collections.join(', ')}`).join('; ');
    return [{ severity: 'info', check: 'shard keys', message: `not a sharded cluster (${topology}): nothing is sharded. To shard, use the keys indexSpecs() returns as shardKey: ${documented}` }];
  }
  const database = session.db.databaseName;
  let sharded: Document[] | { unknown: string };
  try {
    sharded = await session.client
      .db('config')
      .collection('collections')
      .find({ _id: { $in: specs.map((spec) => `${database}.${spec.collection}`) } as never }, { projection: { key: 1, dropped: 1 } })
      .toArray();
  } catch (error) {
    sharded = { unknown: `reading config.collections: ${reason(error)}` };
  }
  return shardKeyFindings(database, specs, sharded);
}
