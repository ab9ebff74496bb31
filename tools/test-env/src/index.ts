/**
 * Where tests, examples and benchmarks find their databases, in this order (design page):
 *
 * | backend   | 1. explicit URL env    | 2. Docker available                 | 3. always      |
 * | Postgres  | STOWAGE_POSTGRES_URL   | testcontainers postgres:17          | embedded PGlite |
 * | PgBouncer | STOWAGE_PGBOUNCER_URL  | —                                   | —              |
 * | MongoDB   | STOWAGE_MONGO_URL      | testcontainers mongo:8 (replica set) | jongodb (a second stand-in, see startJongodb) |
 *
 * Every finder says which one it used. Under CI=true, a backend whose URL was given but is
 * unreachable, or that was not found at all, is an error, never a silent skip.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { createPGliteSocketServer } from './pglite-batch-queue.mjs';
import { MongoClient } from 'mongodb';
import pg from 'pg';

export type BackendSource = 'env' | 'testcontainers' | 'embedded';

export interface FoundBackend {
  /** A connection URL for the real driver. */
  url: string;
  /** Where it came from: the env URL, a container, or embedded PGlite. */
  source: BackendSource;
  /** A human-readable line for test output: which server, found how. */
  label: string;
  /** Stops what the finder started (containers, embedded servers); no-op for env URLs. */
  stop(): Promise<void>;
}

export const isCI = /^(1|true)$/i.test(process.env.CI ?? '');

function missing(message: string): null {
  if (isCI) throw new Error(`${message} (CI=true: a missing backend fails the run)`);
  console.warn(`[stowage test-env] ${message}`);
  return null;
}

async function dockerAvailable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

async function assertPostgresReachable(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    await client.query('select 1');
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function assertMongoReachable(url: string): Promise<void> {
  const client = new MongoClient(url, { serverSelectionTimeoutMS: 5000 });
  try {
    await client.connect();
    await client.db('admin').command({ ping: 1 });
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** A real PostgreSQL server: STOWAGE_POSTGRES_URL, else testcontainers postgres:17, else `null`. */
export async function findPostgresServer(): Promise<FoundBackend | null> {
  const url = process.env.STOWAGE_POSTGRES_URL;
  if (url) {
    try {
      await assertPostgresReachable(url);
    } catch (error) {
      throw new Error(`STOWAGE_POSTGRES_URL is set but unreachable: ${(error as Error).message}`, { cause: error });
    }
    return { url, source: 'env', label: `postgres server from STOWAGE_POSTGRES_URL`, stop: async () => {} };
  }
  if (await dockerAvailable()) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:17').start();
    return {
      url: container.getConnectionUri(),
      source: 'testcontainers',
      label: 'postgres:17 in a testcontainer',
      stop: async () => void (await container.stop()),
    };
  }
  return missing('no PostgreSQL server: set STOWAGE_POSTGRES_URL or make Docker available');
}

/**
 * PgBouncer in transaction mode in front of a PostgreSQL server (`STOWAGE_PGBOUNCER_URL`;
 * `.ci/pgbouncer.sh start` starts one), or `null` outside CI when none is set. A transaction
 * pooler hands each transaction to any server connection: what stowage must survive there is
 * named prepared statements, session state and LISTEN.
 */
export async function findPgBouncer(): Promise<FoundBackend | null> {
  const url = process.env.STOWAGE_PGBOUNCER_URL;
  if (!url) return missing('no PgBouncer: set STOWAGE_PGBOUNCER_URL (`.ci/pgbouncer.sh start` prints one)');
  try {
    await assertPostgresReachable(url);
  } catch (error) {
    throw new Error(`STOWAGE_PGBOUNCER_URL is set but unreachable: ${(error as Error).message}`, { cause: error });
  }
  return { url, source: 'env', label: 'PgBouncer (transaction mode) from STOWAGE_PGBOUNCER_URL', stop: async () => {} };
}

export interface EmbeddedPostgresOptions {
  /** Connections the embedded server multiplexes at once (default 16). */
  maxConnections?: number;
  /**
   * Run PGlite in a child process instead of this one. PGlite takes `now()` from its host
   * process's clock, so tests that skew the client's `Date` need it elsewhere, as a real
   * server would be.
   */
  separateProcess?: boolean;
}

/** Embedded PGlite behind `@electric-sql/pglite-socket`, spoken to with the real `pg` driver. Always available. */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions = {}): Promise<FoundBackend> {
  if (options.separateProcess) return startEmbeddedPostgresProcess(options.maxConnections ?? 16);
  const db = await PGlite.create();
  const server = createPGliteSocketServer(PGLiteSocketServer, db, options.maxConnections ?? 16);
  await server.start();
  const address = server.getServerConn();
  return {
    url: `postgresql://postgres@${address}/postgres?sslmode=disable`,
    source: 'embedded',
    label: `embedded PGlite at ${address}`,
    stop: async () => {
      await server.stop();
      await db.close();
    },
  };
}

async function startEmbeddedPostgresProcess(maxConnections: number): Promise<FoundBackend> {
  const script = fileURLToPath(new URL('./pglite-server.mjs', import.meta.url));
  const child = spawn(process.execPath, [script, String(maxConnections)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const address = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.once('line', (line) => {
      try {
        resolve((JSON.parse(line) as { address: string }).address);
      } catch (error) {
        reject(error);
      }
    });
    child.once('exit', (code) => reject(new Error(`embedded PGlite process exited with code ${code}`)));
  });
  return {
    url: `postgresql://postgres@${address}/postgres?sslmode=disable`,
    source: 'embedded',
    label: `embedded PGlite at ${address} (own process)`,
    stop: async () => {
      child.stdin.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * What the Postgres examples run against: `DATABASE_URL` when it is set, otherwise embedded
 * PGlite served on a local TCP port, so the `pg` driver and every child process talk to it
 * exactly as they would to a real server. Nothing to install or configure.
 */
export async function connectExampleDatabase(): Promise<FoundBackend> {
  const url = process.env.DATABASE_URL;
  if (url) {
    const redacted = url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
    return { url, source: 'env', label: `PostgreSQL at ${redacted} (from DATABASE_URL)`, stop: async () => {} };
  }
  const embedded = await startEmbeddedPostgres();
  return { ...embedded, label: `${embedded.label} (no DATABASE_URL set; set it to use your own server)` };
}

/**
 * jongodb (npm `@jongodb/memory-server-bin-linux-x64-gnu`, a native build of an in-memory
 * MongoDB-wire server) started for this process as a single-node replica set: the second
 * MongoDB stand-in, always available on linux-x64. It applies concurrent updates atomically and
 * has transactions and a replica-set topology, but no update pipelines and few operators; the
 * Mongo adapter's capability detection must classify it. `stop()` ends it (SIGTERM).
 */
export async function startJongodb(): Promise<FoundBackend> {
  const binary = jongodbBinary();
  const child = spawn(binary, ['--host=127.0.0.1', '--port=0', '--topology-profile=singleNodeReplicaSet', '--replica-set-name=rs0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // jongodb logs every client connection that closes ("tcp client io failure: Connection
  // reset"); the rest of what it says goes on to stderr.
  createInterface({ input: child.stderr }).on('line', (line) => {
    if (!line.includes('tcp client io failure')) process.stderr.write(`[jongodb] ${line}\n`);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      if (line.startsWith('JONGODB_URI=')) resolve(line.slice('JONGODB_URI='.length).trim());
    });
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`jongodb exited with code ${code} before it was ready`)));
  });
  // jongodb now and then ends a streamed heartbeat reply early ("Server ended moreToCome
  // unexpectedly"); the driver then clears the connection pool and fails the operations waiting
  // for it. Polled heartbeats (the driver's mode where streaming is unavailable) avoid that.
  const polled = new URL(url);
  polled.searchParams.set('serverMonitoringMode', 'poll');
  return {
    url: polled.toString(),
    source: 'embedded',
    label: `jongodb at ${polled.host} (own process)`,
    stop: async () => {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

function jongodbBinary(): string {
  const manifest = fileURLToPath(import.meta.resolve('@jongodb/memory-server-bin-linux-x64-gnu/package.json'));
  return manifest.replace(/package\.json$/, 'bin/jongodb');
}

/** A MongoDB-wire server: STOWAGE_MONGO_URL, else testcontainers mongo:8 as a replica set, else `null`. */
export async function findMongoServer(): Promise<FoundBackend | null> {
  const url = process.env.STOWAGE_MONGO_URL;
  if (url) {
    try {
      await assertMongoReachable(url);
    } catch (error) {
      throw new Error(`STOWAGE_MONGO_URL is set but unreachable: ${(error as Error).message}`, { cause: error });
    }
    return { url, source: 'env', label: `mongo server from STOWAGE_MONGO_URL`, stop: async () => {} };
  }
  if (await dockerAvailable()) {
    const { MongoDBContainer } = await import('@testcontainers/mongodb');
    const container = await new MongoDBContainer('mongo:8').start();
    return {
      url: `${container.getConnectionString()}?directConnection=true`,
      source: 'testcontainers',
      label: 'mongo:8 replica set in a testcontainer',
      stop: async () => void (await container.stop()),
    };
  }
  return missing('no MongoDB server: set STOWAGE_MONGO_URL or make Docker available');
}
