import { createHash } from 'node:crypto';
import { MongoClient, type Db, type MongoClientOptions } from 'mongodb';
import type { JsonObject } from '@stowage/core';
import { MongoCacheProvider, MongoIdempotencyStore, MongoKeyValueStore, MongoLockProvider, MongoSnapshotStore } from '@stowage/mongo';
import { MongoGuardStore } from '../guard.ts';
import type { Backend, BackendTarget, CanaryAccess, OpenOptions, SharedConnection } from './types.ts';

/**
 * `@stowage/mongo` against the server of STOWAGE_MONGO_URL (FerretDB in this project's CI), or
 * (row `jongodb`) against jongodb, the second stand-in, started for the run. The run's
 * collections live in a database of its own, named by the namespace.
 */
export function mongoBackend(target: BackendTarget): Backend & { canary: CanaryAccess } {
  const url = target.url!;
  const endpoint = new URL(url.replace(/^mongodb(\+srv)?:/, 'http:'));

  const options = (open: OpenOptions | undefined) => {
    const timeout = open?.timeoutMs;
    const clientOptions: MongoClientOptions = { appName: 'stowage-reliability' };
    if (timeout !== undefined) {
      // Finding a server, opening a connection, and waiting on a connection whose packets
      // vanish (socketTimeoutMS: without it the driver waits forever). timeoutMS is not used:
      // driver 7 ignores it with a deprecation warning.
      Object.assign(clientOptions, { serverSelectionTimeoutMS: timeout, connectTimeoutMS: timeout, socketTimeoutMS: timeout });
    }
    return {
      ...(open?.shared ? { client: open.shared.handle as MongoClient } : { url: open?.url ?? url, clientOptions }),
      database: open?.schema ?? target.namespace,
      ...(open?.table !== undefined ? { collection: open.table } : {}),
    };
  };

  return {
    target,
    crossProcess: true,
    address: { host: endpoint.hostname, port: Number(endpoint.port || 27017) },
    timeoutSettings: 'clientOptions: { serverSelectionTimeoutMS, connectTimeoutMS, socketTimeoutMS }',
    kv: async (open) => new MongoKeyValueStore(options(open)),
    snapshots: async (open) =>
      new MongoSnapshotStore<JsonObject>({ ...options(open), ...(open?.prefix !== undefined ? { prefix: open.prefix } : {}) }),
    locks: async (open) => new MongoLockProvider(options(open)),
    cache: async (open) => new MongoCacheProvider({ ...options(open), prefix: open?.prefix ?? 'cache:' }),
    idempotency: async (open) => new MongoIdempotencyStore(options(open)),
    guard: async () => {
      const client = new MongoClient(url, { appName: 'stowage-reliability-guard' });
      await client.connect();
      return new MongoGuardStore(client.db(target.namespace), 'reliability_guard', () => client.close());
    },
    sharedConnection: async () => sharedClient(url),
    serverAtomicity: () => probeAtomicity(url, target.namespace),
    // By name, not by listing: listDatabases touches every database on the server, and on
    // FerretDB one busy database elsewhere can block it.
    cleanup: () =>
      withMongo(url, async (client) => {
        for (const name of [target.namespace, `${target.namespace}_by`, `${target.namespace}_canary`]) {
          await client.db(name).dropDatabase().catch(ignoreMissingCommand); // jongodb has none: it is stopped after the run
        }
      }),
    close: async () => {},
    canary: mongoCanary(url, target.namespace),
  };
}

async function sharedClient(url: string): Promise<SharedConnection> {
  const client = new MongoClient(url, { appName: 'stowage-reliability-byo', maxPoolSize: 4 });
  await client.connect();
  return {
    handle: client,
    listenerCounts: () => Object.fromEntries(client.eventNames().map((name) => [String(name), client.listenerCount(name)])),
    checkedOut: () => 0,
    transaction: async (fn) => {
      const session = client.startSession();
      try {
        return await session.withTransaction(() => fn(session));
      } finally {
        await session.endSession();
      }
    },
    close: () => client.close(),
  };
}

/** Four clients × 100 `$inc` on one document, at once: the server must end at 400. */
async function probeAtomicity(url: string, namespace: string): Promise<string | null> {
  const clients = await Promise.all(Array.from({ length: 4 }, () => new MongoClient(url, { appName: 'stowage-reliability-probe' }).connect()));
  const probe = clients[0]!.db(namespace).collection<{ _id: string; n: number }>('reliability_atomicity_probe');
  try {
    await probe.deleteMany({});
    await probe.insertOne({ _id: 'counter', n: 0 });
    await Promise.all(
      clients.map(async (client) => {
        const collection = client.db(namespace).collection<{ _id: string; n: number }>('reliability_atomicity_probe');
        for (let i = 0; i < 100; i++) await collection.updateOne({ _id: 'counter' }, { $inc: { n: 1 } });
      }),
    );
    const final = (await probe.findOne({ _id: 'counter' }))?.n;
    if (final === 400) return null;
    const build = await clients[0]!.db('admin').command({ buildInfo: 1 });
    const server = 'ferretdbVersion' in build ? `FerretDB (reporting MongoDB ${String(build.version)})` : `MongoDB ${String(build.version)}`;
    return `${server} loses concurrent updates of one document: 4 clients × 100 $inc ended at ${final}, not 400`;
  } finally {
    await probe.drop().catch(() => undefined);
    await Promise.all(clients.map((client) => client.close()));
  }
}

/** `CommandNotFound` (59): a server without the command (jongodb: no dropDatabase, no listCollections). */
function ignoreMissingCommand(error: unknown): void {
  if ((error as { code?: unknown }).code !== 59) throw error;
}

/** The database's collections; where the server cannot list them (jongodb), the ones the check writes. */
async function collectionNames(db: Db, known: string[]): Promise<string[]> {
  try {
    return (await db.listCollections({}, { nameOnly: true }).toArray()).map((c) => c.name).sort();
  } catch (error) {
    ignoreMissingCommand(error);
    return known;
  }
}

export async function withMongo<T>(url: string, fn: (client: MongoClient) => Promise<T>): Promise<T> {
  const client = new MongoClient(url, { appName: 'stowage-reliability-admin' });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/**
 * A database of its own (`<namespace>_canary`) with documents stowage never writes. The digest
 * covers them and every document of every collection in the bystander database
 * (`<namespace>_by`), where the hostile-input check keeps stowage data it must not disturb.
 */
function mongoCanary(url: string, namespace: string): CanaryAccess {
  const canaryDb = `${namespace}_canary`;
  return {
    plant: () =>
      withMongo(url, async (client) => {
        const docs = Array.from({ length: 20 }, (_, id) => ({
          _id: id,
          body: `row ${id} '"; DROP TABLE x; -- %_*?`,
          data: { id, gt: { a: [id, null, true] } },
        }));
        await client.db(canaryDb).collection<{ _id: number }>('canary').insertMany(docs);
      }),
    digest: () =>
      withMongo(url, async (client) => {
        const parts: unknown[] = [];
        for (const name of [canaryDb, `${namespace}_by`]) {
          const db = client.db(name);
          const collections = await collectionNames(db, name === canaryDb ? ['canary'] : ['workflow_state', 'awaitly_snapshots']);
          for (const collection of collections) {
            parts.push(name, collection, await db.collection(collection).find({}).sort({ _id: 1 }).toArray());
          }
        }
        return createHash('sha256').update(JSON.stringify(parts)).digest('hex');
      }),
    remove: () => withMongo(url, (client) => client.db(canaryDb).dropDatabase().then(() => undefined, ignoreMissingCommand)),
  };
}
