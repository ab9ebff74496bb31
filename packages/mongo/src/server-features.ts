import { MeasuredClock, monotonicClock } from '@stowage/core';
import type { Db, Document, MongoClient } from 'mongodb';
import { isUnsupportedError } from './errors.js';

/**
 * How a store writes time-dependent documents:
 *
 * - `pipeline`: update pipelines, `$expr` reads and `$$NOW` (MongoDB >= 5.1). The server decides
 *   every expiry, lease and cool-down in the same command that reads or writes the document.
 * - `classic`: operator updates (`$set`, `$inc`, `$currentDate`) with "now" taken from an offset
 *   measured against the server's `hello.localTime`, for MongoDB-compatible servers that lack
 *   update pipelines or `$$NOW` (FerretDB 1.x, some managed "MongoDB API" services).
 */
export type MongoDialect = 'pipeline' | 'classic';

/** `auto` (default) detects the dialect once per client and database. */
export type MongoDialectOption = 'auto' | MongoDialect;

export interface ServerFeatures {
  dialect: MongoDialect;
  /** Replica set or sharded cluster: change streams and transactions are available. */
  changeStreams: boolean;
  transactions: boolean;
  /**
   * Conditional updates of one document are atomic. True for MongoDB; false for FerretDB 1.x,
   * which runs every update as a read followed by a separate write (concurrent `$inc`s and
   * compare-and-sets can be lost there). Recognised from `buildInfo`, which FerretDB 1.x extends
   * with `ferretdbVersion`/`ferretdbFeatures`.
   */
  atomicUpdates: boolean;
  /** The server's clock, as an offset from this process's; refreshed in the background. */
  clock: MeasuredClock;
}

const featuresByClient = new WeakMap<MongoClient, Map<string, Promise<ServerFeatures>>>();

/**
 * Detects what the server supports, once per client, database and dialect option. Runs five
 * commands in parallel (one round trip of wall time): `hello` (topology and the server's clock),
 * `buildInfo`, and three probes that match no document — an update pipeline, a `$expr` filter and `$$NOW`.
 * A probe the server refuses selects the classic dialect; a network error fails detection, and
 * the next operation tries again.
 */
export function serverFeatures(db: Db, probeCollection: string, option: MongoDialectOption): Promise<ServerFeatures> {
  let byDatabase = featuresByClient.get(db.client);
  if (!byDatabase) featuresByClient.set(db.client, (byDatabase = new Map()));
  const cacheKey = `${option}\u0000${db.databaseName}`;
  let features = byDatabase.get(cacheKey);
  if (!features) {
    features = detect(db, probeCollection, option);
    byDatabase.set(cacheKey, features);
    features.catch(() => byDatabase.delete(cacheKey));
  }
  return features;
}

/** A filter no stowage document matches: stowage's `_id`s are strings. */
const NO_DOCUMENT = { _id: -1 };

async function detect(db: Db, probeCollection: string, option: MongoDialectOption): Promise<ServerFeatures> {
  const clock = new MeasuredClock(async () => serverTime(await db.command({ hello: 1 })));
  const collection = db.collection<{ _id: number }>(probeCollection);
  const supported = (probe: Promise<unknown>) =>
    probe.then(
      (result) => result,
      (error: unknown) => {
        if (isUnsupportedError(error)) return false;
        throw error;
      },
    );
  const sentAt = monotonicClock.now();
  const [hello, buildInfo, pipelineUpdates, exprReads, now] = await Promise.all([
    db.command({ hello: 1 }),
    db.command({ buildInfo: 1 }),
    option === 'auto'
      ? supported(collection.updateOne(NO_DOCUMENT, [{ $set: { probe: '$$NOW' } }]).then(() => true))
      : option === 'pipeline',
    option === 'auto'
      ? supported(
          collection
            .find({ ...NO_DOCUMENT, $expr: { $gt: [{ $ifNull: ['$expiresAt', '$$NOW'] }, '$$NOW'] } })
            .limit(1)
            .toArray()
            .then(() => true),
        )
      : option === 'pipeline',
    option === 'auto'
      ? supported(db.aggregate([{ $documents: [{}] }, { $project: { _id: 0, now: '$$NOW' } }]).toArray())
      : null,
  ]);
  clock.record(serverTime(hello), sentAt, monotonicClock.now());

  const nowIsDate = option !== 'auto' || (Array.isArray(now) && now[0]?.now instanceof Date);
  const dialect: MongoDialect = pipelineUpdates === true && exprReads === true && nowIsDate ? 'pipeline' : 'classic';
  // The first reply may include connecting; the classic dialect decides expiry with this clock,
  // so it measures again over the now-open connection for an offset accurate to half a round trip.
  if (dialect === 'classic') await clock.measure();
  const replicated = typeof hello.setName === 'string' || hello.msg === 'isdbgrid';
  return {
    dialect,
    changeStreams: replicated,
    transactions: replicated && typeof hello.logicalSessionTimeoutMinutes === 'number',
    atomicUpdates: !isFerretDbV1(buildInfo),
    clock,
  };
}

function isFerretDbV1(buildInfo: Document): boolean {
  if (!('ferretdbVersion' in buildInfo) && !('ferretdbFeatures' in buildInfo)) return false;
  const version = String(buildInfo.ferretdbVersion ?? '');
  return !/^v?([2-9]|\d{2,})\./.test(version); // 2.x and later run on PostgreSQL with DocumentDB: atomic
}

function serverTime(hello: Document): Date {
  const localTime: unknown = hello.localTime;
  if (!(localTime instanceof Date) || Number.isNaN(localTime.getTime())) {
    throw new Error('the server did not report its time (hello.localTime)');
  }
  return localTime;
}
