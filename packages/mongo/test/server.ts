import { findMongoServer } from '@stowage/test-env';
import { MongoClient } from 'mongodb';
import { uniqueName, type MongoTestServer } from './mongo-adapter.js';

export interface OpenedTestServer extends MongoTestServer {
  /** Which product answered: FerretDB, or MongoDB with its version and topology. */
  product: string;
  /** Drops the test database, closes the admin client, stops what the finder started. */
  close(): Promise<void>;
}

/**
 * The Mongo server tests run against (STOWAGE_MONGO_URL, else a mongo:8 testcontainer), with a
 * fresh database for this test file; `null` outside CI when there is none (test-env warns).
 */
export async function openTestServer(stem: string): Promise<OpenedTestServer | null> {
  const found = await findMongoServer();
  if (!found) return null;
  const admin = new MongoClient(found.url);
  await admin.connect();
  const buildInfo = await admin.db('admin').command({ buildInfo: 1 });
  const hello = await admin.db('admin').command({ hello: 1 });
  const topology = typeof hello.setName === 'string' ? `replica set ${hello.setName}` : hello.msg === 'isdbgrid' ? 'mongos' : 'standalone';
  const product =
    'ferretdbVersion' in buildInfo || 'ferretdbFeatures' in buildInfo
      ? `FerretDB (reports MongoDB ${buildInfo.version}), ${topology}`
      : `MongoDB ${buildInfo.version}, ${topology}`;
  const database = uniqueName(stem);
  console.log(`[stowage mongo tests] ${found.label}: ${product}; database ${database}`);
  return {
    url: found.url,
    label: product.split(',')[0]!,
    admin,
    database,
    product,
    async close() {
      await admin.db(database).dropDatabase().catch(() => undefined);
      await admin.close();
      await found.stop();
    },
  };
}
