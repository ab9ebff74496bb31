import { findMongoServer, startJongodb, type FoundBackend } from '@stowage/test-env';
import { MongoClient } from 'mongodb';
import { afterAll, describe, it } from 'vitest';
import { uniqueName, type MongoTestServer } from './mongo-adapter.js';

/** Which product answered: behaviour the tests expect differs by it (see the README, "Verified where"). */
export type ServerProduct = 'mongodb' | 'ferretdb' | 'jongodb';

export interface OpenedTestServer extends MongoTestServer {
  product: ServerProduct;
  /** The product with its version and topology, for test output. */
  description: string;
  /** Drops the test database (where the server can), closes the admin client, stops what the finder started. */
  close(): Promise<void>;
}

/**
 * Every Mongo server the tests run against, each with a fresh database for this test file:
 *
 * 1. the server `findMongoServer()` finds (`STOWAGE_MONGO_URL`, else a mongo:8 replica set in a
 *    testcontainer; FerretDB 1.x in this project's CI); none outside CI when there is neither
 *    (test-env warns), and a failure under CI=true;
 * 2. jongodb (npm `@jongodb/memory-server-bin-linux-x64-gnu`), started for this file: always
 *    there, so it runs under CI=true too. A second MongoDB-wire stand-in, with atomic updates,
 *    transactions and a replica-set topology, but no update pipelines and few operators.
 */
export async function openTestServers(stem: string): Promise<OpenedTestServer[]> {
  const found = await findMongoServer();
  const servers: OpenedTestServer[] = [];
  if (found) servers.push(await openServer(found, stem));
  servers.push(await openServer(await startJongodb(), stem));
  return servers;
}

async function openServer(found: FoundBackend, stem: string): Promise<OpenedTestServer> {
  const admin = new MongoClient(found.url);
  await admin.connect();
  const buildInfo = await admin.db('admin').command({ buildInfo: 1 });
  const hello = await admin.db('admin').command({ hello: 1 });
  const topology = typeof hello.setName === 'string' ? `replica set ${hello.setName}` : hello.msg === 'isdbgrid' ? 'mongos' : 'standalone';
  const version = String(buildInfo.version);
  const product: ServerProduct =
    'ferretdbVersion' in buildInfo || 'ferretdbFeatures' in buildInfo ? 'ferretdb' : version.endsWith('-jongodb') ? 'jongodb' : 'mongodb';
  const description =
    product === 'ferretdb' ? `FerretDB (reports MongoDB ${version}), ${topology}` : product === 'jongodb' ? `jongodb ${version}, ${topology}` : `MongoDB ${version}, ${topology}`;
  const database = uniqueName(stem);
  console.log(`[stowage mongo tests] ${found.label}: ${description}; database ${database}`);
  return {
    url: found.url,
    label: product === 'mongodb' ? `MongoDB ${version}` : product === 'ferretdb' ? 'FerretDB' : 'jongodb',
    admin,
    database,
    product,
    description,
    async close() {
      await admin.db(database).dropDatabase().catch(() => undefined); // jongodb has no dropDatabase: it is stopped below
      await admin.close();
      await found.stop();
    },
  };
}

/**
 * `body` once per server (a `describe` titled with the server), and a skipped case saying why
 * when there is none; the servers are closed after the file.
 */
export function describeEachServer(servers: OpenedTestServer[], title: string, body: (server: OpenedTestServer) => void): void {
  afterAll(() => Promise.all(servers.map((server) => server.close())));
  if (servers.length === 0) {
    describe(title, () => {
      it.skip('no MongoDB-wire server: set STOWAGE_MONGO_URL or make Docker available', () => {});
    });
  }
  for (const server of servers) describe(`${title} (${server.label})`, () => body(server));
}
