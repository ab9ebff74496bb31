/**
 * Where the samples run, and how. A sample is a module whose top-level code is the docs' block;
 * `runSample` evaluates it afresh (after `vi.resetModules()`) with the environment the block
 * expects (`DATABASE_URL`, `MONGODB_URI`, and for `postgresql://localhost/mydb` the standard
 * `PGUSER` / `PGPORT` / `PGPASSWORD` that the `pg` driver reads for what a URL leaves out).
 *
 * Every run gets databases of its own where the samples let it (a database per run on the
 * PostgreSQL server, a fresh PGlite, a MongoDB database per run); the names the samples spell
 * out (`mydb`, `myapp`) are created when missing and their rows removed afterwards.
 */
import { randomUUID } from 'node:crypto';
import { findMongoServer, findPostgresServer, startEmbeddedPostgres, type FoundBackend } from '@stowage/test-env';
import { MongoClient } from 'mongodb';
import pg from 'pg';
import { vi } from 'vitest';

export function unique(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
}

/**
 * Evaluates `src/<path>` afresh and returns its exports. The path is computed, so `tsc` does
 * not pull the samples that cannot type-check into this program (see tsconfig.json).
 */
export async function runSample<T>(path: string): Promise<T> {
  return (await import(/* @vite-ignore */ new URL(`../src/${path}`, import.meta.url).href)) as T;
}

/** A fresh module registry, so the next `runSample` runs its block (and deps.ts) again. */
export function freshModules(): void {
  vi.resetModules();
}

/**
 * Sets environment variables until the returned function restores them. For the whole of a
 * backend's tests: the `pg` driver reads PGUSER / PGPORT when it opens a connection, which a
 * store does on its first call, not when it is created.
 */
export function setEnv(env: Record<string, string>): () => void {
  const saved = Object.fromEntries(Object.keys(env).map((name) => [name, process.env[name]]));
  Object.assign(process.env, env);
  return () => {
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  };
}

export interface PostgresTarget {
  label: string;
  /** DATABASE_URL: a database of this run. */
  databaseUrl: string;
  /** What `postgresql://localhost/<database>` needs from the environment to reach this backend. */
  localhostEnv: Record<string, string>;
  /** The backend is what `localhost:5432` (spelled out by some samples) reaches. */
  isLocalhost5432: boolean;
  /** Runs SQL in the run's database (`app`) or in a database a sample names. */
  query(database: 'app' | 'mydb' | 'myapp', text: string, values?: unknown[]): Promise<pg.QueryResult>;
  stop(): Promise<void>;
}

async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

/** Creates `name` unless it exists (another run may create it at the same moment). */
async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  await withClient(adminUrl, async (client) => {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (rowCount) return;
    await client.query(`CREATE DATABASE "${name}"`).catch((error: { code?: string }) => {
      if (error.code !== '42P04' && error.code !== '23505') throw error; // created meanwhile
    });
  });
}

function databaseUrl(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** Embedded PGlite: one instance plays `localhost` (the samples' `mydb`, `myapp`), another is DATABASE_URL. */
export async function embeddedPostgres(): Promise<PostgresTarget> {
  const [local, app] = await Promise.all([startEmbeddedPostgres(), startEmbeddedPostgres()]);
  const localUrl = new URL(local.url);
  return {
    label: `embedded PGlite (${local.label}; DATABASE_URL: ${app.label})`,
    databaseUrl: app.url,
    localhostEnv: { PGUSER: decodeURIComponent(localUrl.username), PGPORT: localUrl.port },
    isLocalhost5432: false,
    query: (database, text, values) => withClient(database === 'app' ? app.url : local.url, (client) => client.query(text, values)),
    stop: async () => {
      await Promise.all([local.stop(), app.stop()]);
    },
  };
}

/** The PostgreSQL server (STOWAGE_POSTGRES_URL): a database of this run, plus `mydb` and `myapp` where the samples name them. */
export async function serverPostgres(): Promise<PostgresTarget | null> {
  const found: FoundBackend | null = await findPostgresServer();
  if (found === null) return null;
  const server = new URL(found.url);
  const run = unique('seeds');
  await ensureDatabase(found.url, run);
  await Promise.all([ensureDatabase(found.url, 'mydb'), ensureDatabase(found.url, 'myapp')]);
  const port = server.port || '5432';
  const local = ['localhost', '127.0.0.1', '[::1]'].includes(server.hostname);
  const env: Record<string, string> = { PGUSER: decodeURIComponent(server.username || 'postgres'), PGPORT: port };
  if (server.password) env.PGPASSWORD = decodeURIComponent(server.password);
  return {
    label: found.label,
    databaseUrl: databaseUrl(found.url, run),
    localhostEnv: local ? env : {},
    isLocalhost5432: local && port === '5432',
    query: (database, text, values) =>
      withClient(databaseUrl(found.url, database === 'app' ? run : database), (client) => client.query(text, values)),
    stop: async () => {
      await withClient(found.url, (client) => client.query(`DROP DATABASE IF EXISTS "${run}" WITH (FORCE)`));
      await found.stop();
    },
  };
}

export interface MongoTarget {
  label: string;
  /** MONGODB_URI: its default database is one of this run. */
  uri: string;
  client: MongoClient;
  stop(): Promise<void>;
}

/** The MongoDB stand-in (STOWAGE_MONGO_URL), with a database of this run as the URI's default. */
export async function mongoServer(): Promise<MongoTarget | null> {
  const found = await findMongoServer();
  if (found === null) return null;
  const run = unique('seeds');
  const client = new MongoClient(found.url);
  return {
    label: found.label,
    uri: databaseUrl(found.url, run),
    client,
    stop: async () => {
      await client.db(run).dropDatabase().catch(() => undefined);
      await client.db('myapp').dropDatabase().catch(() => undefined); // the samples' own database name
      await client.close();
      await found.stop();
    },
  };
}

/** What the samples open and the tests close afterwards: stores and clients (`close`), pools (`end`). */
export interface Closable {
  close(): Promise<void>;
}

/** The stores, clients and pools among a sample's exports, each as something to close. */
export function resourcesOf(exports: object): Closable[] {
  const resources: Closable[] = [];
  for (const value of Object.values(exports)) {
    if (typeof value !== 'object' || value === null) continue;
    const { close, end } = value as { close?: () => Promise<void>; end?: () => Promise<void> };
    if (typeof close === 'function') resources.push({ close: () => close.call(value) });
    else if (typeof end === 'function') resources.push({ close: () => end.call(value) });
  }
  return resources;
}
