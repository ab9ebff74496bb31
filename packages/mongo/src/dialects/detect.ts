import { MeasuredClock, sleep } from '@stowage/core/adapter';
import type { Collection, Db, Document, MongoClient } from 'mongodb';
import { isTransientError, isUnsupportedError } from '../errors.js';
import { MAJORITY } from '../options.js';
import { inNewTransaction } from '../transactions.js';
import { ClassicDialect } from './classic.js';
import type { MongoDialect, MongoDialectName, MongoDialectOption } from './dialect.js';
import { PipelineDialect } from './pipeline.js';

/** What the server supports, detected once per client and database. */
export interface ServerFeatures {
  dialect: MongoDialectName;
  /** Change streams open on this server (probed: a replica-set name alone does not promise them). */
  changeStreams: boolean;
  /**
   * Multi-document transactions commit on this server (probed) and isolate like MongoDB's.
   * False on jongodb (recognised from `buildInfo`, or its `hello`: see {@link detect}), which
   * commits a transaction by writing back the collection as the transaction saw it: a write to
   * another document that landed meanwhile is lost (`setMany` beside a `set` on another key
   * lost about 1 in 8 of those sets).
   */
  transactions: boolean;
  /**
   * Multi-document transactions run on this server at all (the probe committed), isolated like
   * MongoDB's or not (jongodb): what a view bound to the caller's own session needs (see
   * `withTransaction` in the README). False on standalone servers and FerretDB 1.x.
   */
  runsTransactions: boolean;
  /**
   * Conditional updates of one document are atomic. True for MongoDB; false for FerretDB 1.x,
   * which runs every update as a read followed by a separate write (concurrent `$inc`s and
   * compare-and-sets can be lost there). Recognised from `buildInfo`, which FerretDB 1.x extends
   * with `ferretdbVersion`/`ferretdbFeatures`.
   */
  atomicUpdates: boolean;
  /**
   * The server reports its time (`hello.localTime`), so `clock` is the server's clock. False on
   * servers that report no time anywhere (jongodb): `clock` is then this process's clock.
   */
  serverClock: boolean;
  /**
   * A TTL index is enforced: a TTL monitor deletes expired documents. False on jongodb
   * (recognised as for `transactions`), which accepts TTL indexes but never deletes anything.
   */
  ttlMonitor: boolean;
  /** The server's clock, as an offset from this process's; refreshed in the background. */
  clock: MeasuredClock;
}

/** The dialect object for the features detected: the one place that picks an implementation. */
export function dialectFor(features: ServerFeatures): MongoDialect {
  return features.dialect === 'pipeline' ? new PipelineDialect(features.clock) : new ClassicDialect(features.clock, features.atomicUpdates);
}

const featuresByClient = new WeakMap<MongoClient, Map<string, Promise<ServerFeatures>>>();

/**
 * Detects what the server supports, once per client, database and dialect option, with
 * commands of the Stable API (V1), so a client created with `serverApi: { version: '1',
 * strict: true }` (the Atlas snippet) detects like any other:
 *
 * - `hello`: the topology, and the server's clock (`localTime`);
 * - `buildInfo` (not with a strict Stable API client, and its failure is ignored): it only
 *   recognises FerretDB 1.x (no atomic updates) and jongodb (no TTL monitor, no isolated
 *   transactions; behind a strict client, by its `hello` without `localTime`);
 * - with `dialect: 'auto'`, three probes that match no document: an update pipeline, a `$expr`
 *   filter and `$$NOW` (`$documents`);
 * - on replica sets and sharded clusters: a change stream opened and closed, and an empty
 *   transaction.
 *
 * A probe the server answers with "not supported" ({@link isUnsupportedError}) counts as
 * unsupported; a transient error (network, failover, interruption) is tried again, twice; any
 * other error fails detection, and the next operation tries again.
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
  // The primary, whatever the client's read preference: the server the stores write to is the one probed.
  const collection = db.collection<{ _id: number }>(probeCollection, { readPreference: 'primary' });
  const auto = option === 'auto';
  const strict = db.client.options.serverApi?.strict === true;
  const [hello, buildInfo, pipelineUpdates, exprReads, now] = await Promise.all([
    retryTransient(() => db.command({ hello: 1 })),
    // Not part of the Stable API: a strict client does not send it (a FerretDB 1.x behind such a
    // client is then not recognised; FerretDB does not enforce strictness anyway).
    strict ? ({} as Document) : db.command({ buildInfo: 1 }).catch((): Document => ({})),
    auto ? probe(() => collection.updateOne(NO_DOCUMENT, [{ $set: { probe: '$$NOW' } }])) : option === 'pipeline',
    auto
      ? probe(() => collection.find({ ...NO_DOCUMENT, $expr: { $gt: [{ $ifNull: ['$expiresAt', '$$NOW'] }, '$$NOW'] } }).limit(1).toArray())
      : option === 'pipeline',
    auto ? probeResult(() => db.aggregate([{ $documents: [{}] }, { $project: { _id: 0, now: '$$NOW' } }], { readPreference: 'primary' }).toArray()) : null,
  ]);
  const nowIsDate = !auto || (Array.isArray(now) && now[0]?.now instanceof Date);
  const dialect: MongoDialectName = pipelineUpdates && exprReads && nowIsDate ? 'pipeline' : 'classic';

  const replicated = typeof hello.setName === 'string' || hello.msg === 'isdbgrid';
  const [changeStreams, transactions] = replicated
    ? await Promise.all([
        // A role without the changeStream privilege (Unauthorized 13) gets polling, not a failed start.
        probe(() => openAndCloseChangeStream(db, probeCollection)).catch((error: unknown) => {
          if ((error as { code?: unknown }).code === 13) return false;
          throw error;
        }),
        typeof hello.logicalSessionTimeoutMinutes === 'number' ? probe(() => emptyTransaction(db.client, collection)) : false,
      ])
    : [false, false];

  const serverClock = hello.localTime instanceof Date && !Number.isNaN(hello.localTime.getTime());
  const clock = serverClock
    ? new MeasuredClock(async () => (await db.command({ hello: 1 })).localTime as Date)
    : new MeasuredClock(async () => Date.now()); // no server time anywhere: this process's clock
  // Measured over the now-open connection (the first reply may include connecting), so the
  // offset is accurate to half a round trip: both dialects take versions and some dates from it.
  await retryTransient(() => clock.measure());
  // A strict Stable API client cannot send buildInfo: there a server whose hello has no
  // `localTime` (every MongoDB reports it) is taken for jongodb, so its transactions are not trusted.
  const jongodb = String(buildInfo.version ?? '').endsWith('-jongodb') || (strict && !serverClock);
  return {
    dialect,
    changeStreams,
    transactions: transactions && !jongodb,
    runsTransactions: transactions,
    atomicUpdates: !isFerretDbV1(buildInfo),
    serverClock,
    ttlMonitor: !jongodb,
    clock,
  };
}

/** True when `operation` runs, false when the server says it does not support it. */
export async function probe(operation: () => Promise<unknown>): Promise<boolean> {
  return (await probeResult(async () => (await operation(), true))) === true;
}

/** What `operation` returns, or `false` when the server says it does not support it. */
function probeResult<T>(operation: () => Promise<T>): Promise<T | false> {
  return retryTransient(async () => {
    try {
      return await operation();
    } catch (error) {
      if (isUnsupportedError(error)) return false;
      throw error;
    }
  });
}

/** Runs `operation`, trying again (twice, after a short pause) when it fails with a transient error. */
async function retryTransient<T>(operation: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await operation();
    } catch (error) {
      if (attempt >= 3 || !isTransientError(error)) throw error;
      await sleep(100 * attempt);
    }
  }
}

/** Opens a change stream on the collection (an `aggregate` with `$changeStream`) and closes its cursor. */
async function openAndCloseChangeStream(db: Db, collection: string): Promise<void> {
  const reply = await db.command({ aggregate: collection, pipeline: [{ $changeStream: {} }], cursor: { batchSize: 0 } });
  const id: unknown = (reply.cursor as Document | undefined)?.id;
  if (id !== undefined && String(id) !== '0') await db.command({ killCursors: collection, cursors: [id] }).catch(() => undefined);
}

/** A transaction that reads nothing and commits, begun as stowage begins its own (see `inNewTransaction`). */
async function emptyTransaction(client: MongoClient, collection: Collection<{ _id: number }>): Promise<void> {
  await inNewTransaction(client, MAJORITY, (session) => collection.findOne(NO_DOCUMENT, { session }));
}

function isFerretDbV1(buildInfo: Document): boolean {
  if (!('ferretdbVersion' in buildInfo) && !('ferretdbFeatures' in buildInfo)) return false;
  const version = String(buildInfo.ferretdbVersion ?? '');
  return !/^v?([2-9]|\d{2,})\./.test(version); // 2.x and later run on PostgreSQL with DocumentDB: atomic
}
